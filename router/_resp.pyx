# cython: boundscheck=False, wraparound=False
"""The pub/sub message frames of :mod:`router.resp`, built with ``memcpy`` in
one bytes object of the right size (the compiled plane's
:class:`router.pubsub.PubSub` cimports them; ``tests/router/test_resp.py``
compares them with :func:`router.resp.message` and :func:`router.resp.smessage`)."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcpy


cdef inline Py_ssize_t _digits(Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t size = 1
    while n >= 10:
        size += 1
        n //= 10
    return size


cdef inline char* _bulk(char* w, const char* data, Py_ssize_t n) noexcept nogil:
    """``$<n>\\r\\n<data>\\r\\n`` at ``w``; returns the byte after it."""
    cdef Py_ssize_t d = _digits(n), i = d, v = n
    w[0] = c'$'
    while i:
        w[i] = <char>(c'0' + v % 10)
        v //= 10
        i -= 1
    w[d + 1] = c'\r'
    w[d + 2] = c'\n'
    w += d + 3
    memcpy(w, data, n)
    w[n] = c'\r'
    w[n + 1] = c'\n'
    return w + n + 2


cdef bytes _frame3(const char* head, Py_ssize_t nh, bytes channel, bytes payload):
    """``head`` (a three-element array's header and first bulk, ``nh`` bytes),
    then ``channel`` and ``payload`` as bulk strings."""
    cdef Py_ssize_t nc = len(channel), nm = len(payload)
    cdef bytes frame = PyBytes_FromStringAndSize(
        NULL, nh + _digits(nc) + nc + 5 + _digits(nm) + nm + 5
    )
    cdef char* w = PyBytes_AS_STRING(frame)
    memcpy(w, head, nh)
    w = _bulk(w + nh, PyBytes_AS_STRING(channel), nc)
    _bulk(w, PyBytes_AS_STRING(payload), nm)
    return frame


cpdef bytes message(bytes channel, bytes payload):
    """``[message, channel, payload]`` (RESP2), as :func:`router.resp.message`."""
    return _frame3(b"*3\r\n$7\r\nmessage\r\n", 17, channel, payload)


cpdef bytes smessage(bytes channel, bytes payload):
    """``[smessage, shard channel, payload]`` (RESP2), as :func:`router.resp.smessage`."""
    return _frame3(b"*3\r\n$8\r\nsmessage\r\n", 18, channel, payload)
