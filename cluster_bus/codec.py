"""Sans-IO codec of the cluster bus: bytes in, :mod:`cluster_bus.frames` out, and back.

Like h11, nothing here touches a socket: :func:`encode` turns a message into
bytes and :class:`cluster_bus.decoder.FrameDecoder` turns a byte stream (fed
in arbitrary pieces) into messages, raising :class:`BusProtocolError` on
anything malformed. The caller closes the link on that error and counts it.
This module holds the wire layout (below) and the encoder; the decoder reads
the same structs.

Wire format (all integers big-endian, network order)
----------------------------------------------------
Every frame starts with a 14-byte header::

    offset size field
    0      2    magic      b"bc"
    2      1    version    2 (also fixes the Bloom hashing scheme: mmh3 x64 128,
                           enhanced double hashing, seed 0; version 1 had no
                           loss bounds in SESSION, no boot in HELLO, no TLS
                           port or hostname in heartbeats)
    3      1    type       MsgType
    4      2    flags      FLAG_SHARD | FLAG_REPLY | FLAG_COMPRESSED | FLAG_MORE
    6      4    length     body bytes that follow the header (<= max_body)
    10     4    sender     the sender's short id: the first 32 bits of its node
                           id; checked against the link's peer after the handshake

PUBLISH body (so the whole PUBLISH frame header is 14 + 16 = 30 bytes, against
Redis Cluster's 2256-byte ``clusterMsg`` header and Valkey's 16-byte light header
which carries no sequence numbers)::

    14     4    seq          forwarding session sequence number (u32, wraps)
    18     8    origin_seq   the origin node's PUBLISH counter
    26     4    channel_len
    30     ..   channel, then the payload (the rest of the body)

Other bodies (``20s`` = a node id as 20 raw bytes)::

    HELLO       20s node_id, 16s nonce, u64 boot, u8 mac_len, mac
                (FLAG_REPLY on the answer)
    HELLO_AUTH  mac (the whole body: 0 or 32 bytes)
    MEET/PING/PONG
                20s node_id, u16 client_port, u16 bus_port, u16 tls_port,
                u64 channel_fp, u64 pattern_fp, u64 filter_epoch, u64 prefix_mask,
                u8 match_all, u16 flags, u32 incarnation, u8 host_len,
                u8 hostname_len, u8 gossip_count, host, hostname,
                then gossip_count x (20s node_id, u16 client_port, u16 bus_port,
                u16 tls_port, u16 flags, u32 incarnation, u64 filter_epoch,
                u64 channel_fp, u64 pattern_fp, u8 host_len, u8 hostname_len,
                host, hostname)
    FILTER_REQUEST  u8 kind
    FILTER_FULL u8 kind, u8 k, u8 match_all, u64 m, u64 fingerprint, u64 epoch,
                u64 prefix_mask, bits (m/8 raw bytes, or sc_encode output when
                FLAG_COMPRESSED)
    FILTER_DELTA u8 kind, u8 match_all, u32 delta_id, u64 m, u64 base_fp,
                u64 new_fp, u64 epoch, u64 prefix_mask, u32 n_set, u32 n_clear,
                (n_set + n_clear) x u32 positions; FLAG_MORE: the batch's next
                delta follows, whose ACK acknowledges this one too
    FAIL        20s node_id, u32 incarnation
    PROBE_REQ   20s node_id (the node to probe)
    PROBE_ACK   20s node_id (the node that answered)
    LEAVE       (empty)
    ACK         u32 delta_id
    SESSION     u64 session_id, u32 first_seq, u32 next_seq, u32 asked,
                u64 gone_from_ms, u64 gone_to_ms, u32 peer_lost
    RESEND      u64 session_id, u32 from_seq, u32 lost
    SEALED      u64 seq, 16s tag, then a batch of whole frames (cluster_bus.seal)
    STATS_REQUEST u32 request_id, then the query (at most 256 bytes)
    STATS_REPLY u32 request_id, then the answer (at most 68 KiB:
                cluster_bus.stats_query.REPLY_BYTES)

Errors: bad magic, unknown version, unknown type, a length above ``max_body``,
a body shorter than its fields say (truncated) or longer (trailing bytes), a
position >= m, an m that is not a power of two, or a compressed filter whose
declared length is not m. Each raises :class:`BusProtocolError`; a decoder
that raised stays broken (the link is to be closed).
"""

from __future__ import annotations

from struct import Struct, unpack_from
from typing import cast

from bitarray import bitarray
from bitarray.util import sc_encode

