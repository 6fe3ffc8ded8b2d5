# cython: boundscheck=False, wraparound=False, initializedcheck=False
"""The compiled twin of the bus's forwarding hot path (issue 29), typed Cython.

The twins of what every forwarded PUBLISH costs, beside their Python
references (``cluster_bus.dataplane`` picks them; ``BLOOMCAST_NO_EXTENSIONS=1``
keeps the references; ``tests/fuzz/fuzz_forwarding.py`` compares the two):

- :func:`data_received`, of :meth:`cluster_bus.link.Link.data_received` for
  an authenticated link without TLS or sealing whose read holds nothing but
  PUBLISH frames (a partial one last): the frames decoded from the bytes
  with C pointers into the ``Publish`` tuples the reference's decoder
  (:meth:`cluster_bus.decoder.FrameDecoder.feed`) makes, with its checks,
  and handed to the owner as one run, as the reference's ``_dispatch``
  does. Any other read (a frame of another type, a check that fails: the
  reference names the fault, a handshake, TLS, a sealed link, bytes held
  short of a frame) is the reference's, whole: nothing is changed before
  the twin knows the read is its own.
- :func:`publishes_received`, of
  :meth:`cluster_bus.forwarding.Forwarding.publishes_received`: the
  session's in-order prefix (:meth:`cluster_bus.session.InSession.in_order`)
  counted in C and handed to the node as one run
  (``LocalDelivery.deliver_forwarded_run``); what follows a gap or a
  duplicate goes to the reference's ``_one_received``.
- :class:`Forwarder`, whose ``forward`` is the twin of
  :meth:`cluster_bus.forwarding.Forwarding.forward`: the route from the
  routing table's caches (a miss asks the table,
  :class:`cluster_bus.routing.PeerTable`), and for each peer the twin of
  :meth:`cluster_bus.session.OutSession.publish`, whose frame is written here
  (the layout of :func:`cluster_bus.codec.encode_publish`) instead of by
  ``struct`` and ``bytes.join``.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_Append, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport (
    PyLong_AsLongLongAndOverflow,
    PyLong_FromUnsignedLong,
    PyLong_FromUnsignedLongLong,
)
from cpython.object cimport PyObject, PyTypeObject
from cpython.dict cimport PyDict_GetItemWithError
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_SET_ITEM
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

cimport cython

from cluster_bus.codec import (
    HEADER_SIZE as _HEADER_SIZE,
    MAGIC as _MAGIC,
    PUBLISH_HEADER_SIZE as _PUBLISH_HEADER_SIZE,
    VERSION as _VERSION,
    BusProtocolError as _BusProtocolError,
    _T_PUBLISH,
    encode_publish as _encode_publish,
)
from cluster_bus.decoder import FrameDecoder as _FrameDecoder
from cluster_bus.forwarding import Forwarding as _Forwarding, ForwardingHotFields as _ForwardingHotFields
from cluster_bus.info import BusStats as _BusStats
from cluster_bus.frames import FLAG_SHARD as _FLAG_SHARD, MsgType as _MsgType, Publish as _Publish
from cluster_bus.link import Link as _Link, LinkHotFields as _LinkHotFields
from time import time as _time
from cluster_bus.seal import SealError as _SealError
from cluster_bus.session import InSession as _InSession, OutSession as _OutSession

cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* t, Py_ssize_t n)
    PyObject* Py_True  # (<PyObject*>True is a C 1 in Cython)
    PyObject* Py_False

from collections import deque

cdef Py_ssize_t HEADER_SIZE = _HEADER_SIZE  # 14
cdef Py_ssize_t PUBLISH_HEADER_SIZE = _PUBLISH_HEADER_SIZE  # 30
cdef uint8_t MAGIC0 = _MAGIC[0]
cdef uint8_t MAGIC1 = _MAGIC[1]
cdef uint8_t VERSION = _VERSION
cdef uint8_t T_PUBLISH = _T_PUBLISH
cdef unsigned int FLAG_SHARD = _FLAG_SHARD
cdef object PUBLISH = _Publish
cdef object MSG_PUBLISH = _MsgType.PUBLISH
cdef object FRAME_DECODER = _FrameDecoder
cdef object IN_SESSION = _InSession
cdef object BUS_STATS = _BusStats
cdef object OUT_SESSION = _OutSession
cdef object LINK_DATA_RECEIVED = _Link.data_received
cdef object PUBLISHES_RECEIVED = _Forwarding.publishes_received


cdef inline uint32_t _be32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline uint64_t _be64(const uint8_t* p) noexcept nogil:
    return (<uint64_t>_be32(p) << 32) | _be32(p + 4)


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = v >> 16
    p[2] = v >> 8
    p[3] = v


# ---------------------------------------------------------------------------
# In: a read of PUBLISH frames (Link.data_received, FrameDecoder's fast path)


cdef object _message(bytes view, Py_ssize_t pos, Py_ssize_t stop):
    """The ``Publish`` tuple of the (checked, complete) frame at ``pos``,
    as the reference decoder builds it (``tuple.__new__``: no Python call)."""
    cdef const char* start = PyBytes_AS_STRING(view)
    cdef const uint8_t* h = <const uint8_t*>start + pos
    cdef Py_ssize_t clen = _be32(h + 26)
    cdef Py_ssize_t cstart = pos + PUBLISH_HEADER_SIZE
    msg = PyType_GenericAlloc(<PyTypeObject*>PUBLISH, 5)
    _put(msg, 0, PyLong_FromUnsignedLong(_be32(h + 14)))
    _put(msg, 1, PyLong_FromUnsignedLongLong(_be64(h + 18)))
    _put(msg, 2, ((h[4] << 8 | h[5]) & FLAG_SHARD) != 0)
    _put(msg, 3, PyBytes_FromStringAndSize(start + cstart, clen))  # the reference's slices
    _put(msg, 4, PyBytes_FromStringAndSize(start + cstart + clen, stop - cstart - clen))
    return msg


cdef inline void _put(msg, Py_ssize_t i, item) noexcept:
    """Fill a new tuple's slot ``i`` (PyTuple_SET_ITEM steals a reference)."""
    Py_INCREF(item)
    PyTuple_SET_ITEM(msg, i, item)


