# cython: boundscheck=False, wraparound=False
"""The pub/sub message frames of :mod:`router.resp`, built with ``memcpy`` in
one bytes object of the right size (the compiled plane's
:class:`router.pubsub.PubSub` cimports them; ``tests/router/test_resp.py``
compares them with :func:`router.resp.message` and :func:`router.resp.smessage`),
and MONITOR's lines (:func:`monitor_line`, :mod:`router.hooks` calls it;
``tests/router/test_hooks.py`` compares it with
:func:`router.hooks.python_monitor_line`)."""

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


# ---------------------------------------------------------------- MONITOR lines

#: per byte: its width in Redis's ``sdscatrepr`` (1 printable, 2 ``\n`` ...,
#: 4 ``\xhh``) and the letter of its two-byte escape (0: none)
cdef unsigned char _WIDTH[256]
cdef char _LETTER[256]
cdef const char* _HEX = b"0123456789abcdef"


cdef void _tables() noexcept:
    cdef int c
    for c in range(256):
        _WIDTH[c] = 1 if 32 <= c <= 126 else 4
        _LETTER[c] = 0
    for c, letter in ((92, 92), (34, 34), (10, 110), (13, 114), (9, 116), (7, 97), (8, 98)):
        _WIDTH[c] = 2
        _LETTER[c] = letter


_tables()


cpdef bytes monitor_line(bytes head, list args):
    """``head``, then `` "<arg>"`` per argument escaped as Redis's
    ``sdscatrepr`` escapes it, then CRLF: a MONITOR line, sized in one pass
    and written in a second into one bytes object (at most 4x the arguments;
    :func:`router.hooks.python_monitor_line` is the pure-Python data plane's)."""
    cdef Py_ssize_t size = len(head) + 2, n, i
    cdef const unsigned char* r
    cdef unsigned char c
    cdef bytes arg
    for arg in args:
        if arg is None:
            raise TypeError("a MONITOR argument is None")
        r = <const unsigned char*>PyBytes_AS_STRING(arg)
        n = len(arg)
        size += 3
        for i in range(n):
            size += _WIDTH[r[i]]
    cdef bytes line = PyBytes_FromStringAndSize(NULL, size)
    cdef char* w = PyBytes_AS_STRING(line)
    n = len(head)
    memcpy(w, PyBytes_AS_STRING(head), n)
    w += n
    for arg in args:
        r = <const unsigned char*>PyBytes_AS_STRING(arg)
        n = len(arg)
        w[0] = c' '
        w[1] = c'"'
        w += 2
        for i in range(n):
            c = r[i]
            if _WIDTH[c] == 1:
                w[0] = <char>c
                w += 1
            elif _LETTER[c]:
                w[0] = c'\\'
                w[1] = _LETTER[c]
                w += 2
            else:
                w[0] = c'\\'
                w[1] = c'x'
                w[2] = _HEX[c >> 4]
                w[3] = _HEX[c & 15]
                w += 4
        w[0] = c'"'
        w += 1
    w[0] = c'\r'
    w[1] = c'\n'
    return line