from cluster_bus.frames import (
    FLAG_COMPRESSED,
    FLAG_MORE,
    FLAG_REPLY,
    FLAG_SHARD,
    Ack,
    Fail,
    FilterDelta,
    FilterFull,
    FilterRequest,
    Heartbeat,
    Hello,
    HelloAuth,
    Leave,
    Meet,
    Message,
    MsgType,
    Ping,
    Pong,
    ProbeAck,
    ProbeReq,
    Publish,
    Resend,
    Sealed,
    Session,
    StatsReply,
    StatsRequest,
)

MAGIC = b"bc"
#: STATS_REQUEST's and STATS_REPLY's most bytes after the request id (the
#: query's and the answer's: cluster_bus.stats_query); the decoder refuses more
STATS_QUERY_BYTES = 256
STATS_REPLY_BYTES = 68 << 10
VERSION = 2
HEADER = Struct(">2sBBHII")
HEADER_SIZE = HEADER.size  # 14
_PUBLISH_FIXED = Struct(">IQI")
PUBLISH_HEAD = Struct(">2sBBHIIIQI")
PUBLISH_HEADER_SIZE = PUBLISH_HEAD.size  # 30
_HELLO = Struct(">20s16sQB")
_HEARTBEAT = Struct(">20sHHHQQQQBHIBBB")
_GOSSIP = Struct(">20sHHHHIQQQBB")
_FAIL = Struct(">20sI")
_FULL = Struct(">BBBQQQQ")
_DELTA = Struct(">BBIQQQQQII")
_U8 = Struct(">B")
_U32 = Struct(">I")
_SESSION = Struct(">QIIIQQI")
_RESEND = Struct(">QII")
_SEALED = Struct(">Q16s")
_NODE = Struct(">20s")

#: default largest body: two 512 MiB bulk strings (channel and payload) + slack
DEFAULT_MAX_BODY = 2 * 512 * 1024 * 1024 + 64 * 1024
MAX_FILTER_BITS = 1 << 28  # 32 MiB of bits: ~28M channels at 1%; bounds decode memory
MAX_GOSSIP = 255

_TYPES = frozenset(int(t) for t in MsgType)
_T_PUBLISH = int(MsgType.PUBLISH)
_T_ACK = int(MsgType.ACK)
_T_DELTA = int(MsgType.FILTER_DELTA)


class BusProtocolError(Exception):
    """A malformed frame: close the link and count it."""


def short_id(node_id: str) -> int:
    """The 32-bit short id of a node id (its first 8 hex characters)."""
    return int(node_id[:8], 16)


def _node_bytes(node_id: str) -> bytes:
    raw = bytes.fromhex(node_id)
    if len(raw) != 20:
        raise ValueError(f"node id must be 40 hex characters: {node_id!r}")
    return raw


def _host_bytes(host: str) -> bytes:
    raw = host.encode()
    if len(raw) > 255:
        raise ValueError("host longer than 255 bytes")
    return raw


def _frame(mtype: int, flags: int, sender: int, body: bytes) -> bytes:
    return HEADER.pack(MAGIC, VERSION, mtype, flags, len(body), sender) + body


def decode_publishes(
    data: bytes, pos: int, expect: int | None, max_body: int, out: list[Publish]
) -> int:
    """The hot path of :class:`cluster_bus.decoder.FrameDecoder`: the
    complete PUBLISH frames from ``pos`` on that pass every check the general
    path makes (magic, version, length within ``max_body``, the sender
    ``expect`` when not None, the body's fields), header and fixed fields in
    one unpack, appended to ``out`` as ``Publish`` tuples built without a
    Python call; returns where the first other frame begins (the general
    path takes it from there and names its fault, or waits for its bytes).
    The compiled plane's is ``cluster_bus/_codec.pyx``'s, by C pointers."""
    end = len(data)
    unpack = PUBLISH_HEAD.unpack_from
    while end - pos >= PUBLISH_HEADER_SIZE and data[pos + 3] == _T_PUBLISH:
        magic, version, _, flags, length, sender, seq, origin_seq, clen = unpack(data, pos)
        stop = pos + HEADER_SIZE + length
        cstart = pos + PUBLISH_HEADER_SIZE
        if (
            magic != MAGIC
            or version != VERSION
            or length > max_body
            or (expect is not None and sender != expect)
            or stop > end
            or length < 16
            or cstart + clen > stop
        ):
            break
        # tuple.__new__: the NamedTuple without its Python-level __new__
        out.append(
            _new_tuple(
                Publish,
                (
                    seq,
                    origin_seq,
                    (flags & FLAG_SHARD) != 0,
                    data[cstart : cstart + clen],
                    data[cstart + clen : stop],
                ),
            )
        )
        pos = stop
    return pos


