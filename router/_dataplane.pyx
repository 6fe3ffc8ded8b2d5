# cython: boundscheck=False, wraparound=False, initializedcheck=False
"""The compiled twin of the Python core's hot loop (issue 29), typed Cython.

:class:`RequestParser`, the twin of :class:`router.parser.RequestParser`
(the reference, pure Python + hiredis), and :func:`process`, the twin of the
request loop :func:`router.dispatch.process`, which runs PUBLISH, SPUBLISH
and PING in line (the end of this file; ``tests/fuzz/fuzz_loop.py`` checks it).

The parser has the reference's public API, returns the same requests, raises
the same :class:`router.parser.ProtocolError` with the same text at the same
byte and leaves the same state (``buffered``, ``partial_bytes``, ``backlog``,
``query_buffer``, ``release``); ``tests/fuzz/fuzz_resp.py`` checks it.

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

    cdef bytearray _buf
    cdef Py_ssize_t _pos
    cdef Py_ssize_t _read_start
    cdef list _args
    cdef long long _pending
    cdef public long long max_bulk
    cdef public long long max_multibulk
    cdef public bint authenticated
    cdef public bint backlog

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

    def feed(self, data):
        """Append ``data`` (bytes-like); the parsed head of the buffer is
        dropped as the reference does (so ``query_buffer`` agrees)."""
        self._feed(data)

    cdef int _feed(self, data) except -1:
        cdef bytearray buf = self._buf
        cdef Py_ssize_t pos = self._pos
        cdef Py_ssize_t size = PyByteArray_GET_SIZE(buf)
        if pos and pos == size:
            PyByteArray_Resize(buf, 0)  # buf.clear()
            self._pos = pos = size = 0
        elif pos > 65536:
            del buf[:pos]
            self._pos = pos = 0
        self._read_start = pos
        cdef Py_ssize_t n
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

    def requests(self):
        """Every complete request buffered, in order, parsed one per step
        (the caller may stop early: the rest stays buffered). Raises
        ProtocolError after the requests that precede the bad one."""
        return self

    def __iter__(self):
        return self

    def __next__(self):
        req = self._next()
        if req is None:
            raise StopIteration
        return req

    cdef object _next(self):
        """The reference's ``_next_slow``: one request, or None."""
        cdef Py_ssize_t size
        cdef int done
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


# ---------------------------------------------------------------------------
# The request loop: the twin of router.dispatch.process, with PUBLISH,
# SPUBLISH and PING run in line (the twin of dispatch.execute and their
# handlers for a connection whose checks all pass; anything else goes
# through execute).

from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from router import client_log as _client_log
from router import client_output as _client_output
from router import resp as _resp
from router.commands import publish as _publish_command
from router import dispatch as _dispatch
from router.dispatch import execute as _execute
from router.dispatch import execute_quietly as _execute_quietly
from router.channel_table import MASK as _MASK
from router.resp import SMALL_INTEGERS as _SMALL_INTEGERS
from router.states import (
    BLOCKED as _BLOCKED,
    CLOSED as _CLOSED,
    CLOSING as _CLOSING,
    DONE as _DONE,
    NORMAL as _NORMAL,
    SLICE as _SLICE,
)
from router.stats import share_time as _share_time
from router.connection import Connection as _Connection, HotFields as _HotFields
from router.context import CommandContext as _CommandContext
from cluster_bus.api import NoPeers as _NoPeers
from router.node import Node as _Node, NodeHotFields as _NodeHotFields
from router.pause import ClientPause as _ClientPause
from router.settings import Settings as _Settings
from router.stats import CommandStat as _CommandStat, NodeStats as _NodeStats

from cpython.dict cimport PyDict_CheckExact, PyDict_Contains, PyDict_GetItemWithError
import sys as _sys
from cpython.list cimport PyList_Append, PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport (
    PyLong_AsLongLongAndOverflow,
    PyLong_AsSsize_t,
    PyLong_CheckExact,
    PyLong_FromLongLong,
    PyLong_FromSsize_t,
)
from cpython.method cimport PyMethod_Check, PyMethod_GET_FUNCTION
from cpython.object cimport Py_TYPE, PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset

    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

    PyObject* Py_False  # (<PyObject*>False is a C 0 in Cython)
    PyObject* Py_True
    Py_ssize_t PyDict_GET_SIZE(object)
    PyObject* _PyType_Lookup(PyTypeObject*, object)  # borrowed, no error set
    PyObject** _PyObject_GetDictPtr(object)

cdef extern from *:
    """
    #define __bloomcast_generic_getattro(tp) ((tp)->tp_getattro == PyObject_GenericGetAttr)
    """
    bint _generic_getattro "__bloomcast_generic_getattro" (PyTypeObject*) noexcept

cdef extern from *:
    """
    /* A counter's int rewritten in place: only when nothing but the slot
       holds it (refcount 1, so no reader can see it change), it is an exact
       int of one or two 30-bit digits (CPython 3.11's layout,
       Include/cpython/longintrepr.h) and the sum needs as many digits and
       is past the small ints (-5..256, shared objects that
       Objects/longobject.c's get_small_int hands out). 0 when not done:
       the caller then stores a new int. */
    static int __bloomcast_long_add_in_place(PyObject *v, long long n) {
    #if PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30 && !defined(Py_LIMITED_API)
        PyLongObject *l = (PyLongObject *)v;
        Py_ssize_t size = Py_SIZE(v);
        unsigned long long old, sum;
        if (Py_REFCNT(v) != 1 || !PyLong_CheckExact(v) || size < 1 || size > 2) return 0;
        old = (unsigned long long)l->ob_digit[0];
        if (size == 2) old |= (unsigned long long)l->ob_digit[1] << PyLong_SHIFT;
        if (n < 0 ? old < (unsigned long long)(-(n + 1)) + 1ULL : old + (unsigned long long)n >= (1ULL << (2 * PyLong_SHIFT))) return 0;
        sum = n < 0 ? old - ((unsigned long long)(-(n + 1)) + 1ULL) : old + (unsigned long long)n;
        if (sum <= 256 || (sum >> PyLong_SHIFT ? 2 : 1) != size) return 0;
        l->ob_digit[0] = (digit)(sum & PyLong_MASK);
        if (size == 2) l->ob_digit[1] = (digit)(sum >> PyLong_SHIFT);
        return 1;
    #else
        (void)v; (void)n;
        return 0;
    #endif
    }
    """
    bint _long_add_in_place "__bloomcast_long_add_in_place" (PyObject*, long long) noexcept
    int _list_set_slice "PyList_SetSlice" (object, Py_ssize_t, Py_ssize_t, PyObject*) except -1


# A connection's hot fields are slots (router.connection.HotFields): read
# here at their offsets, each the member descriptor's, for a connection of
# the node's own class only (``_own``: its write and flush are Connection's
# and each of those slots is HotFields' own). A slot may be unset (NULL) or
# hold a value other than the one a fast path expects: then the code reads
# it as the reference does, by attribute (the same value, or the same
# AttributeError).

cdef Py_ssize_t _offset(str name, cls=_HotFields) except -1:
    import types
    descriptor = cls.__dict__[name]
    if type(descriptor) is not types.MemberDescriptorType:
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    return (<PyMemberDescrObject*><PyObject*>descriptor).d_member.offset


cdef object CONNECTION_WRITE = _Connection.write
cdef object CONNECTION_FLUSH = _Connection.flush
cdef object ZERO = 0
cdef object NO_PEERS = _NoPeers
cdef object NO_PEERS_FORWARD = _NoPeers.forward_publish  # the class's: returns 0
cdef str FORWARD_PUBLISH = "forward_publish"
cdef str RECEIVE = "receive"


