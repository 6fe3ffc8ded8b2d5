"""Cluster bus messages: one frozen dataclass per frame type (PUBLISH, and a
subscribe change's FILTER_DELTA and ACK: a ``NamedTuple``, as immutable and
~4x cheaper to build; see :class:`Publish`).

These are the events of the sans-IO codec (:mod:`cluster_bus.codec`): bytes
decode to these objects and these objects encode to bytes. The byte layout of
each is documented in the codec's module docstring.

Node ids are 40 lowercase hex characters (Redis Cluster's node id form); on
the wire they travel as 20 raw bytes. Fingerprints are Redis's CRC64 of a
filter's bits (bloom.crc64). Times are milliseconds since the Unix epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple


class MsgType(IntEnum):
    """The frame type byte."""

    HELLO = 1  # handshake: node id + nonce (+ HMAC when a secret is set)
    HELLO_AUTH = 2  # handshake: initiator's HMAC over the acceptor's nonce
    MEET = 3
    PING = 4
    PONG = 5
    FILTER_REQUEST = 6
    FILTER_FULL = 7
    FILTER_DELTA = 8
    PUBLISH = 9
    FAIL = 10
    LEAVE = 11
    ACK = 12
    SESSION = 13  # a forwarding session's id and replayable range (first frame on a link)
    RESEND = 14  # replay a session's PUBLISH frames from a sequence number
    PROBE_REQ = 15  # SWIM's ping-req: probe a node for me (indirect probe)
    PROBE_ACK = 16  # answer to PROBE_REQ: the node answered my PING
    SEALED = 17  # a batch of frames with its MAC (cluster secret, no tls-cluster)
    STATS_REQUEST = 18  # a node's statistics asked for (issue 51: BLOOMCAST.HOTCHANNELS CLUSTER)
    STATS_REPLY = 19  # the answer: the asked node's summary, bounded bytes


class FilterKind(IntEnum):
    """Which of a node's two filters a filter message is about."""

    CHANNELS = 0  # channels and shard channels (CountingBloomFilter export)
    PATTERNS = 1  # literal prefixes of glob patterns (PatternFilter)


class NodeFlags:
    """Node state flags, as Redis Cluster's ``CLUSTER_NODE_*`` (names in CLUSTER NODES).

    Plain int bits, not an ``IntFlag``: every ``flags & NodeFlags.FAIL`` on an
    enum builds a new member (about 1.5 µs), and membership tests flags of
    every peer."""

    NONE = 0
    MYSELF = 1
    PFAIL = 2  # "suspected": no PONG within node_timeout_ms
    FAIL = 4  # agreed failed (majority of failure reports, or FAIL received)
    HANDSHAKE = 8  # met, identity not yet confirmed
    NOADDR = 16
    LEAVING = 32  # sent LEAVE: shutting down on purpose
    #: in a MEET's own flags only: the sender joins through this node (a seed,
    #: CLUSTER MEET, a lost node's address): its MEET carries every node it
    #: knows, and the PONG answering it every node the receiver knows
    MEETING = 64


#: flag bit in a frame header
FLAG_SHARD = 1  # PUBLISH: SPUBLISH (shard channel) rather than PUBLISH
FLAG_REPLY = 2  # HELLO: the acceptor's answer
FLAG_COMPRESSED = 4  # FILTER_FULL: bits are bitarray.util.sc_encode output
#: FILTER_DELTA: another delta of the same batch follows on this link, whose
#: ACK acknowledges this one too (a peer acks a batch once; issue 48)
FLAG_MORE = 8


@dataclass(frozen=True, slots=True)
class GossipEntry:
    """What the sender knows about one other node (Redis's ``clusterMsgDataGossip``
    plus SWIM's incarnation number and that node's last announced filters).

    Liveness is versioned by ``incarnation`` (only the node itself raises it, to
    refute a suspicion); the filter part by ``filter_epoch`` (only the node
    itself raises it). See :mod:`cluster_bus.membership` for the rules."""

    node_id: str
    host: str
    client_port: int
    bus_port: int
    flags: int  # NodeFlags as the sender sees that node: 0 alive, PFAIL, FAIL
    incarnation: int = 0  # u32
    filter_epoch: int = 0
    channel_fp: int = 0  # CRC64 of its channel filter at filter_epoch
    pattern_fp: int = 0  # CRC64 of its pattern filter at filter_epoch
    tls_port: int = 0  # its client TLS port (0: none)
    hostname: str = ""  # its cluster-announce-hostname ("" : none)