def data_received(link, data):
    """The twin of :meth:`cluster_bus.link.Link.data_received` (the module
    doc says when it stands in; otherwise it calls the reference)."""
    cdef bint hot = _hot_link(type(link))
    if (type(data) is not bytes or _field(link, hot, OFF_LINK_TLS, "_tls") is not None
            or _field(link, hot, OFF_LINK_AUTHENTICATED, "authenticated") is not True
            or _field(link, hot, OFF_LINK_CLOSED, "closed") is not False
            or not _field(link, hot, OFF_LINK_FIRST_BYTES, "first_bytes")):
        return LINK_DATA_RECEIVED(link, data)
    decoder = _field(link, hot, OFF_LINK_DECODER, "decoder")
    if type(decoder) is not FRAME_DECODER:
        return LINK_DATA_RECEIVED(link, data)
    # the decoder's slots (an unset one: the reference's read raises)
    cdef PyObject* broken = _slot(decoder, OFF_DEC_BROKEN)
    cdef PyObject* fast = _slot(decoder, OFF_DEC_FAST)
    cdef PyObject* expect_slot = _slot(decoder, OFF_DEC_EXPECT_SENDER)
    cdef PyObject* max_body_slot = _slot(decoder, OFF_DEC_MAX_BODY)
    cdef PyObject* buf_slot = _slot(decoder, OFF_DEC_BUF)
    cdef PyObject* need_slot
    if (broken == NULL or fast == NULL or expect_slot == NULL or max_body_slot == NULL
            or buf_slot == NULL):
        return LINK_DATA_RECEIVED(link, data)
    if broken != Py_False or fast != Py_True:  # (anything else: the reference judges it)
        return LINK_DATA_RECEIVED(link, data)
    expect = <object>expect_slot
    max_body = <object>max_body_slot
    buf = <object>buf_slot
    if type(expect) is not int or type(max_body) is not int or type(buf) is not bytearray:
        return LINK_DATA_RECEIVED(link, data)
    if not 0 <= expect <= 0xFFFFFFFF or max_body < 0:
        return LINK_DATA_RECEIVED(link, data)  # (no header can carry it / no frame fits: its words)
    cdef uint32_t sender = expect
    cdef long long limit = max_body if max_body < 0x7FFFFFFFFFFFFFFF else 0x7FFFFFFFFFFFFFFF
    cdef Py_ssize_t held = len(buf)
    cdef bytes view
    if held:
        need_slot = _slot(decoder, OFF_DEC_NEED)
        if need_slot == NULL or held + len(<bytes>data) < <object>need_slot:
            return LINK_DATA_RECEIVED(link, data)  # the reference keeps it for later
        view = bytes(buf) + data  # what the reference's feed parses
    else:
        view = data
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(view)
    cdef const uint8_t* h
    cdef Py_ssize_t end = len(view), pos = 0, need = HEADER_SIZE, stop, length
    cdef list run = []
    while end - pos >= HEADER_SIZE:
        h = p + pos
        # the reference's checks, in its order; any that fails: its read
        if h[0] != MAGIC0 or h[1] != MAGIC1 or h[2] != VERSION or h[3] != T_PUBLISH:
            return LINK_DATA_RECEIVED(link, data)
        length = _be32(h + 6)
        if length > limit or _be32(h + 10) != sender:
            return LINK_DATA_RECEIVED(link, data)
        stop = pos + HEADER_SIZE + length
        if stop > end:  # a frame not yet whole: kept, as the reference keeps it
            need = stop - pos
            break
        if length < 16 or PUBLISH_HEADER_SIZE + <Py_ssize_t>_be32(h + 26) > HEADER_SIZE + length:
            return LINK_DATA_RECEIVED(link, data)
        PyList_Append(run, _message(view, pos, stop))
        pos = stop
    # the read is the twin's: the reference's effects, in its order
    now = int(_time() * 1000)  # cluster_bus.link.now_ms
    if hot:
        _store(link, OFF_LINK_LAST_RX_MS, now)
    else:
        link.last_rx_ms = now
    if held:
        buf.clear()
    if pos < end:
        buf += view[pos:]
    _store(decoder, OFF_DEC_NEED, need)
    if PyList_GET_SIZE(run) and _field(link, hot, OFF_LINK_CLOSED, "closed") is False:
        owner = _field(link, hot, OFF_LINK_OWNER, "owner")
        try:
            owner.publishes_received(link, run)
        except _BusProtocolError as exc:
            owner.bad_frame(link, str(exc), isinstance(exc, _SealError))