cdef inline bint _method_is(obj, str name, function) except -1:
    """Whether ``obj.<name>`` would be ``function`` bound to ``obj``, without
    the lookup and the bound method: the generic attribute lookup of
    ``obj``'s type finds ``function`` (a function: no data descriptor) in
    its class, and ``obj`` has no instance attribute of that name."""
    cdef PyTypeObject* tp = Py_TYPE(obj)
    if not _generic_getattro(tp):
        return False
    if _PyType_Lookup(tp, name) != <PyObject*>function:
        return False
    cdef PyObject** dictptr = _PyObject_GetDictPtr(obj)
    if dictptr == NULL or dictptr[0] == NULL:
        return True
    return not PyDict_Contains(<object>dictptr[0], name)
cdef object END = object()  # the end of a parser's requests() that is not this module's
cdef object TWO = 2
cdef str PUBLISH = "publish"
cdef str SPUBLISH = "spublish"
cdef str PING = "ping"
cdef bytes PONG = _resp.PONG


cdef inline long long _perf_counter_ns() noexcept nogil:
    """``time.perf_counter_ns()``: CPython reads CLOCK_MONOTONIC on Linux
    (``Python/pytime.c``, ``py_get_monotonic_clock``); the same clock, read
    without a Python call."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1000000000LL + ts.tv_nsec


# the offsets of the slots read or written here: a connection's ...
cdef Py_ssize_t OFF_AUTHENTICATED, OFF_BLOCKED, OFF_CHANNELS, OFF_CLOSED, OFF_CTX
cdef Py_ssize_t OFF_LAST_COMMAND, OFF_LAST_INTERACTION, OFF_OUT, OFF_OUT_BYTES, OFF_PARSER
cdef Py_ssize_t OFF_PATTERNS, OFF_QUIET, OFF_RESP
cdef Py_ssize_t OFF_SHARD_CHANNELS, OFF_STATE, OFF_USER, OFF_WIRE, OFF_WORK_STARTED
cdef Py_ssize_t OFF_SOFT_LIMIT_SINCE = _offset("_soft_limit_since")
(OFF_AUTHENTICATED, OFF_BLOCKED, OFF_CHANNELS, OFF_CLOSED, OFF_CTX,
 OFF_LAST_COMMAND, OFF_LAST_INTERACTION, OFF_OUT, OFF_OUT_BYTES, OFF_PARSER,
 OFF_PATTERNS, OFF_QUIET, OFF_RESP,
 OFF_SHARD_CHANNELS, OFF_STATE, OFF_USER, OFF_WIRE, OFF_WORK_STARTED) = [
    _offset(name) for name in (
        "authenticated", "blocked", "channels", "closed", "ctx",
        "last_command", "last_interaction", "_out", "_out_bytes", "parser",
        "patterns", "quiet", "resp",
        "shard_channels", "state", "user", "wire", "work_started",
    )
]
# ... the counters PUBLISH adds to
cdef Py_ssize_t OFF_PUBLISH_RECEIVED, OFF_MESSAGES_DELIVERED, OFF_COMMANDS_PROCESSED
cdef Py_ssize_t OFF_NET_INPUT_BYTES, OFF_NET_OUTPUT_BYTES, OFF_PARSE_SLICES, OFF_CALLS
cdef Py_ssize_t OFF_NANOSECONDS
(OFF_PUBLISH_RECEIVED, OFF_MESSAGES_DELIVERED, OFF_COMMANDS_PROCESSED,
 OFF_NET_INPUT_BYTES, OFF_NET_OUTPUT_BYTES, OFF_PARSE_SLICES) = [
    _offset(name, _NodeStats) for name in (
        "publish_received", "messages_delivered", "commands_processed",
        "net_input_bytes", "net_output_bytes", "parse_slices",
    )
]
OFF_CALLS = _offset("calls", _CommandStat)
OFF_NANOSECONDS = _offset("nanoseconds", _CommandStat)
# ... and what the loop reads of the node's context (each a slot of its
# class: router.context.CommandContext, router.settings.Settings,
# router.pause.ClientPause, router.node.NodeHotFields), by _field
cdef Py_ssize_t OFF_CTX_CONNECTION_CLASS = _offset("connection_class", _CommandContext)
cdef Py_ssize_t OFF_CTX_PAUSE = _offset("pause", _CommandContext)
cdef Py_ssize_t OFF_CTX_PLANE = _offset("plane", _CommandContext)
cdef Py_ssize_t OFF_CTX_SETTINGS = _offset("settings", _CommandContext)
cdef Py_ssize_t OFF_CTX_STATS = _offset("stats", _CommandContext)
cdef Py_ssize_t OFF_QUEUE_LIMIT = _offset("queue_limit", _Settings)
cdef Py_ssize_t OFF_NORMAL_LIMITED = _offset("normal_limited", _Settings)
cdef Py_ssize_t OFF_PAUSE_LEVEL = _offset("level", _ClientPause)
cdef Py_ssize_t OFF_NODE_DIRTY, OFF_NODE_LOOP, OFF_NODE_CONTEXT, OFF_NODE_LINK
cdef Py_ssize_t OFF_NODE_METRICS, OFF_NODE_PUBLISH_SEQ, OFF_NODE_TAP, OFF_NODE_TURN_OUTPUT
(OFF_NODE_DIRTY, OFF_NODE_LOOP, OFF_NODE_CONTEXT, OFF_NODE_LINK,
 OFF_NODE_METRICS, OFF_NODE_PUBLISH_SEQ, OFF_NODE_TAP, OFF_NODE_TURN_OUTPUT) = [
    _offset(name, _NodeHotFields) for name in (
        "_dirty", "_loop", "context", "link", "metrics", "publish_seq", "tap", "turn_output",
    )
]
if any(getattr(_Node, name) is not _NodeHotFields.__dict__[name]
       for name in _NodeHotFields.__slots__):
    raise ImportError("Node shadows a slot of NodeHotFields")  # dataplane.load: the Python core
# the module globals the reference reads at each use, read here from the
# module's dict (as module attribute access reads them)
cdef dict DISPATCH_GLOBALS = vars(_dispatch)  # _SLICE_NS
cdef dict PUBLISH_GLOBALS = vars(_publish_command)  # FANOUT_BYTES_PER_TURN


cdef inline PyObject* _slot(object obj, Py_ssize_t offset) noexcept:
    """The slot at ``offset`` of a HotFields object (borrowed; NULL: unset)."""
    return (<PyObject**>((<char*><PyObject*>obj) + offset))[0]


cdef inline void _store(obj, Py_ssize_t offset, value) noexcept:
    """Set the slot at ``offset`` of ``obj`` (a type whose slot it is) to
    ``value``, as the member descriptor's ``__set__`` does."""
    cdef PyObject** at = <PyObject**>((<char*><PyObject*>obj) + offset)
    cdef PyObject* old = at[0]
    Py_INCREF(value)
    at[0] = <PyObject*>value
    Py_XDECREF(old)  # last: the old value's deallocation sees the new one in place


cdef inline object _field(obj, type cls, Py_ssize_t offset, str name):
    """``obj.<name>``, read at ``offset`` when ``obj`` is exactly ``cls``
    (whose slot it is) and the slot is set; else by attribute (the same
    value, or the same AttributeError)."""
    cdef PyObject* value
    if type(obj) is cls:
        value = _slot(obj, offset)
        if value != NULL:
            return <object>value
    return getattr(obj, name)


cdef inline int _set_field(obj, type cls, Py_ssize_t offset, str name, value) except -1:
    """``obj.<name> = value``, at ``offset`` when ``obj`` is exactly ``cls``."""
    if type(obj) is cls:
        _store(obj, offset, value)
    else:
        setattr(obj, name, value)
    return 0