_new_tuple = tuple.__new__


def decode_positions(body: bytes, at: int, n: int, m: int) -> tuple[int, ...] | None:
    """A FILTER_DELTA's ``n`` u32 positions from ``body[at:]`` (the caller
    checked the length), or None when one is >= ``m`` (a bad frame). The
    compiled plane's is ``cluster_bus/_codec.pyx``'s: one C loop, no
    ``Struct`` built per frame (issue 48)."""
    positions: tuple[int, ...] = unpack_from(f">{n}I", body, at)
    if n and max(positions) >= m:
        return None
    return positions


def ack_frame(sender: int, delta_id: int) -> bytes:
    """The ACK frame of ``delta_id`` without building an :class:`Ack` (a
    peer's answer to each subscribe change, issue 48); ``encode(Ack(...))``
    makes the same bytes."""
    return HEADER.pack(MAGIC, VERSION, _T_ACK, 0, 4, sender) + _U32.pack(delta_id)


def encode_publish(
    sender: int, seq: int, origin_seq: int, shard: bool, channel: bytes, payload: bytes
) -> bytes:
    """The PUBLISH frame without building a :class:`Publish` (the hot path;
    the compiled plane's is ``cluster_bus/_codec.pyx``'s)."""
    return b"".join(
        (
            PUBLISH_HEAD.pack(
                MAGIC,
                VERSION,
                _T_PUBLISH,
                FLAG_SHARD if shard else 0,
                16 + len(channel) + len(payload),
                sender,
                seq & 0xFFFFFFFF,
                origin_seq,
                len(channel),
            ),
            channel,
            payload,
        )
    )


def _encode_heartbeat(mtype: MsgType, msg: Heartbeat, sender: int) -> bytes:
    host = _host_bytes(msg.host)
    hostname = _host_bytes(msg.hostname)
    if len(msg.gossip) > MAX_GOSSIP:
        raise ValueError("at most 255 gossip entries")
    parts = [
        _HEARTBEAT.pack(
            _node_bytes(msg.node_id),
            msg.client_port,
            msg.bus_port,
            msg.tls_port,
            msg.channel_fp,
            msg.pattern_fp,
            msg.filter_epoch,
            msg.prefix_mask,
            1 if msg.match_all else 0,
            msg.flags,
            msg.incarnation,
            len(host),
            len(hostname),
            len(msg.gossip),
        ),
        host,
        hostname,
    ]
    for g in msg.gossip:
        ghost = _host_bytes(g.host)
        gname = _host_bytes(g.hostname)
        parts.append(
            _GOSSIP.pack(
                _node_bytes(g.node_id),
                g.client_port,
                g.bus_port,
                g.tls_port,
                g.flags,
                g.incarnation,
                g.filter_epoch,
                g.channel_fp,
                g.pattern_fp,
                len(ghost),
                len(gname),
            )
        )
        parts.append(ghost)
        parts.append(gname)
    return _frame(mtype, 0, sender, b"".join(parts))


def encode_sealed(sender: int, seq: int, tag: bytes, batch: bytes) -> bytes:
    """The SEALED frame around ``batch`` (cluster_bus.seal), one copy of it."""
    length = _SEALED.size + len(batch)
    header = HEADER.pack(MAGIC, VERSION, MsgType.SEALED, 0, length, sender)
    return b"".join((header, _SEALED.pack(seq, tag), batch))