cdef bint _decoded(list msgs):
    """Every item is a ``Publish`` tuple whose number is an int, as the
    decoder makes them (else the reference takes the run)."""
    cdef Py_ssize_t i
    cdef PyObject* msg
    for i in range(PyList_GET_SIZE(msgs)):
        msg = PyList_GET_ITEM(msgs, i)
        if type(<object>msg) is not PUBLISH or type(<object>PyTuple_GET_ITEM(<object>msg, 0)) is not int:
            return False
    return True


cdef Py_ssize_t _in_order(session, list msgs) except -1:
    """The twin of :meth:`cluster_bus.session.InSession.in_order` for a run
    that :func:`_decoded` passed."""
    expected = session.expected
    if type(expected) is not int or not 1 <= expected <= 0xFFFFFFFF:
        return session.in_order(msgs)
    cdef uint64_t want = expected
    cdef Py_ssize_t n = 0, total = PyList_GET_SIZE(msgs)
    cdef int overflow = 0
    cdef long long seq
    while n < total:
        number = <object>PyTuple_GET_ITEM(<object>PyList_GET_ITEM(msgs, n), 0)
        seq = PyLong_AsLongLongAndOverflow(number, &overflow)
        if overflow or seq < 0 or <uint64_t>seq != want:
            break
        want = want + 1 if want != 0xFFFFFFFF else 1
        n += 1
    session.expected = want
    return n


def publishes_received(self, link, msgs):
    """The twin of :meth:`cluster_bus.forwarding.Forwarding.publishes_received`
    for a run of the decoder's ``Publish`` tuples (any other: the reference)."""
    if type(msgs) is not list or not _decoded(msgs):
        return PUBLISHES_RECEIVED(self, link, msgs)
    cdef list run = msgs
    cdef bint hot = _hot_forwarding(type(self))
    stats = _field(self, hot, OFF_FWD_STATS, "stats")
    received = _field(stats, type(stats) is BUS_STATS, OFF_STATS_RECEIVED, "received")
    received[MSG_PUBLISH] += PyList_GET_SIZE(run)
    peer = _field(link, _hot_link(type(link)), OFF_LINK_PEER_ID, "peer_id")
    assert peer is not None
    session = _field(self, hot, OFF_FWD_IN_SESSIONS, "in_sessions").get(peer) or self._in(peer)
    cdef Py_ssize_t n = _in_order(session, run) if type(session) is IN_SESSION else session.in_order(run)
    if n:
        _field(self, hot, OFF_FWD_NODE, "node").deliver_forwarded_run(peer, run, n)
    cdef Py_ssize_t i
    for i in range(n, PyList_GET_SIZE(run)):
        if i >= PyList_GET_SIZE(run):
            raise IndexError("list index out of range")
        msg = <object>PyList_GET_ITEM(run, i)
        self._one_received(link, peer, session, msg)