@dataclass(frozen=True, slots=True)
class Hello:
    """First frame each way on a new link. ``mac`` is HMAC-SHA256 (empty without a
    secret). ``boot`` is random per process: a node that keeps its id across a
    restart (``--cluster-config-file``) is known to be a new life by it."""

    node_id: str
    nonce: bytes  # 16 random bytes
    mac: bytes = b""
    reply: bool = False
    boot: int = 0  # u64


@dataclass(frozen=True, slots=True)
class HelloAuth:
    """Initiator's proof it knows the secret: HMAC over both nonces (empty without one)."""

    mac: bytes = b""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Body shared by MEET, PING and PONG: the sender's identity and filter summary."""

    node_id: str
    host: str
    client_port: int
    bus_port: int
    channel_fp: int  # CRC64 of the channel filter bits
    pattern_fp: int  # CRC64 of the pattern filter bits
    filter_epoch: int  # bumped by the sender on every filter change or rebuild
    prefix_mask: int  # bit L-1 set = pattern prefixes of length L are in use
    match_all: bool  # some pattern starts with a glob: send this node everything
    flags: int = 0  # NodeFlags of the sender about itself
    gossip: tuple[GossipEntry, ...] = field(default_factory=tuple)
    incarnation: int = 0  # the sender's incarnation number (u32, SWIM)
    tls_port: int = 0  # the sender's client TLS port, announced (0: none)
    hostname: str = ""  # the sender's cluster-announce-hostname ("": none)


@dataclass(frozen=True, slots=True)
class Meet(Heartbeat):
    """Sent on a link to a seed (``--join``) or to a node learned by gossip."""


@dataclass(frozen=True, slots=True)
class Ping(Heartbeat):
    pass


@dataclass(frozen=True, slots=True)
class Pong(Heartbeat):
    pass


@dataclass(frozen=True, slots=True)
class FilterRequest:
    """Ask the peer for its whole filter (fingerprint mismatch or unknown filter)."""

    kind: FilterKind


@dataclass(frozen=True, slots=True)
class FilterFull:
    """A whole filter. ``bits`` are the raw bits (bitarray, big-endian bit order,
    m bits); the codec compresses them with ``sc_encode`` when that is smaller."""

    kind: FilterKind
    m: int  # bits, a power of two
    k: int  # hash functions
    bits: bytes  # m // 8 bytes (m >= 8)
    fingerprint: int  # CRC64 of ``bits``
    epoch: int
    prefix_mask: int = 0  # patterns only
    match_all: bool = False  # patterns only


class FilterDelta(NamedTuple):
    """Explicit bit changes against ``base_fp`` (idempotent: setting a set bit or
    clearing a clear bit is a no-op, per Summary Cache). ``delta_id`` is echoed in
    an :class:`Ack` for subscribe visibility; ``more``: another delta of the
    same batch follows, whose ACK stands for this one's (none is sent).

    A ``NamedTuple``, as :class:`Publish` and :class:`Ack`: every peer builds
    one per remote subscribe change, and the frozen dataclass's eleven
    ``object.__setattr__`` were the largest part of decoding it (issue 48)."""

    kind: FilterKind
    delta_id: int
    m: int
    base_fp: int
    new_fp: int
    set_positions: tuple[int, ...]
    cleared_positions: tuple[int, ...]
    epoch: int
    prefix_mask: int = 0
    match_all: bool = False
    more: bool = False


class Publish(NamedTuple):
    """A forwarded client PUBLISH/SPUBLISH. The origin is the link's peer (a
    forwarded message is never forwarded again).

    The one message built per forwarded PUBLISH, so it is a ``NamedTuple``,
    immutable like the frozen dataclasses: a frozen dataclass's ``__init__``
    sets each field through ``object.__setattr__`` and cost 1.06 us per
    message against 0.24 us here (``timeit``, CPython 3.11), a third of the
    receive path (``bench.hot_path``)."""

    seq: int  # the forwarding session's sequence number, u32 wrapping (cluster_bus.session)
    origin_seq: int  # the origin node's PUBLISH counter (traffic event id)
    shard: bool
    channel: bytes
    payload: bytes


