"""The bus decoder, sans-IO: a byte stream in, :mod:`cluster_bus.frames` out.

Reads exactly the wire layout documented in :mod:`cluster_bus.codec` (same
structs). Every check that can fail raises :class:`BusProtocolError`: bad
magic, unknown version or type, a length above ``max_body``, a body shorter or
longer than its fields say, a position >= m, an m that is not a power of two,
a compressed filter whose declared length is not m. A decoder that raised
stays broken (the link is to be closed). Fuzzed by ``tests/fuzz/fuzz_bus.py``.
"""

from __future__ import annotations

from struct import error as StructError

import cython
from bitarray import bitarray
from bitarray.util import sc_decode

from cluster_bus.codec import (
    _DELTA,
    _FAIL,
    _FULL,
    _GOSSIP,
    _HEARTBEAT,
    _HELLO,
    _NODE,
    _PUBLISH_FIXED,
    _RESEND,
    _SEALED,
    _SESSION,
    _T_PUBLISH,
    _TYPES,
    _U8,
    _U32,
    DEFAULT_MAX_BODY,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_FILTER_BITS,
    STATS_QUERY_BYTES,
    STATS_REPLY_BYTES,
    VERSION,
    BusProtocolError,
)

if not cython.compiled:  # (compiled: cluster_bus/_decoder.pxd cimports the C twins)
    from cluster_bus.codec import decode_positions, decode_publishes