# ---------------------------------------------------------------------------
# Out: a forwarded PUBLISH numbered and framed per peer (Forwarding.forward)


cdef bytes _frame(uint32_t sender, uint32_t seq, uint64_t origin_seq, bint shard,
                  bytes channel, bytes payload):
    """The PUBLISH frame of :func:`cluster_bus.codec.encode_publish`."""
    cdef Py_ssize_t nc = len(channel), nm = len(payload)
    cdef bytes frame = PyBytes_FromStringAndSize(NULL, PUBLISH_HEADER_SIZE + nc + nm)
    cdef uint8_t* w = <uint8_t*>PyBytes_AS_STRING(frame)
    w[0] = MAGIC0
    w[1] = MAGIC1
    w[2] = VERSION
    w[3] = T_PUBLISH
    w[4] = 0
    w[5] = FLAG_SHARD if shard else 0
    _put32(w + 6, <uint32_t>(16 + nc + nm))
    _put32(w + 10, sender)
    _put32(w + 14, seq)
    _put32(w + 18, <uint32_t>(origin_seq >> 32))
    _put32(w + 22, <uint32_t>origin_seq)
    _put32(w + 26, <uint32_t>nc)
    memcpy(w + 30, PyBytes_AS_STRING(channel), nc)
    memcpy(w + 30 + nc, PyBytes_AS_STRING(payload), nm)
    return frame


cdef bytes _encode(sender, seq, origin_seq, shard, channel, payload):
    """``encode_publish``: in C when every field fits its place in the frame
    (else the reference, which raises ``struct.error`` as it does)."""
    if (type(sender) is int and type(seq) is int and type(origin_seq) is int
            and type(channel) is bytes and type(payload) is bytes
            and 0 <= sender <= 0xFFFFFFFF and 0 <= origin_seq <= 0xFFFFFFFFFFFFFFFF
            and 16 + len(<bytes>channel) + len(<bytes>payload) <= 0xFFFFFFFF):
        return _frame(sender, seq & 0xFFFFFFFF, origin_seq, bool(shard), channel, payload)
    return _encode_publish(sender, seq, origin_seq, shard, channel, payload)


# An out session's fields are slots (cluster_bus.session.OutSession): read
# and written here at their member descriptors' offsets for a session of
# that exact class, as router/_dataplane.pyx reads a connection's.

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset

    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member


cdef Py_ssize_t _offset(str name, cls=_OutSession) except -1:
    import types
    descriptor = cls.__dict__[name]
    if type(descriptor) is not types.MemberDescriptorType:
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    return (<PyMemberDescrObject*><PyObject*>descriptor).d_member.offset


cdef Py_ssize_t OFF_NEXT_SEQ = _offset("next_seq")
cdef Py_ssize_t OFF_FRAMES = _offset("_frames")
cdef Py_ssize_t OFF_FIRST = _offset("_first")
cdef Py_ssize_t OFF_MARKED = _offset("_marked")
cdef Py_ssize_t OFF_BYTES = _offset("_bytes")
cdef Py_ssize_t OFF_MAX_BYTES = _offset("max_bytes")


cdef inline PyObject* _slot(object obj, Py_ssize_t offset) noexcept:
    """The slot's value (borrowed), NULL when unset."""
    return (<PyObject**>((<char*><PyObject*>obj) + offset))[0]


cdef inline void _store(obj, Py_ssize_t offset, value) noexcept:
    """Set a slot (which holds a value: the old one is released)."""
    cdef PyObject** at = <PyObject**>((<char*><PyObject*>obj) + offset)
    cdef PyObject* old = at[0]
    Py_INCREF(value)
    at[0] = <PyObject*>value
    Py_XDECREF(old)


