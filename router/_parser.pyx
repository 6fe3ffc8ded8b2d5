# cython: boundscheck=False, wraparound=False, initializedcheck=False
"""The compiled RequestParser: the C-pointer framing of the request parser
(issue 29), typed Cython; the reference is :class:`router.parser.RequestParser`
(pure Python + hiredis), which :mod:`router.dataplane` picks instead on the
pure-Python data plane.

It has the reference's public API, returns the same requests, raises the
same :class:`router.parser.ProtocolError` with the same text at the same
byte and leaves the same state (``buffered``, ``partial_bytes``,
``backlog``, ``query_buffer``, ``release``); ``tests/fuzz/fuzz_resp.py``
checks it.

It parses from the buffer with C pointers, following Redis 7.0.15
``src/networking.c``: ``processMultibulkBuffer`` (the count line, the bulk
lines, their limits and error texts) and ``processInlineBuffer`` (the line's
framing and its limit). Nothing is delegated to the Python parser; the one
Python call left is :func:`router.inline.split_args` (Redis's ``sdssplitargs``:
quotes and escapes) on an inline request's line, which is rare traffic.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.string cimport memchr, memcpy

cimport cython

from router.inline import split_args
from router.parser import (
    INLINE_MAX_SIZE as _INLINE_MAX_SIZE,
    SLICE_BULKS as _SLICE_BULKS,
    UNAUTH_MAX_BULK as _UNAUTH_MAX_BULK,
    UNAUTH_MAX_MULTIBULK as _UNAUTH_MAX_MULTIBULK,
    ProtocolError,
)

cdef Py_ssize_t INLINE_MAX_SIZE = _INLINE_MAX_SIZE
cdef Py_ssize_t SLICE_BULKS = _SLICE_BULKS
cdef long long UNAUTH_MAX_BULK = _UNAUTH_MAX_BULK
cdef long long UNAUTH_MAX_MULTIBULK = _UNAUTH_MAX_MULTIBULK


cdef inline bint _string2ll(const char* s, Py_ssize_t n, long long* out) noexcept nogil:
    """Redis ``string2ll`` (src/util.c) as :func:`router.parser.string2ll`:
    optional ``-``, digits, no ``+``, no leading zero, at most 20 bytes,
    within a signed 64-bit integer. Returns whether it parsed."""
    cdef Py_ssize_t i = 0
    cdef bint negative = False
    cdef unsigned long long v = 0
    if n <= 0 or n > 20:
        return False
    if n == 1 and s[0] == c'0':
        out[0] = 0
        return True
    if s[0] == c'-':
        negative = True
        i = 1
    if i >= n or s[i] < c'1' or s[i] > c'9':
        return False
    # at most 19 digits fit an unsigned 64-bit value without overflow
    if n - i > 19:
        return False
    while i < n:
        if s[i] < c'0' or s[i] > c'9':
            return False
        v = v * 10 + <unsigned long long>(s[i] - c'0')
        i += 1
    if negative:
        if v > 9223372036854775808ULL:
            return False
        out[0] = <long long>(0ULL - v)
    else:
        if v > 9223372036854775807ULL:
            return False
        out[0] = <long long>v
    return True


cdef inline bint _plain(const char* s, Py_ssize_t n) noexcept nogil:
    """The reference's plain bulk length: ASCII digits, no leading zero
    (``0`` itself is plain), fewer than 19 of them."""
    cdef Py_ssize_t i
    if n <= 0 or n >= 19:
        return False
    if s[0] == c'0' and n != 1:
        return False
    for i in range(n):
        if s[i] < c'0' or s[i] > c'9':
            return False
    return True


cdef class RequestParser:
    """Incremental request parser (sans-IO), the compiled twin of
    :class:`router.parser.RequestParser` (same API and behaviour; see there).

    ``feed(data)`` appends bytes; ``requests()`` iterates over the complete
    requests buffered (lists of bytes); ``next_request()`` returns one or None;
    both raise :class:`router.parser.ProtocolError` with Redis's text.
    ``fast`` is accepted for the reference's signature and ignored: there is
    one path here.
    """

    def __init__(self, max_bulk, max_multibulk, *, fast=True):
        self._buf = bytearray()
        self._pos = 0
        self._read_start = 0
        self._args = []
        self._pending = 0
        self.max_bulk = max_bulk
        self.max_multibulk = max_multibulk
        self.authenticated = True
        self.backlog = False
        self._unread = None

    cpdef feed(self, data):
        """Append ``data`` (bytes-like); the parsed head of the buffer is
        dropped as the reference does (so ``query_buffer`` agrees)."""
        self._feed(data)

    cdef int _feed(self, data) except -1:
        cdef bytearray buf = self._buf
        cdef Py_ssize_t pos = self._pos
        cdef Py_ssize_t size = PyByteArray_GET_SIZE(buf)
        cdef Py_ssize_t n
        if pos and pos == size:
            # all was parsed: the read replaces the buffer in place, as the
            # reference does (``buf[:] = data``: the same allocation after)
            self._pos = self._read_start = 0
            if type(data) is bytes and PyBytes_GET_SIZE(data) == size:
                # what bytearray's slice assignment does at the same size: a copy
                memcpy(PyByteArray_AS_STRING(buf), PyBytes_AS_STRING(data), size)
            else:
                buf[:] = data
            return 0
        if pos > 65536:
            del buf[:pos]
            self._pos = pos = 0
        self._read_start = pos
        if type(data) is bytes:  # buf += data, as bytearray's += does it for bytes
            n = PyBytes_GET_SIZE(data)
            if n:
                size = PyByteArray_GET_SIZE(buf)
                PyByteArray_Resize(buf, size + n)
                memcpy(PyByteArray_AS_STRING(buf) + size, PyBytes_AS_STRING(data), n)
        else:
            buf += data
        return 0

    def release(self):
        """Hand over the arguments of a request still being read (a closed
        connection): the caller frees them in slices, not in one go."""
        args = self._args
        self._args = []
        self._pending = 0
        return args

    @property
    def buffered(self):
        """Bytes received and not yet parsed."""
        return PyByteArray_GET_SIZE(self._buf) - self._pos

    def query_buffer(self, bint running):
        """CLIENT LIST's ``qbuf``, ``qbuf-free`` and the buffer's allocation
        (as :meth:`router.parser.RequestParser.query_buffer`)."""
        buf = self._buf
        cdef Py_ssize_t size = PyByteArray_GET_SIZE(self._buf)
        used = size - (self._read_start if running else self._pos)
        allocated = buf.__alloc__()
        return used, max(allocated - size - 1, 0), allocated

    @property
    def partial_bytes(self):
        """The bytes of the arguments read so far of a request still arriving
        (Redis's ``argv_len_sum`` between two reads)."""
        cdef Py_ssize_t total = 0
        cdef bytes a
        for a in self._args:
            total += len(a)
        return total

    def next_request(self):
        """The next complete request, or None when more bytes are needed
        (parsing on through every slice)."""
        req = self._next()
        while req is None and self.backlog:
            req = self._next()
        return req

    cpdef requests(self):
        """Every complete request buffered, in order, parsed one per step
        (the caller may stop early: the rest stays buffered). Raises
        ProtocolError after the requests that precede the bad one."""
        return self

    def unread(self, req):
        """Put back ``req``, the last request taken: the next one taken."""
        self._unread = req

    def __iter__(self):
        return self

    def __next__(self):
        req = self._next()
        if req is None:
            raise StopIteration
        return req

    cdef object _next(self):
        """The reference's ``_next_slow``: one request, or None (a request
        put back with ``unread`` first)."""
        cdef Py_ssize_t size
        cdef int done
        if self._unread is not None:
            req = self._unread
            self._unread = None
            return req
        while True:
            if self._pending:
                return self._read_bulks()
            size = PyByteArray_GET_SIZE(self._buf)
            if self._pos >= size:
                return None
            if PyByteArray_AS_STRING(self._buf)[self._pos] == c'*':
                done = self._read_multibulk_header()
                if not done:
                    return None
                continue  # bulks follow, or *0 / *-1: Redis skips the line
            args = self._read_inline()
            if args is None:
                return None
            if args:
                return args

    cdef int _read_multibulk_header(self) except -1:
        """processMultibulkBuffer's count line: 1 read (``_pending`` set),
        0 wait for more bytes; raises ProtocolError as Redis replies."""
        cdef const char* p = PyByteArray_AS_STRING(self._buf)
        cdef Py_ssize_t end = PyByteArray_GET_SIZE(self._buf)
        cdef Py_ssize_t pos = self._pos
        cdef const char* crp = <const char*>memchr(p + pos, c'\r', end - pos)
        cdef Py_ssize_t cr
        cdef long long count = 0
        cdef bint ok = False
        if crp != NULL:
            cr = crp - p
            ok = _string2ll(p + pos + 1, cr - pos - 1, &count)
        # a line ends at its first CR (strchr): a NUL before it hides it
        if crp == NULL or (not ok and memchr(p + pos, 0, cr - pos) != NULL):
            if end - pos > INLINE_MAX_SIZE:
                raise ProtocolError("ERR Protocol error: too big mbulk count string")
            return 0
        if cr > end - 2:
            return 0  # the byte after the CR has not come yet
        if not ok or count > self.max_multibulk:
            raise ProtocolError("ERR Protocol error: invalid multibulk length")
        if count > UNAUTH_MAX_MULTIBULK and not self.authenticated:
            raise ProtocolError("ERR Protocol error: unauthenticated multibulk length")
        self._pos = cr + 2  # the CR and the byte after it, whatever it is
        self._args = []
        self._pending = count if count > 0 else 0
        return 1

    cdef object _read_bulks(self):
        """processMultibulkBuffer's bulks: the request's args list, or None
        (more bytes needed, or SLICE_BULKS bulks read: ``backlog``)."""
        cdef bytearray buf = self._buf
        cdef const char* p = PyByteArray_AS_STRING(buf)
        cdef Py_ssize_t end = PyByteArray_GET_SIZE(buf)
        cdef Py_ssize_t pos = self._pos
        cdef list args = self._args
        cdef Py_ssize_t budget = SLICE_BULKS
        cdef const char* crp
        cdef Py_ssize_t cr, start
        cdef long long size
        cdef bint ok, plain
        self.backlog = False
        while self._pending:
            if not budget:
                self.backlog = True
                self._pos = pos
                return None
            budget -= 1
            crp = <const char*>memchr(p + pos, c'\r', end - pos)
            ok = plain = False
            if crp != NULL:
                cr = crp - p
                # '$' first: any other byte may be the NUL that hides the line
                plain = p[pos] == c'$' and _plain(p + pos + 1, cr - pos - 1)
                ok = _string2ll(p + pos + 1, cr - pos - 1, &size)
            if not plain and (crp == NULL or memchr(p + pos, 0, cr - pos) != NULL):
                if end - pos > INLINE_MAX_SIZE:
                    raise ProtocolError("ERR Protocol error: too big bulk count string")
                self._pos = pos
                return None
            if cr > end - 2:  # the byte after the CR has not come yet
                self._pos = pos
                return None
            if p[pos] != c'$':
                got = PyBytes_FromStringAndSize(p + pos, 1).decode("utf-8", "surrogateescape")
                raise ProtocolError(f"ERR Protocol error: expected '$', got '{got}'")
            if not ok or size < 0 or size > self.max_bulk:
                raise ProtocolError("ERR Protocol error: invalid bulk length")
            if size > UNAUTH_MAX_BULK and not self.authenticated:
                raise ProtocolError("ERR Protocol error: unauthenticated bulk length")
            start = cr + 2
            if end - start < size + 2:
                self._pos = pos
                return None
            args.append(PyBytes_FromStringAndSize(p + start, <Py_ssize_t>size))
            pos = start + <Py_ssize_t>size + 2
            self._pending -= 1
        self._pos = pos
        self._args = []
        return args

    cdef object _read_inline(self):
        """processInlineBuffer: one line's arguments (possibly empty), or
        None (no newline yet); the splitting is :func:`router.inline.split_args`."""
        cdef const char* p = PyByteArray_AS_STRING(self._buf)
        cdef Py_ssize_t end = PyByteArray_GET_SIZE(self._buf)
        cdef Py_ssize_t pos = self._pos
        cdef const char* nlp = <const char*>memchr(p + pos, c'\n', end - pos)
        cdef Py_ssize_t nl, stop
        # the newline is found with strchr: a NUL before it hides it
        if nlp != NULL and memchr(p + pos, 0, nlp - (p + pos)) != NULL:
            nlp = NULL
        if nlp == NULL:
            if end - pos > INLINE_MAX_SIZE:
                raise ProtocolError("ERR Protocol error: too big inline request")
            return None
        nl = nlp - p
        stop = nl
        if stop > pos and p[stop - 1] == c'\r':
            stop -= 1
        line = PyBytes_FromStringAndSize(p + pos, stop - pos)
        self._pos = nl + 1
        args = split_args(line)
        if args is None:
            raise ProtocolError("ERR Protocol error: unbalanced quotes in request")
        return args