cdef inline object _queue_limit(ctx):
    """``ctx.settings.queue_limit``."""
    settings = _field(ctx, _CommandContext, OFF_CTX_SETTINGS, "settings")
    return _field(settings, _Settings, OFF_QUEUE_LIMIT, "queue_limit")


cdef inline bint _normal_limited(conn) except -1:
    """``conn.ctx.settings.normal_limited`` for a connection of an own class
    (``_flush``'s), read at the slots' offsets."""
    cdef PyObject* slot = _slot(conn, OFF_CTX)
    ctx = conn.ctx if slot == NULL else <object>slot
    settings = _field(ctx, _CommandContext, OFF_CTX_SETTINGS, "settings")
    return _field(settings, _Settings, OFF_NORMAL_LIMITED, "normal_limited") is True


cdef inline object _conn_field(conn, bint own, Py_ssize_t offset, str name):
    """``conn.<name>`` for a HotFields slot: at ``offset`` for a connection of
    an own class (``_own``) whose slot is set; else by attribute."""
    cdef PyObject* value
    if own:
        value = _slot(conn, offset)
        if value != NULL:
            return <object>value
    return getattr(conn, name)


cdef extern from *:
    """
    /* A dict's version (PEP 509): CPython 3.11 gives every dict a new,
       interpreter-wide unique one at each change; later versions deprecate
       the field, so there 0 (no cache). */
    #if PY_VERSION_HEX < 0x030C0000
    #define __bloomcast_dict_version(d) (((PyDictObject *)(d))->ma_version_tag)
    #else
    #define __bloomcast_dict_version(d) (0ULL)
    #endif
    """
    unsigned long long _dict_version "__bloomcast_dict_version" (object) noexcept


cdef struct _GlobalCache:
    unsigned long long version  # of the module's dict when value was read, 0 for none
    PyObject* value  # borrowed: the dict holds it as long as its version is the same


cdef _GlobalCache SLICE_NS_CACHE, FANOUT_CACHE, MONOTONIC_CACHE


cdef inline object _global_cached(dict module_globals, str name, _GlobalCache* cache):
    """:func:`_global`, the value kept while the module's dict has the same
    version (PEP 509: any change to the dict gives it a new one, so no
    assignment to the global is missed)."""
    cdef unsigned long long version = _dict_version(module_globals)
    if version and cache.version == version:
        return <object>cache.value
    cdef PyObject* value = PyDict_GetItemWithError(module_globals, name)
    if value == NULL:
        cache.version = 0
        return _global(module_globals, name)
    cache.version = version
    cache.value = value
    return <object>value


cdef object _global(dict module_globals, str name):
    """A module global read as ``module.<name>`` reads it (a missing one
    raises the module's own AttributeError)."""
    cdef PyObject* value = PyDict_GetItemWithError(module_globals, name)
    if value == NULL:
        return getattr(_sys.modules[module_globals["__name__"]], name)
    return <object>value


cdef int _add(obj, type cls, Py_ssize_t offset, str name, Py_ssize_t n) except -1:
    """``obj.<name> += n`` for an int counter in a slot of ``cls`` (at
    ``offset``), at the slot: the int itself rewritten when nothing else
    holds it (``_long_add_in_place``), else a new int stored; by attribute
    for anything else."""
    cdef PyObject** at
    cdef long long value
    cdef int overflow = 0
    if type(obj) is cls:
        at = <PyObject**>((<char*><PyObject*>obj) + offset)
        if at[0] != NULL and _long_add_in_place(at[0], n):
            return 0
        if at[0] != NULL and PyLong_CheckExact(<object>at[0]):
            value = PyLong_AsLongLongAndOverflow(<object>at[0], &overflow)
            if not overflow and value < (1LL << 62):  # else as Python adds
                _store(obj, offset, PyLong_FromLongLong(value + n))
                return 0
    setattr(obj, name, getattr(obj, name) + n)
    return 0


cdef inline int _subscribed(conn) noexcept:
    """Whether a connection of an own class has a channel, pattern or shard
    channel (1 or 0), its three dicts read at their slots; -1 when a slot
    holds anything but a dict (the caller then asks as the reference does)."""
    cdef PyObject* channels = _slot(conn, OFF_CHANNELS)
    cdef PyObject* patterns = _slot(conn, OFF_PATTERNS)
    cdef PyObject* shard_channels = _slot(conn, OFF_SHARD_CHANNELS)
    if (channels == NULL or patterns == NULL or shard_channels == NULL
            or not PyDict_CheckExact(<object>channels) or not PyDict_CheckExact(<object>patterns)
            or not PyDict_CheckExact(<object>shard_channels)):
        return -1
    return (PyDict_GET_SIZE(<object>channels) or PyDict_GET_SIZE(<object>patterns)
            or PyDict_GET_SIZE(<object>shard_channels)) != 0


cdef int _flush(conn, stats) except -1:
    """The twin of :meth:`router.connection.Connection.flush` for a
    connection of the node's own class (``_Lane.own``; ``stats``: its
    ``ctx.stats``), authenticated and not closed, with a list for a queue:
    its fields read and written at their slots. Anything else, and the
    output limits of a subscribed client, go to the reference."""
    cdef PyObject* slot = _slot(conn, OFF_OUT)
    cdef PyObject* state = _slot(conn, OFF_STATE)
    cdef PyObject* wire_slot = _slot(conn, OFF_WIRE)
    if (slot == NULL or not PyList_CheckExact(<object>slot) or state == NULL
            or state == <PyObject*>CLOSED or _slot(conn, OFF_AUTHENTICATED) != Py_True
            or wire_slot == NULL):
        conn.flush()
        return 0
    # held as the reference holds them (locals): the write may run Python code
    cdef list out = <list>slot
    wire = <object>wire_slot
    _store(conn, OFF_WORK_STARTED, None)
    cdef Py_ssize_t n = PyList_GET_SIZE(out)
    if not n:
        _store(conn, OFF_OUT_BYTES, ZERO)
        return 0
    cdef bytes data = <bytes?>out[0] if n == 1 else b"".join(out)
    wire.write(data)
    _add(stats, _NodeStats, OFF_NET_OUTPUT_BYTES, "net_output_bytes", len(data))
    _list_set_slice(out, 0, PY_SSIZE_T_MAX, NULL)  # del out[:]
    _store(conn, OFF_OUT_BYTES, ZERO)
    cdef int subscribed = _subscribed(conn)
    if subscribed < 0:
        subscribed = bool(conn.channels or conn.patterns or conn.shard_channels)
    if not subscribed:
        # a normal client: the normal class, no limit unless CONFIG SET
        if _normal_limited(conn) and _client_output.over_limit(
                conn, wire.get_write_buffer_size(), True):
            conn.cut()
        return 0
    pending = wire.get_write_buffer_size()
    if type(pending) is int and not pending:
        # over_limit's first case, its effect in line: the socket took it all
        _store(conn, OFF_SOFT_LIMIT_SINCE, None)
        return 0
    if _client_output.over_limit(conn, pending):
        conn.cut()
    return 0


cdef int _write(client, bytes data, long long queue_limit) except -1:
    """The twin of :meth:`router.connection.Connection.write` for a client
    of the lane's own connection class (``Connection.write`` unchanged):
    its state, queue and queued bytes read and written at their slots. A
    slot that holds anything unusual sends it to ``client.write``."""
    cdef PyObject* state = _slot(client, OFF_STATE)
    cdef PyObject* slot = _slot(client, OFF_OUT)
    if (state == NULL or state == <PyObject*>CLOSED or state == <PyObject*>BLOCKED
            or slot == NULL or not PyList_CheckExact(<object>slot)):
        client.write(data)
        return 0
    cdef list out = <list>slot  # held, as the reference's local: schedule_flush is Python
    if not PyList_GET_SIZE(out):
        client.schedule_flush(client)
    PyList_Append(out, data)
    cdef PyObject* queued = _slot(client, OFF_OUT_BYTES)  # read after, as the reference
    cdef Py_ssize_t total
    if queued != NULL and PyLong_CheckExact(<object>queued):
        total = PyLong_AsSsize_t(<object>queued) + len(data)
        _store(client, OFF_OUT_BYTES, PyLong_FromSsize_t(total))
        if total > queue_limit:
            client.flush()
        return 0
    client._out_bytes += len(data)
    if client._out_bytes > queue_limit:
        client.flush()
    return 0