def encode(msg: Message, sender: int = 0) -> bytes:
    """One frame for ``msg``; ``sender`` is the sender's :func:`short_id`.

    Raises ValueError for a message that cannot be encoded (bad node id, host
    longer than 255 bytes, position >= m, ...)."""
    # the frames of a remote subscribe change first, by exact type: a peer's
    # ACK went through fifteen isinstance tests (issue 48 item 3)
    cls = type(msg)
    if cls is Ack:
        return ack_frame(sender, cast(Ack, msg).delta_id)
    if cls is FilterDelta:
        return _encode_delta(cast(FilterDelta, msg), sender)
    if isinstance(msg, Publish):
        return encode_publish(sender, msg.seq, msg.origin_seq, msg.shard, msg.channel, msg.payload)
    if isinstance(msg, Meet):
        return _encode_heartbeat(MsgType.MEET, msg, sender)
    if isinstance(msg, Ping):
        return _encode_heartbeat(MsgType.PING, msg, sender)
    if isinstance(msg, Pong):
        return _encode_heartbeat(MsgType.PONG, msg, sender)
    if isinstance(msg, Hello):
        if len(msg.nonce) != 16 or len(msg.mac) > 255:
            raise ValueError("nonce must be 16 bytes, mac at most 255")
        body = _HELLO.pack(_node_bytes(msg.node_id), msg.nonce, msg.boot, len(msg.mac)) + msg.mac
        return _frame(MsgType.HELLO, FLAG_REPLY if msg.reply else 0, sender, body)
    if isinstance(msg, HelloAuth):
        return _frame(MsgType.HELLO_AUTH, 0, sender, msg.mac)
    if isinstance(msg, FilterRequest):
        return _frame(MsgType.FILTER_REQUEST, 0, sender, _U8.pack(msg.kind))
    if isinstance(msg, FilterFull):
        _check_m(msg.m)
        if len(msg.bits) * 8 != msg.m:
            raise ValueError("bits must be m/8 bytes")
        bits: bytes = msg.bits
        flags = 0
        packed = sc_encode(_bits_from_bytes(msg.bits))
        if len(packed) < len(bits):
            bits, flags = packed, FLAG_COMPRESSED
        head = _FULL.pack(
            msg.kind,
            msg.k,
            1 if msg.match_all else 0,
            msg.m,
            msg.fingerprint,
            msg.epoch,
            msg.prefix_mask,
        )
        return _frame(MsgType.FILTER_FULL, flags, sender, head + bits)
    if isinstance(msg, FilterDelta):
        return _encode_delta(msg, sender)
    if isinstance(msg, Fail):
        body = _FAIL.pack(_node_bytes(msg.node_id), msg.incarnation)
        return _frame(MsgType.FAIL, 0, sender, body)
    if isinstance(msg, ProbeReq):
        return _frame(MsgType.PROBE_REQ, 0, sender, _node_bytes(msg.node_id))
    if isinstance(msg, ProbeAck):
        return _frame(MsgType.PROBE_ACK, 0, sender, _node_bytes(msg.node_id))
    if isinstance(msg, Leave):
        return _frame(MsgType.LEAVE, 0, sender, b"")
    if isinstance(msg, StatsRequest):
        return _frame(MsgType.STATS_REQUEST, 0, sender, _U32.pack(msg.request_id) + msg.query)
    if isinstance(msg, StatsReply):
        return _frame(MsgType.STATS_REPLY, 0, sender, _U32.pack(msg.request_id) + msg.body)
    if isinstance(msg, Ack):
        return _frame(MsgType.ACK, 0, sender, _U32.pack(msg.delta_id))
    if isinstance(msg, Session):
        body = _SESSION.pack(
            msg.session_id,
            msg.first_seq,
            msg.next_seq,
            msg.asked,
            msg.gone_from_ms,
            msg.gone_to_ms,
            msg.peer_lost,
        )
        return _frame(MsgType.SESSION, 0, sender, body)
    if isinstance(msg, Resend):
        body = _RESEND.pack(msg.session_id, msg.from_seq, msg.lost)
        return _frame(MsgType.RESEND, 0, sender, body)
    if isinstance(msg, Sealed):
        return encode_sealed(sender, msg.seq, msg.tag, msg.batch)
    raise TypeError(f"not a bus message: {msg!r}")


def _encode_delta(msg: FilterDelta, sender: int) -> bytes:
    _check_m(msg.m)
    positions = msg.set_positions + msg.cleared_positions
    if positions and (min(positions) < 0 or max(positions) >= msg.m):
        raise ValueError("position outside 0..m-1")
    head = _DELTA.pack(
        msg.kind,
        1 if msg.match_all else 0,
        msg.delta_id,
        msg.m,
        msg.base_fp,
        msg.new_fp,
        msg.epoch,
        msg.prefix_mask,
        len(msg.set_positions),
        len(msg.cleared_positions),
    )
    body = head + Struct(f">{len(positions)}I").pack(*positions)
    return _frame(_T_DELTA, FLAG_MORE if msg.more else 0, sender, body)


def _check_m(m: int) -> None:
    if m < 8 or m > MAX_FILTER_BITS or m & (m - 1):
        raise ValueError(f"filter size m must be a power of two in 8..2^28: {m}")


def _bits_from_bytes(raw: bytes) -> bitarray:
    bits = bitarray(endian="big")
    bits.frombytes(raw)
    return bits