# The read path's fields are slots too: a link's (cluster_bus.link.
# LinkHotFields), the forwarding's (cluster_bus.forwarding.
# ForwardingHotFields), the decoder's (FrameDecoder) and the bus's counters
# (BusStats). A link's and a forwarding's class is made per bus
# (cluster_bus.dataplane), so each is read at the offsets only when its
# class reads those slots by the base's own member descriptors (_hot).

cdef Py_ssize_t OFF_LINK_TLS = _offset("_tls", _LinkHotFields)
cdef Py_ssize_t OFF_LINK_AUTHENTICATED = _offset("authenticated", _LinkHotFields)
cdef Py_ssize_t OFF_LINK_CLOSED = _offset("closed", _LinkHotFields)
cdef Py_ssize_t OFF_LINK_DECODER = _offset("decoder", _LinkHotFields)
cdef Py_ssize_t OFF_LINK_FIRST_BYTES = _offset("first_bytes", _LinkHotFields)
cdef Py_ssize_t OFF_LINK_LAST_RX_MS = _offset("last_rx_ms", _LinkHotFields)
cdef Py_ssize_t OFF_LINK_OWNER = _offset("owner", _LinkHotFields)
cdef Py_ssize_t OFF_LINK_PEER_ID = _offset("peer_id", _LinkHotFields)
cdef Py_ssize_t OFF_FWD_IN_SESSIONS = _offset("in_sessions", _ForwardingHotFields)
cdef Py_ssize_t OFF_FWD_NODE = _offset("node", _ForwardingHotFields)
cdef Py_ssize_t OFF_FWD_STATS = _offset("stats", _ForwardingHotFields)
cdef Py_ssize_t OFF_DEC_BROKEN = _offset("_broken", _FrameDecoder)
cdef Py_ssize_t OFF_DEC_BUF = _offset("_buf", _FrameDecoder)
cdef Py_ssize_t OFF_DEC_FAST = _offset("_fast", _FrameDecoder)
cdef Py_ssize_t OFF_DEC_NEED = _offset("_need", _FrameDecoder)
cdef Py_ssize_t OFF_DEC_EXPECT_SENDER = _offset("expect_sender", _FrameDecoder)
cdef Py_ssize_t OFF_DEC_MAX_BODY = _offset("max_body", _FrameDecoder)
cdef Py_ssize_t OFF_STATS_RECEIVED = _offset("received", _BusStats)

# the last link class and forwarding class _hot checked, and the answers
cdef object LINK_CHECKED = None
cdef bint LINK_HOT = False
cdef object FWD_CHECKED = None
cdef bint FWD_HOT = False


def _reads_slots(cls, base):
    """Whether ``cls`` reads each of ``base``'s slots by ``base``'s own
    member descriptor (no subclass shadows one)."""
    return issubclass(cls, base) and all(
        getattr(cls, name) is base.__dict__[name] for name in base.__slots__
    )


cdef inline bint _hot_link(cls) except -1:
    global LINK_CHECKED, LINK_HOT
    cdef bint hot
    if cls is not LINK_CHECKED:
        hot = _reads_slots(cls, _LinkHotFields)  # (may run Python: both set after it)
        LINK_HOT = hot
        LINK_CHECKED = cls
    return LINK_HOT


cdef inline bint _hot_forwarding(cls) except -1:
    global FWD_CHECKED, FWD_HOT
    cdef bint hot
    if cls is not FWD_CHECKED:
        hot = _reads_slots(cls, _ForwardingHotFields)
        FWD_HOT = hot
        FWD_CHECKED = cls
    return FWD_HOT


cdef inline object _field(obj, bint hot, Py_ssize_t offset, str name):
    """``obj.<name>``: at ``offset`` when ``hot`` and the slot is set, else by
    attribute (the same value, or the same AttributeError)."""
    cdef PyObject* value
    if hot:
        value = _slot(obj, offset)
        if value != NULL:
            return <object>value
    return getattr(obj, name)