cdef tuple SMALL_INTEGERS = _SMALL_INTEGERS
cdef object NORMAL = _NORMAL
cdef object BLOCKED = _BLOCKED
cdef object CLOSED = _CLOSED
cdef object CLOSING = _CLOSING
cdef object DONE = _DONE
cdef object SLICE = _SLICE
cdef Py_hash_t MASK = _MASK


# what a request may be run in line as (_in_line)
cdef enum:
    NOT_IN_LINE = 0
    IN_LINE_PUBLISH = 1
    IN_LINE_SPUBLISH = 2
    IN_LINE_PING = 3


cdef inline bint _is_publish_at(const char* p) noexcept nogil:
    """``publish`` at ``p`` (7 bytes, ASCII case-insensitive)."""
    return ((p[0] | 32) == c'p' and (p[1] | 32) == c'u' and (p[2] | 32) == c'b'
            and (p[3] | 32) == c'l' and (p[4] | 32) == c'i' and (p[5] | 32) == c's'
            and (p[6] | 32) == c'h')


cdef inline int _in_line(list args):
    """Which command ``args`` is, when it is one run in line with a count of
    arguments its handler accepts (the name ASCII case-insensitive, as the
    command table's lookup): PUBLISH and SPUBLISH with two, PING with none or
    one; else NOT_IN_LINE (``execute`` answers, an arity error included)."""
    cdef Py_ssize_t argc = len(args)
    if argc == 0 or argc > 3:
        return NOT_IN_LINE
    cdef bytes name = <bytes?>args[0]
    cdef Py_ssize_t n = len(name)
    cdef const char* p = name
    if n == 7:
        if argc == 3 and _is_publish_at(p):
            return IN_LINE_PUBLISH
    elif n == 8:
        if argc == 3 and (p[0] | 32) == c's' and _is_publish_at(p + 1):
            return IN_LINE_SPUBLISH
    elif n == 4:
        if (argc <= 2 and (p[0] | 32) == c'p' and (p[1] | 32) == c'i'
                and (p[2] | 32) == c'n' and (p[3] | 32) == c'g'):
            return IN_LINE_PING
    return NOT_IN_LINE


cdef inline char* _bulk_header(char* w, Py_ssize_t n) noexcept nogil:
    """Write ``$<n>\r\n`` (n >= 0) at ``w``; returns the byte after it."""
    cdef char digits[24]
    cdef int i = 0
    w[0] = c'$'
    w += 1
    while True:
        digits[i] = <char>(c'0' + n % 10)
        i += 1
        n //= 10
        if n == 0:
            break
    while i:
        i -= 1
        w[0] = digits[i]
        w += 1
    w[0] = c'\r'
    w[1] = c'\n'
    return w + 2


cdef inline Py_ssize_t _bulk_header_size(Py_ssize_t n) noexcept nogil:
    """The size of ``$<n>\r\n`` (n >= 0)."""
    cdef Py_ssize_t size = 4
    while n >= 10:
        size += 1
        n //= 10
    return size


cdef bytes _message(bytes channel, bytes payload):
    """The twin of :func:`router.resp.message`: ``[message, channel, payload]``
    (RESP2), built once in a bytes object of the right size."""
    return _frame3(b"*3\r\n$7\r\nmessage\r\n", 17, channel, payload)


cdef bytes _smessage(bytes channel, bytes payload):
    """The twin of :func:`router.resp.smessage`: ``[smessage, shard channel,
    payload]`` (RESP2)."""
    return _frame3(b"*3\r\n$8\r\nsmessage\r\n", 18, channel, payload)


cdef bytes _frame3(const char* head, Py_ssize_t nh, bytes channel, bytes payload):
    """``head`` (a three-element array and its first bulk string, ``nh``
    bytes), then ``channel`` and ``payload`` as bulk strings: one bytes
    object of the right size."""
    cdef Py_ssize_t nc = len(channel), nm = len(payload)
    cdef Py_ssize_t size = nh + _bulk_header_size(nc) + nc + 2 + _bulk_header_size(nm) + nm + 2
    cdef bytes frame = PyBytes_FromStringAndSize(NULL, size)
    cdef char* w = PyBytes_AS_STRING(frame)
    memcpy(w, head, nh)
    w = _bulk_header(w + nh, nc)
    memcpy(w, PyBytes_AS_STRING(channel), nc)
    w[nc] = c'\r'
    w[nc + 1] = c'\n'
    w = _bulk_header(w + nc + 2, nm)
    memcpy(w, PyBytes_AS_STRING(payload), nm)
    w[nm] = c'\r'
    w[nm + 1] = c'\n'
    return frame


cdef Py_ssize_t _write_to_all(_Lane lane, subs, bytes frame2) except -1:
    """The twin of :func:`router.pubsub.write_to_all` (the fan-out loop);
    ``node.turn_output`` is the lane's while PUBLISH runs in line."""
    if type(subs) is not set:
        subs = (subs,)
    frame3 = None
    cdef list out
    cdef PyObject* slot
    cdef object own = lane.own  # the node's connection class, or None
    for client in subs:
        if type(client) is own and _slot(client, OFF_RESP) == <PyObject*>TWO:
            # the reference's test below, read at the slots' offsets
            slot = _slot(client, OFF_OUT)
            if (slot != NULL and PyList_CheckExact(<object>slot)
                    and PyList_GET_SIZE(<object>slot)
                    and _slot(client, OFF_BLOCKED) == <PyObject*>None
                    and _slot(client, OFF_CLOSED) == Py_False):
                PyList_Append(<object>slot, frame2)
            else:
                _write(client, frame2, lane.queue_limit)
            continue
        if client.resp == 2:
            out = client._out
            if out and client.blocked is None and not client.closed:
                out.append(frame2)
            else:
                client.write(frame2)
        else:
            if frame3 is None:
                frame3 = _resp.as_push(frame2)
            if type(client) is own:
                _write(client, frame3, lane.queue_limit)
            else:
                client.write(frame3)
    cdef Py_ssize_t n = len(subs)
    lane.turn_output += n * len(frame2)
    lane.dirty = True
    if lane.turn_output > lane.queue_limit:
        lane.settle()  # flush_all samples INFO's metrics: counts as the reference's
        lane.node.flush_all()
        lane.turn_output = _field(lane.node, _Node, OFF_NODE_TURN_OUTPUT, "turn_output")
    return n


cdef Py_ssize_t _deliver(_Lane lane, bytes channel, bytes message) except -1:
    """The twin of :meth:`router.pubsub.PubSub.deliver` for CHANNELS; what
    it adds to ``messages_delivered`` waits in the lane (``delivered``)."""
    cdef Py_hash_t h = hash(channel)
    subs = (<dict?>(<list?>lane.shards[0])[h & MASK]).get(channel)
    patterned = lane.patterns.table
    if subs is None and not patterned:
        return 0
    cdef Py_ssize_t n = 0 if subs is None else _write_to_all(lane, subs, _message(channel, message))
    if patterned:
        for pattern, psubs in lane.patterns.matches(channel):
            n += _write_to_all(lane, psubs, _resp.pmessage(pattern, channel, message))
    lane.delivered += n
    lane.dirty = True  # (a flush_all in the fan-out settled the lane)
    return n


