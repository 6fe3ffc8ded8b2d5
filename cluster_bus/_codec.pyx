# cython: boundscheck=False, wraparound=False
"""The bus codec's C-pointer twins (issue 42): a run of PUBLISH frames read
(:func:`decode_publishes`) and one written (:func:`encode_publish`), the
Python ones being :func:`cluster_bus.codec.decode_publishes` and
:func:`cluster_bus.codec.encode_publish`. The compiled decoder and sessions
(``cluster_bus._decoder``, ``cluster_bus._session``) cimport them; the
fuzzers (``tests/fuzz/fuzz_forwarding.py``, ``fuzz_bus.py``) compare the two
planes' frames and decoded messages."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_Append
from cpython.long cimport PyLong_FromUnsignedLong, PyLong_FromUnsignedLongLong
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from cluster_bus.codec import (
    HEADER_SIZE as _HEADER_SIZE,
    MAGIC as _MAGIC,
    PUBLISH_HEADER_SIZE as _PUBLISH_HEADER_SIZE,
    VERSION as _VERSION,
    _T_PUBLISH,
    encode_publish as _encode_publish,
)
from cluster_bus.frames import FLAG_SHARD as _FLAG_SHARD, Publish as _Publish

cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* t, Py_ssize_t n)

cdef Py_ssize_t HEADER_SIZE = _HEADER_SIZE  # 14
cdef Py_ssize_t PUBLISH_HEADER_SIZE = _PUBLISH_HEADER_SIZE  # 30
cdef uint8_t MAGIC0 = _MAGIC[0], MAGIC1 = _MAGIC[1], VERSION = _VERSION, T_PUBLISH = _T_PUBLISH
cdef unsigned int FLAG_SHARD = _FLAG_SHARD
cdef object PUBLISH = _Publish


cdef inline uint32_t _be32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = v >> 16
    p[2] = v >> 8
    p[3] = v


cdef inline void _put(msg, Py_ssize_t i, item) noexcept:
    Py_INCREF(item)  # PyTuple_SET_ITEM steals a reference
    PyTuple_SET_ITEM(msg, i, item)


cpdef Py_ssize_t decode_publishes(bytes data, Py_ssize_t pos, expect, Py_ssize_t max_body,
                                  list out) except -1:
    """:func:`cluster_bus.codec.decode_publishes` by C pointers: the complete
    PUBLISH frames from ``pos`` on that pass every check, as ``Publish``
    tuples appended to ``out``; returns where the first other one begins."""
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef const uint8_t* h
    cdef Py_ssize_t end = len(data), stop, cstart, clen, length
    cdef bint check = expect is not None
    if check and not (type(expect) is int and 0 <= expect <= 0xFFFFFFFF):
        return pos  # no frame's sender can be it: the general path says so
    cdef uint32_t sender = expect if check else 0
    while end - pos >= PUBLISH_HEADER_SIZE and p[pos + 3] == T_PUBLISH:
        h = p + pos
        length = _be32(h + 6)
        stop = pos + HEADER_SIZE + length
        clen = _be32(h + 26)
        cstart = pos + PUBLISH_HEADER_SIZE
        if (h[0] != MAGIC0 or h[1] != MAGIC1 or h[2] != VERSION or length > max_body
                or (check and _be32(h + 10) != sender) or stop > end or length < 16
                or cstart + clen > stop):
            break
        msg = PyType_GenericAlloc(<PyTypeObject*>PUBLISH, 5)  # (tuple.__new__: no Python call)
        _put(msg, 0, PyLong_FromUnsignedLong(_be32(h + 14)))
        _put(msg, 1, PyLong_FromUnsignedLongLong((<uint64_t>_be32(h + 18) << 32) | _be32(h + 22)))
        _put(msg, 2, ((h[4] << 8 | h[5]) & FLAG_SHARD) != 0)
        _put(msg, 3, PyBytes_FromStringAndSize(<const char*>p + cstart, clen))
        _put(msg, 4, PyBytes_FromStringAndSize(<const char*>p + cstart + clen, stop - cstart - clen))
        PyList_Append(out, msg)
        pos = stop
    return pos


cpdef bytes encode_publish(sender, seq, origin_seq, shard, channel, payload):
    """:func:`cluster_bus.codec.encode_publish` in C when every field fits its
    place in the frame (else that function, which raises ``struct.error``)."""
    if not (type(sender) is int and type(seq) is int and type(origin_seq) is int
            and type(channel) is bytes and type(payload) is bytes
            and 0 <= sender <= 0xFFFFFFFF and 0 <= origin_seq <= 0xFFFFFFFFFFFFFFFF):
        return _encode_publish(sender, seq, origin_seq, shard, channel, payload)
    return publish_frame(sender, <uint32_t>(seq & 0xFFFFFFFF), origin_seq, shard, channel,
                         payload)


cdef bytes publish_frame(sender, uint32_t seq, origin_seq, bint shard, bytes channel,
                         bytes payload):
    """:func:`encode_publish` for the compiled session (``OutSession.publish``,
    which numbers ``seq`` in C): ``sender`` and ``origin_seq`` converted in C
    when they fit their places (else the Python function, which raises
    ``struct.error``)."""
    cdef uint32_t who
    cdef uint64_t number
    if channel is None or payload is None or type(sender) is not int or type(origin_seq) is not int:
        return _encode_publish(sender, seq, origin_seq, shard, channel, payload)
    try:
        who = sender
        number = origin_seq
    except OverflowError:
        return _encode_publish(sender, seq, origin_seq, shard, channel, payload)
    cdef Py_ssize_t nc = len(channel), nm = len(payload)
    if 16 + nc + nm > 0xFFFFFFFF:
        return _encode_publish(sender, seq, origin_seq, shard, channel, payload)
    cdef bytes frame = PyBytes_FromStringAndSize(NULL, PUBLISH_HEADER_SIZE + nc + nm)
    cdef uint8_t* w = <uint8_t*>PyBytes_AS_STRING(frame)
    w[0] = MAGIC0
    w[1] = MAGIC1
    w[2] = VERSION
    w[3] = T_PUBLISH
    w[4] = 0
    w[5] = FLAG_SHARD if shard else 0
    _put32(w + 6, <uint32_t>(16 + nc + nm))
    _put32(w + 10, who)
    _put32(w + 14, seq)
    _put32(w + 18, <uint32_t>(number >> 32))
    _put32(w + 22, <uint32_t>number)
    _put32(w + 26, <uint32_t>nc)
    memcpy(w + 30, PyBytes_AS_STRING(channel), nc)
    memcpy(w + 30 + nc, PyBytes_AS_STRING(payload), nm)
    return frame


cpdef tuple decode_positions(body, Py_ssize_t at, Py_ssize_t n, unsigned long long m):
    """:func:`cluster_bus.codec.decode_positions` by C pointers: a
    FILTER_DELTA's ``n`` big-endian u32 positions from ``body[at:]`` as a
    tuple, or None when one is >= ``m``; ValueError when ``body`` is short."""
    if type(body) is not bytes:
        body = bytes(body)
    if n < 0 or at < 0 or at + 4 * n > len(body):
        raise ValueError("FILTER_DELTA positions past the body")
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(<bytes>body) + at
    cdef Py_ssize_t i
    for i in range(n):
        if _be32(p + 4 * i) >= m:
            return None
    cdef tuple out = PyTuple_New(n)
    for i in range(n):
        _put(out, i, PyLong_FromUnsignedLong(_be32(p + 4 * i)))
    return out