cdef bytes _session_publish(session, sender, origin_seq, shard, channel, payload):
    """The twin of :meth:`cluster_bus.session.OutSession.publish`, for an
    ``OutSession`` whose slots hold what they usually do (else by attribute,
    as the reference reads them)."""
    cdef PyObject* next_seq = _slot(session, OFF_NEXT_SEQ)
    if next_seq == NULL or type(<object>next_seq) is not int:
        seq = session.next_seq  # (the reference's AttributeError)
    else:
        seq = <object>next_seq
    _store(session, OFF_NEXT_SEQ, seq + 1 if seq != 0xFFFFFFFF else 1)
    frame = _encode(sender, seq, origin_seq, shard, channel, payload)
    # the rest reads the slots as the reference does, after the frame is made
    # (an encode of unusual types runs Python code)
    cdef PyObject* frames = _slot(session, OFF_FRAMES)
    cdef PyObject* marked = _slot(session, OFF_MARKED)
    if (frames == NULL or marked != Py_True or type(<object>frames) is not deque):
        return _keep_by_name(session, seq, frame)
    # marked: this period's mark is made (the common case; else the reference's order)
    queue = <object>frames
    if not queue:
        _store(session, OFF_FIRST, seq)
    queue.append(frame)
    cdef PyObject* held = _slot(session, OFF_BYTES)
    if held == NULL or type(<object>held) is not int:
        session._bytes += len(frame)
        total = session._bytes
    else:
        total = <object>held + len(frame)
        _store(session, OFF_BYTES, total)
    cdef PyObject* limit = _slot(session, OFF_MAX_BYTES)
    if total > (<object>limit if limit != NULL else session.max_bytes):
        session._evict_bytes()
    return frame


cdef bytes _keep_by_name(session, seq, bytes frame):
    """The rest of :meth:`cluster_bus.session.OutSession.publish` once the
    frame is made, the fields by name."""
    frames = session._frames
    if not frames:
        session._first = seq
    frames.append(frame)
    if not session._marked:
        period = session.period
        session._marks.append((period.now, seq))
        session._marked = True
        period.active.add(session)
    session._bytes += len(frame)
    if session._bytes > session.max_bytes:
        session._evict_bytes()
    return frame


@cython.final
cdef class Forwarder:
    """The twin of :meth:`cluster_bus.forwarding.Forwarding.forward`, holding
    what it reads of its forwarding for that one's life (the routing table
    and its caches, which are cleared and never replaced, the links, the
    sessions, the counters and their per-type dict); ``forward`` is the forwarding's own
    (:func:`cluster_bus.dataplane.forwarding_class`)."""

    cdef object forwarding, routing, stats, sender
    cdef dict cache, shard_cache, nodes_cache, out, inbound, sessions, sent_counts

    def __init__(self, forwarding):
        self.forwarding = forwarding
        self.routing = routing = forwarding.routing
        self.cache = routing._cache
        self.shard_cache = routing._shard_cache
        self.nodes_cache = routing._nodes_cache
        self.stats = stats = forwarding.stats
        self.sent_counts = stats.sent  # (BusStats' dicts are filled, never replaced)
        self.out = forwarding.mesh.out
        self.inbound = forwarding.mesh.inbound
        self.sessions = forwarding.out_sessions
        self.sender = forwarding._sender

    def forward(self, channel, message, shard, origin_seq):
        """ClusterLink.forward_publish: the number of peers it was routed to."""
        routing = self.routing
        peers = routing.peer_count
        if not peers:  # a lone node: nothing to route to
            return 0
        stats = self.stats
        cdef PyObject* cached = PyDict_GetItemWithError(self.shard_cache if shard else self.cache, channel)
        mask = <object>cached if cached != NULL and <object>cached is not None else routing.route(channel, shard)
        if not mask:
            stats.publish_suppressed += peers
            return 0
        cached = PyDict_GetItemWithError(self.nodes_cache, mask)
        nodes = <object>cached if cached != NULL and <object>cached is not None else routing.nodes_of(mask)
        out, inbound, sessions, sender = self.out, self.inbound, self.sessions, self.sender
        cdef Py_ssize_t sent = 0
        for node_id in nodes:
            session = sessions.get(node_id) or self.forwarding._out(node_id)
            if type(session) is OUT_SESSION:
                frame = _session_publish(session, sender, origin_seq, shard, channel, message)
            else:
                frame = session.publish(sender, origin_seq, shard, channel, message)
            link = out.get(node_id)
            if link is None or not link.authenticated:
                link = inbound.get(node_id)
                if link is None or not link.authenticated:
                    stats.publish_held_no_link += 1
                    continue
            link.write(frame, True)  # a forward: may linger
            sent += 1
        self.sent_counts[MSG_PUBLISH] += sent
        suppressed = peers - len(nodes)
        if suppressed:  # (the reference adds 0 too: the same value either way)
            stats.publish_suppressed += suppressed
        return len(nodes)
