"""The seam between the node (``router/``) and the cluster bus (``cluster_bus/``).

Everything the two sides say to each other is here, and nothing else crosses:

- the node calls a :class:`ClusterLink` on every client PUBLISH
  (:meth:`ClusterLink.forward_publish`) and after every change of its own
  filters (:meth:`ClusterLink.filters_changed`, with :class:`FilterChange`
  values that carry everything the bus announces, so the bus never asks back);
- the bus calls the node's :class:`LocalDelivery` when a forwarded PUBLISH
  arrives (:meth:`LocalDelivery.deliver_forwarded`) and when a peer asks for a
  whole filter (:meth:`LocalDelivery.filter_snapshot`);
- :class:`BusConfig` is what the bus reads of the node's settings (the node's
  own config builds it; the bus never imports ``router``).

A node without a bus runs with :class:`NoPeers`, so every PUBLISH goes through
the same routing step whether or not there are peers. Dependencies point one
way: ``router`` -> ``cluster_bus`` -> ``bloom`` (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from bloom import CountingBloomFilter, PatternFilter
from cluster_bus.slots import CLUSTER_SLOTS

if TYPE_CHECKING:
    from cluster_bus.frames import Publish
    from cluster_bus.nodes_file import NodesFile as NodesFile  # (a type for router.node)

FilterName = Literal["channels", "patterns"]
FILTER_NAMES: tuple[FilterName, ...] = ("channels", "patterns")


class FilterChange:
    """Bits of a local filter's exported bit vector that flipped in one operation.

    ``set_positions`` went 0 -> 1, ``cleared_positions`` went 1 -> 0; positions
    are reduced mod ``m``, the filter's size in bits after the change (a new m
    means the node rebuilt the filter: the bus then announces it whole).
    ``fingerprint`` is the filter's CRC64 after the change (the base the next
    delta applies to): given as an int, or as the filter's own fingerprint
    function, read only when the change is announced (issue 48: a CRC64 of the
    whole filter per SUBSCRIBE was 15% of its cost on a node without a bus;
    the bus announces a loop iteration's changes once, so it reads the last one's,
    which is then the filter's state after them all). ``prefix_mask`` /
    ``match_all`` are the pattern filter's prefix-length mask and match-all
    flag after it (0 / False for channels). Immutable by convention; a plain
    class with slots (a frozen dataclass's ``__init__`` cost 4 us a change).
    """

    __slots__ = (
        "_fingerprint",
        "cleared_positions",
        "filter",
        "m",
        "match_all",
        "prefix_mask",
        "set_positions",
    )

    def __init__(
        self,
        filter: FilterName,
        set_positions: tuple[int, ...],
        cleared_positions: tuple[int, ...],
        fingerprint: int | Callable[[], int],
        m: int,
        prefix_mask: int = 0,
        match_all: bool = False,
    ) -> None:
        self.filter = filter
        self.set_positions = set_positions
        self.cleared_positions = cleared_positions
        self._fingerprint = fingerprint
        self.m = m
        self.prefix_mask = prefix_mask
        self.match_all = match_all

    @property
    def fingerprint(self) -> int:
        """The CRC64 (a function given: its value now, cached by the filter)."""
        fp = self._fingerprint
        return fp if isinstance(fp, int) else fp()

    def _key(self) -> tuple[object, ...]:
        return (
            self.filter,
            self.set_positions,
            self.cleared_positions,
            self.fingerprint,
            self.m,
            self.prefix_mask,
            self.match_all,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FilterChange) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"FilterChange({self.filter!r}, set={self.set_positions}, "
            f"cleared={self.cleared_positions}, m={self.m}, prefix_mask={self.prefix_mask:#x}, "
            f"match_all={self.match_all})"
        )


def merge_changes(changes: list[FilterChange]) -> list[FilterChange]:
    """Fold a sequence of changes into at most one per filter: each position
    ends set or cleared as its last change left it, and fingerprint, m, mask
    and match-all are the last change's. (One loop iteration's changes become one
    delta round on the bus.) A change of m drops the positions of the older
    m: the whole filter is announced anyway."""
    if len(changes) <= 1:
        return changes
    merged: list[FilterChange] = []
    for name in FILTER_NAMES:
        last: dict[int, bool] = {}
        final: FilterChange | None = None
        for change in changes:
            if change.filter != name:
                continue
            if final is not None and final.m != change.m:
                last.clear()
            last.update(dict.fromkeys(change.set_positions, True))
            last.update(dict.fromkeys(change.cleared_positions, False))
            final = change
        if final is not None:
            merged.append(
                FilterChange(
                    name,
                    tuple(p for p, on in last.items() if on),
                    tuple(p for p, on in last.items() if not on),
                    final._fingerprint,
                    final.m,
                    final.prefix_mask,
                    final.match_all,
                )
            )
    return merged


@dataclass(frozen=True, slots=True)
class FilterSnapshot:
    """One local filter as exported bits: ``bits`` is m/8 bytes, big-endian bit
    order (bitarray's default); ``fingerprint`` is as in :class:`FilterChange`."""

    m: int
    k: int
    bits: bytes
    fingerprint: int
    prefix_mask: int = 0
    match_all: bool = False

    @classmethod
    def of_channels(cls, channels: CountingBloomFilter) -> FilterSnapshot:
        """The exported bits of a node's channel filter."""
        return cls(channels.m, channels.k, channels.exported.bits.tobytes(), channels.fingerprint())

    @classmethod
    def of_patterns(cls, patterns: PatternFilter) -> FilterSnapshot:
        """The exported bits of a node's pattern filter, with its prefix-length
        mask and match-all flag (both are in its fingerprint)."""
        bits = patterns.counting
        return cls(
            patterns.m,
            bits.k,
            bits.exported.bits.tobytes(),
            patterns.fingerprint(),
            patterns.prefix_lengths,
            patterns.match_all,
        )


@dataclass(frozen=True, slots=True)
class SlotRange:
    """Slots ``start``..``end`` (inclusive) shown as served by a node (CLUSTER
    SLOTS / SHARDS): its id and client addresses as announced (cluster_bus.slots):
    ``host`` ("" until the node knows its IP: a client uses the address it
    connected to), the plaintext ``port`` and ``tls_port`` (0: none), and its
    ``hostname`` ("": none)."""

    start: int
    end: int
    node_id: str
    host: str
    port: int
    tls_port: int = 0
    hostname: str = ""


@dataclass(frozen=True, slots=True)
class LinkInfo:
    """One bus link as CLUSTER LINKS shows it (Redis 7.0's fields): ``direction``
    ``to`` (we dialled) or ``from``, the peer's id, when the link was made (ms
    since the epoch), the events it waits for (``r``, ``rw`` while it has
    bytes to send) and its send buffer: allocated and used, in bytes."""

    direction: str
    node: str
    create_time: int
    events: str
    send_buffer_allocated: int
    send_buffer_used: int


class LocalDelivery(Protocol):
    """What the node offers the cluster bus."""

    node_id: str  # 40 lowercase hex characters, as a Redis Cluster node id

    def deliver_forwarded(
        self, origin: str, origin_seq: int, channel: bytes, message: bytes, shard: bool
    ) -> None:
        """A peer forwarded a PUBLISH that ``origin`` (its node id) received from
        a client as its ``origin_seq``-th PUBLISH: deliver it to local
        subscribers (shard channels when ``shard``), never forward it again.
        Counting false positives and recording the traffic event are the
        node's."""
        ...

    def deliver_forwarded_run(self, origin: str, msgs: list[Publish], count: int) -> None:
        """The first ``count`` frames of ``msgs`` (PUBLISH frames ``origin``
        forwarded, read in order on one link: the decoder's ``Publish``
        tuples), each as :meth:`deliver_forwarded` delivers it, in order: one
        call per read of them, not per frame. ``count`` <= len(msgs);
        IndexError otherwise, after the frames before it."""
        ...

    def filter_snapshot(self, name: FilterName) -> FilterSnapshot:
        """The whole filter, for FILTER_FULL (a peer asked, or the bus starts)."""
        ...

    def forwards_lost(self, origin: str, count: int, from_ms: int, to_ms: int) -> None:
        """``count`` PUBLISH frames forwarded to us by ``origin`` are lost for
        good (its replay buffer no longer held them when we asked); ``origin``
        received them from its clients between ``from_ms`` and ``to_ms`` (ms
        since the epoch, bounds the sender gave): tell the clients
        (cluster_bus.session)."""
        ...


class ClusterLink(Protocol):
    """What the cluster bus offers the node."""

    def forward_publish(self, channel: bytes, message: bytes, shard: bool, origin_seq: int) -> int:
        """Send a client's PUBLISH to every peer whose filters may match; return
        how many peers it was sent to. Never blocks; never re-forwards.

        ``origin_seq`` is the node's own PUBLISH counter; it travels with the
        forward so receivers' traffic events carry the same event id
        ``"<origin node id>-<origin_seq>"`` as the origin's."""
        ...

    def forwarder(self) -> Callable[[bytes, bytes, bool, int], int]:
        """:meth:`forward_publish` itself, or the callable it hands each call
        to: what the node's PUBLISH path looks up once, when it is given the link, and
        calls for every PUBLISH, with no call of the link in between."""
        ...

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        """Announce local filter changes (a delta to every peer, or the whole
        filter when its m changed): every change of a loop iteration in one
        announcement at its end (one FILTER_DELTA per filter and peer).
        Returns a future the node awaits before sending the (P)SUBSCRIBE
        confirmation when subscribe visibility is on (the iteration's
        announcement's: every call of the iteration gets the same one), else
        None."""
        ...

    def info_fields(self) -> dict[str, int | str]:
        """CLUSTER INFO fields, Redis's names where the concept is the same."""
        ...

    def nodes_lines(self, tls: bool = False) -> list[str]:
        """CLUSTER NODES lines in Redis's format, this node first (``tls``: for a
        client on the TLS port, which is told TLS ports)."""
        ...

    def topology_version(self) -> int:
        """A counter that changes whenever a node is learned or forgotten or our
        link to one goes up or down: a watcher rebuilds :meth:`nodes_lines`
        only when it moved (building them is O(N) per call)."""
        ...

    def slot_map(self) -> list[SlotRange]:
        """The hash slots over the live nodes, in slot order (cluster_bus.slots)."""
        ...

    def peer_count(self) -> int:
        """Other nodes known (what a broadcast would send each PUBLISH to)."""
        ...

    def forget_node(self, node_id: str) -> str | None:
        """CLUSTER FORGET: drop ``node_id`` from membership and routing, close its
        links, ignore it for 60 s (Redis's ban). None, or Redis's error text."""
        ...

    def meet(self, host: str, bus_port: int, client_port: int = 0) -> None:
        """CLUSTER MEET: dial that bus address as a ``--join`` seed (its client
        port shows in CLUSTER NODES while it is in its handshake)."""
        ...

    def links(self) -> list[LinkInfo]:
        """CLUSTER LINKS: every authenticated link to and from a peer."""
        ...

    def stats_query(self, query: bytes) -> asyncio.Future[list[bytes]]:
        """Every live peer's answer to ``query`` (issue 51,
        :mod:`cluster_bus.stats_query`): those that came within a second."""
        ...

    def serve_stats(self, source: Callable[[bytes], bytes]) -> None:
        """What answers a peer's statistics query from now on."""
        ...


#: the automatic caps on accepted bus links in their handshake at once, in
#: all and per source address (cluster_bus.bus.ClusterBus.handshake_caps)
HANDSHAKES_FLOOR = 128
HANDSHAKES_PER_IP_FLOOR = 16


@dataclass(frozen=True, slots=True)
class BusConfig:
    """The cluster bus's settings. Times in ms, sizes in bytes.

    ``port`` is the bus port (0: any free port); ``client_port`` and
    ``tls_port`` are announced to peers (CLUSTER NODES / SLOTS / SHARDS show
    them), each replaced by its ``announce_*`` setting when given, as Redis's
    ``cluster-announce-*``; ``bind`` holds Redis's bind words.
    ``join`` holds seed bus addresses ``host:port``. ``max_body`` bounds a frame body once a link is
    authenticated (two bulk strings of ``proto-max-bulk-len`` plus slack).
    ``ping_interval_ms``: the protocol period (one SWIM probe each, see
    :mod:`cluster_bus.membership`); None: node_timeout_ms / 10 within [20, 1000].
    ``replay_bytes`` / ``replay_ms`` bound each peer's replay buffer of
    forwarded PUBLISH frames (:mod:`cluster_bus.session`).
    """

    bind: str = "127.0.0.1"  # Redis's bind words, space separated (netutil.addresses)
    port: int = 16379
    client_port: int = 6379
    tls_port: int = 0  # the node's client TLS port (0: none), told to peers
    #: redis.conf cluster-announce-ip / -port / -tls-port / -bus-port / -hostname:
    #: what peers and cluster clients are told instead (netutil.addresses)
    announce_ip: str | None = None
    announce_port: int | None = None
    announce_tls_port: int | None = None
    announce_bus_port: int | None = None
    announce_hostname: str | None = None
    join: tuple[str, ...] = field(default_factory=tuple)
    cluster_secret: str | None = None
    #: redis.conf tls-cluster and the certificates it uses (netutil.tls)
    tls_cluster: bool = False
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_ca_cert_file: str | None = None
    node_timeout_ms: int = 15000  # redis.conf cluster-node-timeout
    sendbuf_limit: int = 0  # cluster-link-sendbuf-limit; 0 = no limit, as Redis
    #: cluster-forward-linger-us: the least time between a link's writes of
    #: forwarded PUBLISH frames that they wait for (Link.write with
    #: forward=True); 0 = the next loop iteration
    forward_linger_us: int = 0
    max_body: int = 2 * 512 * 1024 * 1024 + 64 * 1024
    visibility_timeout_ms: int = 0  # subscribe visibility; 0 = off
    #: replay buffer per peer: >= 5 s at 10k forwards/s of 1 KiB by default
    replay_bytes: int = 64 * 1024 * 1024
    replay_ms: int = 10_000
    ping_interval_ms: int | None = None
    #: forget a node in FAIL this long (0: never); None: 5 x node_timeout_ms, and
    #: at least replay_ms (forgetting a peer drops what we hold for its replay)
    fail_forget_ms: int | None = None
    #: accepted links in their handshake at once, in all and per source
    #: address; 0: automatic (cluster_bus.bus.ClusterBus.handshake_caps)
    max_handshakes: int = 0
    max_handshakes_per_ip: int = 0

    @property
    def fail_forget_after_ms(self) -> int:
        if self.fail_forget_ms is not None:
            return self.fail_forget_ms
        return max(5 * self.node_timeout_ms, self.replay_ms)

    @property
    def heartbeat_ms(self) -> int:
        if self.ping_interval_ms:
            return self.ping_interval_ms
        return max(20, min(1000, self.node_timeout_ms // 10))


class NoPeers:
    """The ClusterLink of a node with no cluster bus: nothing to forward to."""

    def __init__(self, node_id: str, host: str, port: int) -> None:
        self._node_id = node_id
        self._host = host
        self._port = port

    def forward_publish(self, channel: bytes, message: bytes, shard: bool, origin_seq: int) -> int:
        return 0

    def forwarder(self) -> Callable[[bytes, bytes, bool, int], int]:
        return self.forward_publish

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        return None

    def info_fields(self) -> dict[str, int | str]:
        return {
            "cluster_state": "ok",
            "cluster_slots_assigned": CLUSTER_SLOTS,
            "cluster_slots_ok": CLUSTER_SLOTS,
            "cluster_slots_pfail": 0,
            "cluster_slots_fail": 0,
            "cluster_known_nodes": 1,
            "cluster_size": 1,
            "cluster_current_epoch": 0,
            "cluster_my_epoch": 0,
            "cluster_stats_messages_sent": 0,
            "cluster_stats_messages_received": 0,
        }

    def nodes_lines(self, tls: bool = False) -> list[str]:
        return [
            f"{self._node_id} {self._host}:{self._port}@{self._port + 10000} "
            f"myself,master - 0 0 0 connected 0-{CLUSTER_SLOTS - 1}"
        ]

    def topology_version(self) -> int:
        return 0

    def slot_map(self) -> list[SlotRange]:
        return [SlotRange(0, CLUSTER_SLOTS - 1, self._node_id, self._host, self._port)]

    def peer_count(self) -> int:
        return 0

    def forget_node(self, node_id: str) -> str | None:
        if node_id == self._node_id:
            return "I tried hard but I can't forget myself..."
        return f"Unknown node {node_id}"

    def meet(self, host: str, bus_port: int, client_port: int = 0) -> None:
        return None

    def links(self) -> list[LinkInfo]:
        return []

    def stats_query(self, query: bytes) -> asyncio.Future[list[bytes]]:
        done: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()
        done.set_result([])  # no peer to ask
        return done

    def serve_stats(self, source: Callable[[bytes], bytes]) -> None:
        return None