cdef Py_ssize_t _deliver_shard(_Lane lane, bytes channel, bytes message) except -1:
    """The twin of :meth:`router.pubsub.PubSub.deliver` for SHARD_CHANNELS
    (no pattern receives a shard channel's message); as :func:`_deliver`."""
    cdef Py_hash_t h = hash(channel)
    subs = (<dict?>(<list?>lane.shards[1])[h & MASK]).get(channel)
    if subs is None:
        return 0
    cdef Py_ssize_t n = _write_to_all(lane, subs, _smessage(channel, message))
    lane.delivered += n
    lane.dirty = True
    return n


cdef inline long long _clamp(limit) except? -1:
    """A byte limit (a Python int) as a C long long: one past it is none a
    byte count here can reach, so LLONG_MAX compares the same."""
    return limit if limit < 0x7FFFFFFFFFFFFFFF else 0x7FFFFFFFFFFFFFFF


cdef class _Plane:
    """What the commands in line read of a node that stays for the node's life
    (its pub/sub, stats and subscriber tables, made with it and never
    replaced), read once and kept in ``ctx.plane``."""

    cdef object pubsub, node, nstats, stats, patterns
    cdef tuple shards
    # a lane a read of a client's borrows (made once, not once a read); None
    # while one is out, so a read begun inside another's makes its own
    cdef _Lane spare


cdef _Plane _plane(ctx):
    """``ctx.plane``, made at the first call."""
    plane = _field(ctx, _CommandContext, OFF_CTX_PLANE, "plane")
    if plane is not None:
        return <_Plane?>plane
    cdef _Plane made = _Plane()
    made.pubsub = pubsub = ctx.pubsub
    made.node = node = pubsub.node
    made.nstats = node.stats
    made.stats = ctx.stats
    made.shards = pubsub._shards
    made.patterns = pubsub.patterns
    ctx.plane = made
    return made


# the last connection class _own checked, and its answer (a node has one
# class; a process running several nodes, as the tests do, checks again
# when the class changes)
cdef object OWN_CHECKED = None
cdef object OWN_ANSWER = None


cdef inline object _own(cls):
    """``cls`` when its ``write`` and ``flush`` are Connection's and its
    slots HotFields' own (so the twins may stand in), else None."""
    global OWN_CHECKED, OWN_ANSWER
    if cls is not OWN_CHECKED:
        answer = cls if _is_own(cls) else None  # (may run Python: both set after it)
        OWN_ANSWER = answer
        OWN_CHECKED = cls
    return OWN_ANSWER


def _is_own(cls):
    return (issubclass(cls, _HotFields) and cls.write is CONNECTION_WRITE
            and cls.flush is CONNECTION_FLUSH
            and all(getattr(cls, name) is _HotFields.__dict__[name] for name in _HotFields.__slots__))


cdef inline bint _gate(conn, own) except -1:
    """``not conn.quiet and conn.state is NORMAL and conn.authenticated and
    conn.user.unrestricted``: what execute checks of the connection before
    it runs PUBLISH as it is; the slots read at their offsets when they
    hold what they usually do."""
    cdef PyObject* user
    if type(conn) is own:
        user = _slot(conn, OFF_USER)
        if (_slot(conn, OFF_QUIET) == Py_False and _slot(conn, OFF_AUTHENTICATED) == Py_True
                and _slot(conn, OFF_STATE) == <PyObject*>NORMAL and user != NULL):
            return bool((<object>user).unrestricted)
    return bool(not conn.quiet and conn.state is NORMAL and conn.authenticated
                and conn.user.unrestricted)


@cython.freelist(4)
cdef class _Lane:
    """What the commands in line (PUBLISH, SPUBLISH, PING) read and count of
    a connection's node.

    Read once per run of them: refreshed after any request that goes
    through ``execute`` (only a command changes any of it; a command in line
    only writes to clients, which may close them, and the loop checks that).

    Counted here and written to the node by :meth:`settle`: the counters a
    command in line adds to (``publish_received``, ``messages_delivered``,
    ``commands_processed``, each command's ``calls``) and ``node.turn_output``
    (``last_command`` is a slot, set as execute sets it). Nothing reads them while
    commands run in line (INFO, CLIENT LIST and the metrics run as commands
    or callbacks of their own), so the loop settles before anything that
    could: ``execute``, ``flush_all`` (which samples the metrics), the tap,
    blocking and the end of the read. What each PUBLISH read and wrote of
    them was a quarter of its instructions (docs/benchmarks.md)."""

    cdef bint open  # the connection passes every check of execute for the commands in line
    cdef _Plane plane
    cdef object conn, pubsub, node, nstats, stats, patterns, link, tap
    # the CommandStat of each command run in line (commandstats' defaultdict:
    # made at its first run, as execute makes it), and its runs not counted yet
    cdef object ran_publish, ran_spublish, ran_ping
    cdef Py_ssize_t published, spublished, pinged
    cdef tuple shards
    cdef long long fanout  # commands.publish.FANOUT_BYTES_PER_TURN, read as it reads it
    cdef long long queue_limit  # settings.queue_limit (sys.maxsize for none)
    cdef long long turn_output  # node.turn_output, the node's again at settle()
    cdef object own  # the connection's class when its write() and flush() are Connection's, else None
    cdef Py_ssize_t received  # (S)PUBLISH begun in line since the last settle() (publish_received)
    cdef Py_ssize_t delivered  # their messages_delivered
    cdef object registry  # a run of forwards' (deliver_forwarded_run), else None
    cdef Py_ssize_t forwards, false_forwards  # forwards it counted for the registry, and without receiver
    cdef bint dirty  # something above is not the node's yet
    cdef bint lone  # link is an exact NoPeers: its forward_publish returns 0, and nothing else

    cdef int refresh(self, conn, ctx) except -1:
        plane = self.plane
        if plane is None:
            self.plane = plane = _plane(ctx)
        self.own = own = _own(type(conn))
        self.open = _gate(conn, own) and not _field(
            _field(ctx, _CommandContext, OFF_CTX_PAUSE, "pause"), _ClientPause, OFF_PAUSE_LEVEL, "level"
        )
        if self.open:
            self.conn = conn
            self.pubsub = plane.pubsub
            self.node = node = plane.node
            self.nstats = plane.nstats
            self.stats = plane.stats
            self.ran_publish = self.ran_spublish = self.ran_ping = None
            self.shards = plane.shards
            self.patterns = plane.patterns
            self.link = link = _field(node, _Node, OFF_NODE_LINK, "link")
            self.lone = type(link) is NO_PEERS and _method_is(link, FORWARD_PUBLISH, NO_PEERS_FORWARD)
            self.tap = _field(node, _Node, OFF_NODE_TAP, "tap")
            # (a limit past a C long long is no limit a byte count reaches)
            self.fanout = _clamp(_global_cached(PUBLISH_GLOBALS, "FANOUT_BYTES_PER_TURN", &FANOUT_CACHE))
            self.queue_limit = _clamp(_queue_limit(ctx))
            self.turn_output = _field(node, _Node, OFF_NODE_TURN_OUTPUT, "turn_output")
        return 0

    cdef int for_node(self, _Plane plane, ctx) except -1:
        """What a delivery without a client (a forwarded PUBLISH) reads."""
        self.plane = plane
        self.node = node = plane.node
        self.nstats = plane.nstats
        self.shards = plane.shards
        self.patterns = plane.patterns
        self.own = _own(_field(ctx, _CommandContext, OFF_CTX_CONNECTION_CLASS, "connection_class"))
        self.queue_limit = _clamp(_queue_limit(ctx))
        self.turn_output = _field(node, _Node, OFF_NODE_TURN_OUTPUT, "turn_output")
        return 0

    cdef int settle(self) except -1:
        """Write what PUBLISH in line counted to the node (class doc)."""
        if not self.dirty:
            return 0
        self.dirty = False
        _set_field(self.node, _Node, OFF_NODE_TURN_OUTPUT, "turn_output", self.turn_output)
        cdef Py_ssize_t received = self.received
        cdef Py_ssize_t published = self.published
        cdef Py_ssize_t spublished = self.spublished
        cdef Py_ssize_t pinged = self.pinged
        cdef Py_ssize_t delivered = self.delivered
        self.received = self.published = self.spublished = self.pinged = self.delivered = 0
        if received:
            _add(self.nstats, _NodeStats, OFF_PUBLISH_RECEIVED, "publish_received", received)
        if published or spublished or pinged:
            _add(self.stats, _NodeStats, OFF_COMMANDS_PROCESSED, "commands_processed",
                 published + spublished + pinged)
            if published:
                _add(self.ran_publish, _CommandStat, OFF_CALLS, "calls", published)
            if spublished:
                _add(self.ran_spublish, _CommandStat, OFF_CALLS, "calls", spublished)
            if pinged:
                _add(self.ran_ping, _CommandStat, OFF_CALLS, "calls", pinged)
        if delivered:
            _add(self.nstats, _NodeStats, OFF_MESSAGES_DELIVERED, "messages_delivered", delivered)
        cdef Py_ssize_t forwards = self.forwards
        cdef Py_ssize_t false_forwards = self.false_forwards
        if forwards:
            self.forwards = self.false_forwards = 0
            _count_forwards(self.registry, forwards, false_forwards)
        return 0