@dataclass(frozen=True, slots=True)
class Fail:
    """The sender declared ``node_id`` failed at ``incarnation`` (Redis's FAIL
    message; SWIM's "confirm"): its suspicion timed out unrefuted."""

    node_id: str
    incarnation: int = 0


@dataclass(frozen=True, slots=True)
class ProbeReq:
    """SWIM's ping-req: PING ``node_id`` for me and tell me if it answers."""

    node_id: str


@dataclass(frozen=True, slots=True)
class ProbeAck:
    """``node_id`` answered the PING the sender made for our :class:`ProbeReq`."""

    node_id: str


@dataclass(frozen=True, slots=True)
class Leave:
    """The sender is shutting down on purpose: forget it, do not count it failed."""


class Ack(NamedTuple):
    """The sender applied filter delta ``delta_id`` (or is sending us everything).
    A ``NamedTuple``: one per peer per subscribe change (issue 48)."""

    delta_id: int


@dataclass(frozen=True, slots=True)
class Session:
    """The sender's forwarding session with the receiver: its random id, the
    oldest sequence number it can still replay and the next it will use.

    As the answer to a RESEND for frames the sender no longer holds, ``asked``
    is that RESEND's ``from_seq`` (0 otherwise) and ``gone_from_ms`` ..
    ``gone_to_ms`` bound the publish times of the frames ``asked`` ..
    ``first_seq - 1`` (ms since the epoch), lost for good
    (:mod:`cluster_bus.session`)."""

    session_id: int  # u64, never 0
    first_seq: int
    next_seq: int
    asked: int = 0
    gone_from_ms: int = 0
    gone_to_ms: int = 0
    #: the receiver's count of frames lost in this session, as the sender last
    #: heard it in a RESEND (a receiver that counted more says so again)
    peer_lost: int = 0


@dataclass(frozen=True, slots=True)
class Resend:
    """Replay session ``session_id``'s PUBLISH frames from ``from_seq`` on.
    ``lost``: the frames of the session the sender counted lost so far (the
    sender's own count of what it could not replay is this, confirmed)."""

    session_id: int
    from_seq: int
    lost: int = 0


@dataclass(frozen=True, slots=True)
class Sealed:
    """A batch of whole frames authenticated with the link's key (cluster_bus.seal)."""

    seq: int  # the link's batch counter in this direction, from 1
    tag: bytes  # 16 bytes: MAC(seq | batch), cluster_bus.seal
    batch: bytes


@dataclass(frozen=True, slots=True)
class StatsRequest:
    """Ask a peer for its statistics (issue 51): ``request_id`` (the asker's,
    echoed in the reply) and the query, bytes the nodes define and the bus
    carries as they are (:mod:`cluster_bus.stats_query`)."""

    request_id: int
    query: bytes


@dataclass(frozen=True, slots=True)
class StatsReply:
    """A peer's answer to a :class:`StatsRequest`: the request's id and the
    answer's bytes (at most :data:`cluster_bus.stats_query.REPLY_BYTES`)."""

    request_id: int
    body: bytes


Message = (
    Hello
    | HelloAuth
    | Meet
    | Ping
    | Pong
    | FilterRequest
    | FilterFull
    | FilterDelta
    | Publish
    | Fail
    | Leave
    | Ack
    | Session
    | Resend
    | ProbeReq
    | ProbeAck
    | Sealed
    | StatsRequest
    | StatsReply
)


#: the frame type of each message class
MSG_TYPE: dict[type, MsgType] = {
    Hello: MsgType.HELLO,
    HelloAuth: MsgType.HELLO_AUTH,
    Meet: MsgType.MEET,
    Ping: MsgType.PING,
    Pong: MsgType.PONG,
    FilterRequest: MsgType.FILTER_REQUEST,
    FilterFull: MsgType.FILTER_FULL,
    FilterDelta: MsgType.FILTER_DELTA,
    Publish: MsgType.PUBLISH,
    Fail: MsgType.FAIL,
    Leave: MsgType.LEAVE,
    Ack: MsgType.ACK,
    Session: MsgType.SESSION,
    Resend: MsgType.RESEND,
    ProbeReq: MsgType.PROBE_REQ,
    ProbeAck: MsgType.PROBE_ACK,
    Sealed: MsgType.SEALED,
    StatsRequest: MsgType.STATS_REQUEST,
    StatsReply: MsgType.STATS_REPLY,
}