from cluster_bus.frames import (
    FLAG_COMPRESSED,
    FLAG_MORE,
    FLAG_REPLY,
    FLAG_SHARD,
    Ack,
    Fail,
    FilterDelta,
    FilterFull,
    FilterKind,
    FilterRequest,
    GossipEntry,
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


@cython.final
@cython.cclass
class FrameDecoder:
    """Incremental decoder: ``feed(bytes) -> list[Message]``.

    ``max_body`` bounds the bytes buffered for one frame (memory is at most one
    partial frame plus one ``feed`` call). ``expect_sender``, once set, is the
    short id every frame's header must carry. ``last_senders`` is not kept: on
    a TCP link the peer is the sender.

    PUBLISH frames, nearly all traffic, take a fast path
    (:func:`cluster_bus.codec.decode_publishes`: header and fixed fields in
    one unpack, the message built without a Python call; by C pointers on the
    compiled plane). It takes only frames that pass every check, and leaves
    any other to the general path, which names the fault. ``fast=False`` is
    the general path alone, the reference the fuzzer
    (``tests/fuzz/fuzz_bus.py``) compares the fast one with.
    """

    def __init__(
        self,
        max_body: int = DEFAULT_MAX_BODY,
        expect_sender: int | None = None,
        *,
        fast: bool = True,
    ) -> None:
        self.max_body = max_body
        self._fast = fast
        self.expect_sender = expect_sender
        self._buf = bytearray()
        self._need = HEADER_SIZE
        self._broken = False

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return len(self._buf)

    def take_buffer(self) -> bytes:
        """The bytes held for a frame not yet complete, handed to a successor
        decoder (the link's sealed one); this decoder is done."""
        if self._broken:
            raise BusProtocolError("decoder already failed")
        held = bytes(self._buf)
        self._buf.clear()
        self._broken = True
        return held

    def feed(self, data: bytes, limit: int = -1) -> list[Message]:
        """Decode every complete frame in the stream so far, or at most
        ``limit`` frames (the rest stays buffered, undecoded, for the next
        call: a link in its handshake reads one frame at a time, so the
        frames after the handshake's last one are decoded with the limits of
        the authenticated link, :class:`cluster_bus.link.Link`).

        Raises BusProtocolError on a malformed frame (and on every later call)."""
        if self._broken:
            raise BusProtocolError("decoder already failed")
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:
                return []
            view = bytes(buf)
            buf.clear()
        else:
            view = data
        try:
            out, pos = self._parse(view, limit)
        except BusProtocolError:
            self._broken = True
            raise
        if pos < len(view):
            buf += view[pos:]
        return out

    def _parse(self, data: bytes, limit: int) -> tuple[list[Message], int]:
        out: list[Message] = []
        end = len(data)
        pos = 0
        expect = self.expect_sender
        max_body = self.max_body
        fast = self._fast and limit < 0
        while True:
            if fast and type(data) is bytes:  # the hot path: codec.decode_publishes
                pos = decode_publishes(data, pos, expect, max_body, out)  # type: ignore[arg-type]
            if end - pos < HEADER_SIZE:
                break
            # (looked up here: a read of PUBLISH frames alone never gets this far)
            magic, version, mtype, flags, length, sender = HEADER.unpack_from(data, pos)
            if magic != MAGIC:
                raise BusProtocolError(f"bad magic {magic!r}")
            if version != VERSION:
                raise BusProtocolError(f"unknown protocol version {version}")
            if mtype not in _TYPES:
                raise BusProtocolError(f"unknown message type {mtype}")
            if length > max_body:
                raise BusProtocolError(f"frame length {length} above limit {max_body}")
            if expect is not None and sender != expect:
                raise BusProtocolError(f"sender {sender:08x} is not the link's peer")
            start = pos + HEADER_SIZE
            stop = start + length
            if stop > end:
                self._need = stop - pos
                return out, pos
            if mtype == _T_PUBLISH:
                if length < 16:
                    raise BusProtocolError("truncated PUBLISH")
                seq, origin_seq, clen = _PUBLISH_FIXED.unpack_from(data, start)
                cstart = start + 16
                if cstart + clen > stop:
                    raise BusProtocolError("truncated PUBLISH channel")
                out.append(
                    Publish(
                        seq,
                        origin_seq,
                        bool(flags & FLAG_SHARD),
                        data[cstart : cstart + clen],
                        data[cstart + clen : stop],
                    )
                )
            else:
                try:
                    out.append(_decode_body(mtype, flags, data[start:stop]))
                except (StructError, ValueError, IndexError) as exc:
                    raise BusProtocolError(f"bad {MsgType(mtype).name} body: {exc}") from None
            pos = stop
            if len(out) == limit:
                break
        self._need = HEADER_SIZE
        return out, pos


#: the frame types of a subscribe change's round trip, as plain ints (_decode_body)
_ACK_TYPE = int(MsgType.ACK)
_DELTA_TYPE = int(MsgType.FILTER_DELTA)
_FILTER_KINDS = tuple(FilterKind)  # by value (0, 1): a call of the IntEnum is ~2 k
_DELTA_SIZE = _DELTA.size
_new_tuple = tuple.__new__


def _decode_stats(mtype: int, body: bytes) -> StatsRequest | StatsReply:
    """A STATS_REQUEST or STATS_REPLY body (issue 51); bounded, else a bad frame."""
    if len(body) < 4:
        raise BusProtocolError(f"{MsgType(mtype).name} shorter than its request id")
    (request_id,) = _U32.unpack_from(body, 0)
    if mtype == MsgType.STATS_REQUEST:
        if len(body) - 4 > STATS_QUERY_BYTES:
            raise BusProtocolError("STATS_REQUEST query above 256 bytes")
        return StatsRequest(request_id, body[4:])
    if len(body) - 4 > STATS_REPLY_BYTES:
        raise BusProtocolError("STATS_REPLY body above 68 KiB")
    return StatsReply(request_id, body[4:])


def _done(body: bytes, at: int, what: str) -> None:
    if at != len(body):
        raise BusProtocolError(f"{what}: {len(body) - at} trailing bytes")


def _decode_heartbeat(mtype: int, body: bytes) -> Meet | Ping | Pong:
    (node, cport, bport, tport, cfp, pfp, epoch, mask, match_all, nflags, inc, hlen, nlen, ng) = (
        _HEARTBEAT.unpack_from(body, 0)
    )
    at = _HEARTBEAT.size
    host = body[at : at + hlen]
    if len(host) != hlen:
        raise BusProtocolError("truncated host")
    at += hlen
    hostname = body[at : at + nlen]
    if len(hostname) != nlen:
        raise BusProtocolError("truncated hostname")
    at += nlen
    gossip = []
    for _ in range(ng):
        (gnode, gc, gb, gt, gflags, ginc, gepoch, gcfp, gpfp, ghlen, gnlen) = _GOSSIP.unpack_from(
            body, at
        )
        at += _GOSSIP.size
        ghost = body[at : at + ghlen]
        if len(ghost) != ghlen:
            raise BusProtocolError("truncated gossip host")
        at += ghlen
        gname = body[at : at + gnlen]
        if len(gname) != gnlen:
            raise BusProtocolError("truncated gossip hostname")
        at += gnlen
        gossip.append(
            GossipEntry(
                gnode.hex(),
                ghost.decode(),
                gc,
                gb,
                gflags,
                ginc,
                gepoch,
                gcfp,
                gpfp,
                gt,
                gname.decode(),
            )
        )
    _done(body, at, "heartbeat")
    cls = Meet if mtype == MsgType.MEET else Ping if mtype == MsgType.PING else Pong
    return cls(
        node.hex(),
        host.decode(),
        cport,
        bport,
        cfp,
        pfp,
        epoch,
        mask,
        bool(match_all),
        nflags,
        tuple(gossip),
        inc,
        tport,
        hostname.decode(),
    )


def _decode_m(m: int) -> None:
    if m < 8 or m > MAX_FILTER_BITS or m & (m - 1):
        raise BusProtocolError(f"filter size m={m} is not a power of two in 8..2^28")


def _decode_body(mtype: int, flags: int, body: bytes) -> Message:
    # a subscribe change's round trip first, by plain ints (issue 48: an
    # ACK came after a dozen IntEnum comparisons, each a global and an
    # attribute lookup and a rich comparison: 17 k instructions a frame)
    # (both NamedTuples, built by tuple.__new__: no Python-level __new__)
    if mtype == _ACK_TYPE:
        _done(body, 4, "ACK")
        return _new_tuple(Ack, _U32.unpack_from(body, 0))
    if mtype == _DELTA_TYPE:
        (kind, match_all, delta_id, m, base, new, epoch, mask, nset, nclear) = _DELTA.unpack_from(
            body, 0
        )
        _decode_m(m)
        n = nset + nclear
        if len(body) != _DELTA_SIZE + 4 * n:
            raise BusProtocolError("FILTER_DELTA length does not match its position count")
        positions = decode_positions(body, _DELTA_SIZE, n, m)  # one C loop when compiled
        if positions is None:
            raise BusProtocolError("FILTER_DELTA position >= m")
        return _new_tuple(
            FilterDelta,
            (
                _FILTER_KINDS[kind],  # IndexError for a bad kind: a bad body
                delta_id,
                m,
                base,
                new,
                positions[:nset],
                positions[nset:],
                epoch,
                mask,
                match_all != 0,
                (flags & FLAG_MORE) != 0,
            ),
        )
    if mtype in (MsgType.MEET, MsgType.PING, MsgType.PONG):
        return _decode_heartbeat(mtype, body)
    if mtype == MsgType.HELLO:
        node, nonce, boot, mlen = _HELLO.unpack_from(body, 0)
        mac = body[_HELLO.size :]
        if len(mac) != mlen:
            raise BusProtocolError("HELLO mac length mismatch")
        return Hello(node.hex(), nonce, mac, bool(flags & FLAG_REPLY), boot)
    if mtype == MsgType.HELLO_AUTH:
        return HelloAuth(body)
    if mtype == MsgType.FILTER_REQUEST:
        (kind,) = _U8.unpack_from(body, 0)
        _done(body, 1, "FILTER_REQUEST")
        return FilterRequest(FilterKind(kind))
    if mtype == MsgType.FILTER_FULL:
        kind, k, match_all, m, fp, epoch, mask = _FULL.unpack_from(body, 0)
        _decode_m(m)
        raw = body[_FULL.size :]
        if flags & FLAG_COMPRESSED:
            bits = _sc_decode_checked(raw, m)
        else:
            if len(raw) * 8 != m:
                raise BusProtocolError("FILTER_FULL bits are not m/8 bytes")
            bits = raw
        return FilterFull(FilterKind(kind), m, k, bits, fp, epoch, mask, bool(match_all))
    if mtype == MsgType.FAIL:
        _done(body, _FAIL.size, "FAIL")
        node, inc = _FAIL.unpack_from(body, 0)
        return Fail(node.hex(), inc)
    if mtype in (MsgType.PROBE_REQ, MsgType.PROBE_ACK):
        _done(body, 20, MsgType(mtype).name)
        (node,) = _NODE.unpack_from(body, 0)
        return ProbeReq(node.hex()) if mtype == MsgType.PROBE_REQ else ProbeAck(node.hex())
    if mtype in (MsgType.STATS_REQUEST, MsgType.STATS_REPLY):
        return _decode_stats(mtype, body)
    if mtype == MsgType.LEAVE:
        _done(body, 0, "LEAVE")
        return Leave()
    if mtype == MsgType.SESSION:
        _done(body, _SESSION.size, "SESSION")
        return Session(*_SESSION.unpack_from(body, 0))
    if mtype == MsgType.RESEND:
        _done(body, _RESEND.size, "RESEND")
        return Resend(*_RESEND.unpack_from(body, 0))
    if mtype == MsgType.SEALED:
        seq, tag = _SEALED.unpack_from(body, 0)
        return Sealed(seq, tag, body[_SEALED.size :])
    raise BusProtocolError(f"unknown message type {mtype}")  # pragma: no cover


def _sc_decode_checked(raw: bytes, m: int) -> bytes:
    """sc_decode after checking the declared length is m (so no allocation bomb)."""
    if not raw:
        raise BusProtocolError("empty compressed filter")
    head = raw[0]
    nbytes = head & 0x0F
    if head & 0xE0 or nbytes > 8 or len(raw) < 1 + nbytes:
        raise BusProtocolError("bad compressed filter header")
    length = int.from_bytes(raw[1 : 1 + nbytes], "little")
    if length != m:
        raise BusProtocolError(f"compressed filter holds {length} bits, expected m={m}")
    try:
        bits = sc_decode(raw)
    except (ValueError, TypeError, StopIteration) as exc:
        raise BusProtocolError(f"bad compressed filter: {exc}") from None
    if len(bits) != m:
        raise BusProtocolError("compressed filter length mismatch")
    if bits.endian != "big":
        bits = bitarray(bits, endian="big")
    return bits.tobytes()