cdef inline int _name_command(_Lane lane, str name) except -1:
    """dispatch.execute, before the handler: the command's name (a slot, set
    now: a client cut while the command runs is logged with it)."""
    conn = lane.conn
    if type(conn) is lane.own:
        if _slot(conn, OFF_LAST_COMMAND) != <PyObject*>name:
            _store(conn, OFF_LAST_COMMAND, name)
    else:
        conn.last_command = name
    return 0


cdef object _publish(_Lane lane, list args, bint shard):
    """PUBLISH (SPUBLISH: ``shard``) for a connection every check of
    ``execute`` lets through unchanged (``lane.open``): what
    ``dispatch.execute``, ``commands.publish.publish`` (``spublish``) and
    ``Node.publish`` do, in their order, with the counting left to the lane.
    Returns the reply (bytes, or the future of after_turn)."""
    node = lane.node
    _name_command(lane, SPUBLISH if shard else PUBLISH)
    cdef bytes channel = <bytes?>args[1]
    cdef bytes message = <bytes?>args[2]
    # Node.publish (the lane counts publish_received now, commands_processed
    # and calls when the handler has returned, as execute does: a flush_all
    # during the delivery, which samples commands_processed, and anything
    # that raises see the reference's counts)
    lane.received += 1
    lane.dirty = True
    cdef Py_ssize_t receivers = (
        _deliver_shard(lane, channel, message) if shard else _deliver(lane, channel, message)
    )
    if type(node) is _Node and _slot(node, OFF_NODE_PUBLISH_SEQ) != NULL:
        seq = <object>_slot(node, OFF_NODE_PUBLISH_SEQ) + 1
        _store(node, OFF_NODE_PUBLISH_SEQ, seq)
    else:
        node.publish_seq += 1
        seq = node.publish_seq
    forwarded = 0 if lane.lone else lane.link.forward_publish(channel, message, shard, seq)
    if lane.tap is not None:
        lane.settle()
        node._record("origin", node.node_id, seq, channel, message, shard, receivers, forwarded)
    # commands.publish.publish / spublish (``client.in_exec`` is False: a
    # connection in line is NORMAL, and a PUBLISH can only close it)
    reply = SMALL_INTEGERS[receivers] if receivers < 1024 else _resp.integer(receivers)
    if lane.turn_output > lane.fanout:
        reply = lane.pubsub.after_turn(reply)
    # dispatch.execute, after the handler: commands_processed and the
    # command's calls (its CommandStat made now, as execute makes it)
    lane.dirty = True  # (a flush_all during the delivery settled the lane)
    if shard:
        lane.spublished += 1
        if lane.ran_spublish is None:
            lane.ran_spublish = lane.stats.commands["spublish"]
        return reply
    lane.published += 1
    if lane.ran_publish is None:
        lane.ran_publish = lane.stats.commands["publish"]
    return reply


cdef object _ping(_Lane lane, list args):
    """PING with none or one argument for a connection every check of
    ``execute`` lets through unchanged (``lane.open``): what
    ``dispatch.execute`` and ``commands.connection.ping`` do, the counting
    left to the lane. None for a RESP2 connection with a subscription (its
    ``[pong, ...]`` reply is the reference's to give; such a connection is
    SUBSCRIBED, which the lane does not run in line, so this is the
    reference's test kept for a connection class that differs)."""
    conn = lane.conn
    cdef PyObject* slot
    if type(conn) is not lane.own or _slot(conn, OFF_RESP) != <PyObject*>TWO:
        if conn.resp == 2:
            return None
    else:
        if _subscribed(conn) != 0:
            return None
    _name_command(lane, PING)
    reply = PONG if len(args) == 1 else _resp.bulk(<bytes?>args[1])
    lane.pinged += 1
    lane.dirty = True
    if lane.ran_ping is None:
        lane.ran_ping = lane.stats.commands["ping"]
    return reply


cdef inline bint _closing(conn, own) except -1:
    """``conn.closed or conn.state is CLOSING``, read at the slots' offsets
    when they hold what they usually do."""
    cdef PyObject* closed
    cdef PyObject* state
    if type(conn) is own:
        closed = _slot(conn, OFF_CLOSED)
        state = _slot(conn, OFF_STATE)
        if closed == Py_False and state != NULL:
            return state == <PyObject*>CLOSING
    return conn.closed or conn.state is CLOSING


def process(conn, data=b"", double now=0.0):
    """The twin of :func:`router.dispatch.process` (see there): the same
    loop, the same effects, in the same order; a PUBLISH or SPUBLISH whose
    checks all pass runs in line (:func:`_publish`), and a PING (:func:`_ping`),
    everything else through :func:`router.dispatch.execute`. A connection
    of an own class (``_own``) has its fields read and written at their
    slots, the node's context at its classes' slots (:func:`_field`), and
    the compiled parser is called in C."""
    return _process(conn, data, now)


cdef object _process(conn, data, double now):
    own_cls = _own(type(conn))
    cdef bint own = own_cls is not None
    state = _conn_field(conn, own, OFF_STATE, "state")
    ctx = _conn_field(conn, own, OFF_CTX, "ctx")
    cdef RequestParser rp
    if data:
        if state is CLOSED:
            return DONE
        stats = _field(ctx, _CommandContext, OFF_CTX_STATS, "stats")
        _add(stats, _NodeStats, OFF_NET_INPUT_BYTES, "net_input_bytes", len(data))
        parser = _conn_field(conn, own, OFF_PARSER, "parser")
        if type(parser) is RequestParser:
            (<RequestParser>parser)._feed(data)
        else:
            parser.feed(data)
        if own:
            _store(conn, OFF_LAST_INTERACTION, now)
        else:
            conn.last_interaction = now
        if state is BLOCKED:
            return DONE
    if state is CLOSING:
        return DONE
    cdef list out = _conn_field(conn, own, OFF_OUT, "_out")
    cdef bint deferred = not out
    stats = _field(ctx, _CommandContext, OFF_CTX_STATS, "stats")
    cdef Py_ssize_t queued = 0
    # the reference's budget, read as it reads it
    cdef long long slice_ns = _global_cached(DISPATCH_GLOBALS, "_SLICE_NS", &SLICE_NS_CACHE)
    cdef long long start = _perf_counter_ns()
    started_obj = _conn_field(conn, own, OFF_WORK_STARTED, "work_started")
    cdef long long started
    if started_obj is None:
        started = start
        if own:
            _store(conn, OFF_WORK_STARTED, start)
        else:
            conn.work_started = start
    else:
        started = started_obj
        if start - started > slice_ns:
            _add(stats, _NodeStats, OFF_PARSE_SLICES, "parse_slices", 1)
            return SLICE
    cdef bint sliced = False
    cdef Py_ssize_t done = 0
    cdef list runs = None  # made when a second command's run begins
    last = None
    cdef Py_ssize_t n = 0
    cdef bytes breply
    cdef int which
    cdef _Plane plane = _plane(ctx)
    cdef _Lane lane = plane.spare
    if lane is None:
        lane = _Lane()
        lane.plane = plane
    else:
        plane.spare = None
    rp = None
    lane_own = None  # lane.own at the read's end (the lane goes back to the plane)
    try:
        lane.refresh(conn, ctx)
        # ``for args in conn.parser.requests()``: the compiled parser's
        # requests() is the parser itself, its next step _next()
        parser = _conn_field(conn, own, OFF_PARSER, "parser")
        if type(parser) is RequestParser:
            rp = <RequestParser>parser
        else:
            requests = iter(parser.requests())
        while True:
            if rp is not None:
                args = rp._next()
                if args is None:
                    break
            else:
                args = next(requests, END)
                if args is END:
                    break
            reply = None
            if lane.open:
                which = _in_line(args)
                if which == IN_LINE_PUBLISH:
                    reply = _publish(lane, args, False)
                    ran = lane.ran_publish
                elif which == IN_LINE_SPUBLISH:
                    reply = _publish(lane, args, True)
                    ran = lane.ran_spublish
                elif which == IN_LINE_PING:
                    reply = _ping(lane, args)
                    ran = lane.ran_ping
            if reply is None:
                lane.settle()
                if _conn_field(conn, own, OFF_QUIET, "quiet"):
                    reply = _execute_quietly(conn, args)
                else:
                    reply = _execute(conn, args)
                lane.refresh(conn, ctx)
                ran = conn.ran
                if ran is not None:
                    conn.ran = None
            if ran is not None:
                if ran is last:
                    n += 1
                else:
                    if last is not None:
                        if runs is None:
                            runs = []
                        runs.append((last, n))
                    last, n = ran, 1
            if type(reply) is bytes:
                breply = <bytes>reply
                if len(breply) and (<const char*>breply)[0] == c'-':
                    stats.error_replied(breply)
                    if ran is not None:
                        ran.failed_calls += 1
                if not out and not deferred:
                    conn.schedule_flush(conn)
                out.append(breply)
                queued += len(breply)
                if _closing(conn, lane.own):
                    break
                done += 1
                if not done & 3 and _perf_counter_ns() - started > slice_ns:
                    sliced = True
                    break
                continue
            lane.settle()
            _add(conn, own_cls, OFF_OUT_BYTES, "_out_bytes", queued)
            if last is not None:
                if runs is None:
                    runs = []
                runs.append((last, n))
                _share_time(runs, _perf_counter_ns() - start)
            if deferred and out:
                conn.schedule_flush(conn)
            return conn.block(reply)
    except ProtocolError as exc:
        lane.settle()
        _add(conn, own_cls, OFF_OUT_BYTES, "_out_bytes", queued)
        queued = 0
        error = _resp.error(str(exc))
        _client_log.protocol_error(conn, str(exc))
        stats.error_replied(error)
        conn.write(error)
        conn.close_after_reply()
    finally:
        lane_own = lane.own
        lane.settle()
        lane.conn = None
        plane.spare = lane
    if last is not None:
        if runs is not None:
            runs.append((last, n))
            _share_time(runs, _perf_counter_ns() - start)
        else:
            _add(last, _CommandStat, OFF_NANOSECONDS, "nanoseconds", _perf_counter_ns() - start)
    _add(conn, own_cls, OFF_OUT_BYTES, "_out_bytes", queued)
    if deferred and out:
        if done == 1 and started == start and not sliced:
            if type(conn) is lane_own:
                _flush(conn, stats)
            else:
                conn.flush()
        else:
            conn.schedule_flush(conn)
    state = _conn_field(conn, own, OFF_STATE, "state")
    if state is CLOSING:
        conn.flush()
        conn.wire.close()
        return DONE
    if _conn_field(conn, own, OFF_OUT_BYTES, "_out_bytes") > _queue_limit(ctx):
        conn.flush()
    cdef bint more = sliced
    if not more:
        parser = _conn_field(conn, own, OFF_PARSER, "parser")
        more = (<RequestParser>parser).backlog if type(parser) is RequestParser else parser.backlog
    if more and state is not CLOSED:
        _add(stats, _NodeStats, OFF_PARSE_SLICES, "parse_slices", 1)
        return SLICE
    return DONE


# ---------------------------------------------------------------------------
# The node's end of a loop turn: the twin of router.node.Node.flush_all.

from asyncio import get_running_loop as _get_running_loop
from time import monotonic as _monotonic


def flush_all(node):
    """The twin of :meth:`router.node.Node.flush_all` (bound to a node by
    :func:`router.dataplane.bind_node`): every queued client's output
    written, each of the node's own connections by the twin of its
    ``flush``, then INFO's metrics sampled when a period passed."""
    dirty = _field(node, _Node, OFF_NODE_DIRTY, "_dirty")
    _set_field(node, _Node, OFF_NODE_DIRTY, "_dirty", [])
    _set_field(node, _Node, OFF_NODE_TURN_OUTPUT, "turn_output", ZERO)
    ctx = _field(node, _Node, OFF_NODE_CONTEXT, "context")
    stats = _field(ctx, _CommandContext, OFF_CTX_STATS, "stats")
    cdef _Plane plane = _plane(ctx)
    for client in <list?>dirty:
        if type(client) is _own(type(client)):
            _flush(client, stats)
        else:
            client.flush()
    if _monotonic() >= _field(node, _Node, OFF_NODE_METRICS, "metrics").next_sample:  # a 100 ms period passed
        node.sample_metrics()


def schedule_flush(node, client):
    """The twin of :meth:`router.node.Node.schedule_flush` (bound to a node
    by :func:`router.dataplane.bind_node`): ``client``'s queued output is
    written at the end of this loop turn."""
    dirty = <list?>_field(node, _Node, OFF_NODE_DIRTY, "_dirty")
    if not dirty:
        loop = _field(node, _Node, OFF_NODE_LOOP, "_loop")
        if loop is None or loop.is_closed():
            loop = _get_running_loop()
            _set_field(node, _Node, OFF_NODE_LOOP, "_loop", loop)
        loop.call_soon(node.flush_all)
    dirty.append(client)


# ---------------------------------------------------------------------------
# A PUBLISH a peer forwarded: the twin of router.node.Node.deliver_forwarded.


def deliver_forwarded(node, origin, origin_seq, channel, message, shard):
    """The twin of :meth:`router.node.Node.deliver_forwarded` (bound to a
    node by :func:`router.dataplane.bind_node`): a forwarded PUBLISH
    delivered by the twin of the fan-out (:func:`_deliver`), counted by the
    registry's resize policy, recorded by the tap; a forwarded SPUBLISH
    (``shard`` True) by the twin of the shard channels' fan-out. Any other
    ``shard`` or argument type takes the reference's path (the class's method)."""
    if ((shard is not False and shard is not True) or type(channel) is not bytes
            or type(message) is not bytes):
        return type(node).deliver_forwarded(node, origin, origin_seq, channel, message, shard)
    ctx = _field(node, _Node, OFF_NODE_CONTEXT, "context")
    cdef _Lane lane = _Lane()
    lane.for_node(_plane(ctx), ctx)
    cdef Py_ssize_t receivers
    try:
        if shard:
            receivers = _deliver_shard(lane, channel, message)
        else:
            receivers = _deliver(lane, channel, message)
    finally:
        lane.settle()
    changes = node.registry.forward_received(receivers == 0)
    if changes:
        _field(node, _Node, OFF_NODE_LINK, "link").filters_changed(changes)
    if _field(node, _Node, OFF_NODE_TAP, "tap") is not None:
        node._record("receiver", origin, origin_seq, channel, message, shard, receivers, 0)


from router import registry as _registry_module
from router.registry import Registry as _Registry
from cluster_bus.frames import Publish as _Publish
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.pyport cimport PY_SSIZE_T_MAX

cdef object PUBLISH_FRAME = _Publish  # the bus decoder's tuple


cdef dict REGISTRY_GLOBALS = vars(_registry_module)  # FP_CHECK_EVERY, read as the reference reads it
cdef Py_ssize_t OFF_WINDOW_RECEIVED = _offset("_window_received", _Registry)
cdef Py_ssize_t OFF_WINDOW_FALSE = _offset("_window_false", _Registry)
cdef Py_ssize_t OFF_FALSE_POSITIVES = _offset("false_positives_received", _Registry)


cdef int _count_forwards(registry, Py_ssize_t received, Py_ssize_t false) except -1:
    """What :meth:`router.registry.Registry.forward_received` adds for
    ``received`` forwards (``false`` of them without a receiver) none of
    which ends its window."""
    if received:
        _add(registry, _Registry, OFF_WINDOW_RECEIVED, "_window_received", received)
    if false:
        _add(registry, _Registry, OFF_FALSE_POSITIVES, "false_positives_received", false)
        _add(registry, _Registry, OFF_WINDOW_FALSE, "_window_false", false)
    return 0


cdef Py_ssize_t _window(registry, Py_ssize_t end) noexcept:
    """The resize policy's window count when the twin may count it (an int
    in [0, end)), else -1: each forward then calls ``forward_received``."""
    cdef PyObject* at = _slot(registry, OFF_WINDOW_RECEIVED)
    if at == NULL or not PyLong_CheckExact(<object>at):
        return -1
    cdef int overflow = 0
    cdef long long value = PyLong_AsLongLongAndOverflow(<object>at, &overflow)
    return value if not overflow and 0 <= value < end else -1


def deliver_forwarded_run(node, origin, msgs, count):
    """The twin of :meth:`router.node.Node.deliver_forwarded_run` (bound to a
    node by :func:`router.dataplane.bind_node`): a read's run of forwarded
    PUBLISH / SPUBLISH delivered with one lane (its counters settled once
    per run, as a pipelined read of PUBLISH settles them), and the
    registry's resize policy counted in the lane while its window is not
    due (``_Lane.forwards``: written to the registry by ``settle``, which
    runs before any Python call: the window's end, a filter change, the
    tap, the fan-out's ``flush_all``). A frame that is not the decoder's (a
    ``Publish`` or 5-tuple of bool shard, bytes channel and message) takes
    the reference's path, as does a node whose ``deliver_forwarded`` is not
    this module's twin."""
    bound = node.deliver_forwarded
    if (type(msgs) is not list or type(count) is not int or not PyMethod_Check(bound)
            or PyMethod_GET_FUNCTION(bound) != <PyObject*>DELIVER_FORWARDED):
        return type(node).deliver_forwarded_run(node, origin, msgs, count)
    if count <= 0:
        return None
    cdef Py_ssize_t n = count if count < PY_SSIZE_T_MAX else PY_SSIZE_T_MAX
    ctx = _field(node, _Node, OFF_NODE_CONTEXT, "context")
    cdef _Plane plane = _plane(ctx)
    cdef _Lane lane = _Lane()
    lane.for_node(plane, ctx)
    registry = node.registry
    every = REGISTRY_GLOBALS.get("FP_CHECK_EVERY")
    # the window counted in the lane (else every forward calls forward_received)
    cdef Py_ssize_t end = every if type(every) is int and 0 < every < PY_SSIZE_T_MAX else 0
    cdef Py_ssize_t w = _window(registry, end) if type(registry) is _Registry and end else -1
    lane.registry = registry
    cdef Py_ssize_t receivers, i = 0
    try:
        while i < n:
            if i >= PyList_GET_SIZE(msgs):
                raise IndexError("list index out of range")
            msg = <object>PyList_GET_ITEM(msgs, i)  # held: owned, as the fields below
            i += 1
            if (type(msg) is PUBLISH_FRAME or type(msg) is tuple) and PyTuple_GET_SIZE(msg) == 5:
                origin_seq = <object>PyTuple_GET_ITEM(msg, 1)
                shard = <object>PyTuple_GET_ITEM(msg, 2)
                channel = <object>PyTuple_GET_ITEM(msg, 3)
                message = <object>PyTuple_GET_ITEM(msg, 4)
            else:
                shard = None
            if ((shard is not False and shard is not True) or type(channel) is not bytes
                    or type(message) is not bytes):
                lane.settle()  # the reference's unpacking (its errors) and deliver_forwarded
                type(node).deliver_forwarded_run(node, origin, [msg], 1)
                lane.for_node(plane, ctx)
                w = _window(registry, end) if w >= 0 else -1
                continue
            if shard:
                receivers = _deliver_shard(lane, channel, message)
            else:
                receivers = _deliver(lane, channel, message)
            if w >= 0 and w + 1 < end:
                w += 1
                lane.forwards += 1
                lane.false_forwards += receivers == 0
                lane.dirty = True
            else:
                lane.settle()
                changes = registry.forward_received(receivers == 0)
                if changes:
                    _field(node, _Node, OFF_NODE_LINK, "link").filters_changed(changes)
                lane.for_node(plane, ctx)
                w = _window(registry, end) if w >= 0 else -1
            if _field(node, _Node, OFF_NODE_TAP, "tap") is not None:
                lane.settle()
                node._record("receiver", origin, origin_seq, channel, message, shard, receivers, 0)
                lane.for_node(plane, ctx)
                w = _window(registry, end) if w >= 0 else -1
    finally:
        lane.settle()


cdef object DELIVER_FORWARDED = deliver_forwarded


# ---------------------------------------------------------------------------
# A client's read: the twin of router.client.Client.data_received.

from router import client as _client_module
from router.client import Client as _Client

cdef dict CLIENT_GLOBALS = vars(_client_module)  # monotonic, read as the reference reads it

cdef Py_ssize_t OFF_CLIENT_CONN = _offset("conn", _Client)
cdef object PROCESS = process


def data_received(client, data):
    """The twin of :meth:`router.client.Client.data_received`, the method of
    :class:`CompiledClient`: the connection's request loop called in C when
    its ``receive`` is this module's :func:`process`."""
    conn = _field(client, COMPILED_CLIENT, OFF_CLIENT_CONN, "conn")
    if conn is not None:
        if _method_is(conn, RECEIVE, PROCESS):  # conn.receive is process bound to conn
            action = _process(conn, data, _global_cached(CLIENT_GLOBALS, "monotonic", &MONOTONIC_CACHE)())
        else:
            action = conn.receive(data, _global_cached(CLIENT_GLOBALS, "monotonic", &MONOTONIC_CACHE)())
        if action:
            client._wait(action, conn)


class CompiledClient(_Client):
    """:class:`router.client.Client` with the twin of its ``data_received``
    (the node's protocol class on the compiled data plane,
    :func:`router.dataplane.client_class`)."""

    __slots__ = ()
    data_received = data_received


cdef type COMPILED_CLIENT = CompiledClient
