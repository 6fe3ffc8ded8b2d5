"""ClusterBus: the node-to-node bus (asyncio), the node's :class:`ClusterLink`.

One TCP listener on the bus port and, for every known peer, one outbound
connection this node dials and keeps (Redis Cluster's model: two links per
pair). Every frame to a peer goes on our outbound link to it when that link is
up (so filter deltas, heartbeats and PUBLISH forwards to one peer stay in one
ordered stream), else on the peer's inbound link.

Link life (each link is an ``asyncio.Protocol``; the codec is sans-IO):
1. Handshake: the dialer sends HELLO(id, nonce_a); the acceptor answers
   HELLO(reply, id, nonce_b, mac_b); the dialer sends HELLO_AUTH(mac_a). With
   ``--cluster-secret`` S, mac_b = HMAC-SHA256(S, b"acceptor" | nonce_a |
   nonce_b | id_a | id_b) and mac_a the same with b"initiator"; each side
   checks the other's (RFC 2104 HMAC, compared in constant time). Until the
   handshake is done no other frame is accepted, so a node without the secret
   can neither join nor inject frames; after it the header's sender id must be
   the peer's.
2. MEET (dialer) / PONG: addresses, filter fingerprints, gossip.
3. PING every ``ping_interval`` to every peer with no PING outstanding; PING
   outstanding > node_timeout_ms -> PFAIL; majority of reports -> FAIL
   (:mod:`cluster_bus.membership`). Outbound links that cannot connect are
   redialled with exponential backoff and full jitter (AWS architecture blog
   "Exponential Backoff And Jitter": delay = rand(0.5, 1) * min(cap, base*2^n)).
4. Filters: a heartbeat fingerprint that differs from the copy we hold, or a
   peer whose filter we do not hold, triggers FILTER_REQUEST; until a verified
   copy arrives the peer gets every PUBLISH (fail open). Local changes go out
   as FILTER_DELTA at once (:meth:`filters_changed`).
5. PUBLISH forwarding by :class:`cluster_bus.routing.PeerTable`; received
   PUBLISH frames are delivered locally and never forwarded again.

Any malformed frame closes that link and is counted; the node keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import sha256
from typing import Protocol, TypeVar, cast

from cluster_bus.codec import (
    MAGIC,
    PUBLISH_HEAD,
    VERSION,
    BusProtocolError,
    FrameDecoder,
    encode,
    short_id,
)
from cluster_bus.frames import (
    FLAG_SHARD,
    Ack,
    Fail,
    FilterDelta,
    FilterFull,
    FilterKind,
    FilterRequest,
    Heartbeat,
    Hello,
    HelloAuth,
    Leave,
    Meet,
    Message,
    MsgType,
    NodeFlags,
    Ping,
    Pong,
    Publish,
)
from cluster_bus.membership import Membership
from cluster_bus.routing import PeerTable
from router.cluster_link import FilterChange, LocalDelivery
from router.config import NodeConfig
from spark.events import TrafficEvent, channel_text

_HB = TypeVar("_HB", Meet, Ping, Pong)

log = logging.getLogger("bloomcast.bus")

GOSSIP_ENTRIES = 8
HANDSHAKE_MAX_BODY = 4096
BACKOFF_BASE_MS = 100
FILTER_REQUEST_RETRY_MS = 1000
#: FP-driven resize: checked every this many received PUBLISH frames
FP_CHECK_EVERY = 256
T_PUBLISH = int(MsgType.PUBLISH)
_KIND_OF = {"channels": FilterKind.CHANNELS, "patterns": FilterKind.PATTERNS}


@dataclass(frozen=True, slots=True)
class FilterSnapshot:
    """One local filter as exported bits (big-endian bit order, m/8 bytes)."""

    m: int
    k: int
    bits: bytes
    fingerprint: int
    prefix_mask: int = 0
    match_all: bool = False


class LocalFilters(Protocol):
    """What the bus reads of the node's own filters."""

    def snapshot(self, kind: FilterKind) -> FilterSnapshot: ...

    def summary(self, kind: FilterKind) -> tuple[int, int, int, bool]:
        """(m, fingerprint, prefix_mask, match_all), cheaply."""
        ...

    def resize(self) -> bool:
        """Rebuild the channel filter from the exact subscriptions at twice its m
        (bounded); True when it changed."""
        ...

    def estimated_fp_rate(self) -> float: ...


def now_ms() -> int:
    return int(time.time() * 1000)


class _Wait:
    """A subscribe-visibility wait: the (peer, delta id) pairs not yet acked."""

    __slots__ = ("future", "handle", "pending")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future
        self.pending: set[tuple[str, int]] = set()
        self.handle: asyncio.TimerHandle | None = None


class Link(asyncio.Protocol):
    """One TCP connection of the bus, either direction."""

    def __init__(self, bus: ClusterBus, outbound: bool, dial_key: tuple[str, int] | None) -> None:
        self.bus = bus
        self.outbound = outbound
        self.dial_key = dial_key
        self.transport: asyncio.Transport | None = None
        self.peer_id: str | None = None
        self.peer_host = ""
        self.authenticated = False
        self.closed = False
        # until the handshake is done only small frames: an unauthenticated
        # peer cannot make us buffer a large body
        self.decoder = FrameDecoder(HANDSHAKE_MAX_BODY)
        self.nonce = os.urandom(16)
        self.peer_nonce = b""
        self.send_seq = 0
        self.recv_seq: int | None = None
        self.created_ms = now_ms()
        self.last_rx_ms = self.created_ms
        self._pending: list[bytes] | None = None
        self._pending_bytes = 0  # counted only with a send-buffer limit

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer_host = peer[0]
        self.bus._link_made(self)

    def data_received(self, data: bytes) -> None:
        self.last_rx_ms = now_ms()
        try:
            msgs = self.decoder.feed(data)
        except BusProtocolError as exc:
            self.bus._bad_frame(self, str(exc))
            return
        bus = self.bus
        for msg in msgs:
            if self.closed:
                return
            if self.authenticated and type(msg) is Publish:
                bus._on_publish(self, msg)
            else:
                bus._on_message(self, msg)

    def write(self, data: bytes) -> None:
        """Queue a frame. Frames queued while one loop callback runs (e.g. the
        forwards of a pipelined batch of PUBLISH) leave in one ``transport.write``
        at the next loop turn: one send syscall for the batch, order kept."""
        pending = self._pending
        if pending is None:
            if self.closed or self.transport is None:
                return
            self._pending = [data]
            self.bus._loop_call_soon(self.flush)
        else:
            pending.append(data)
        limit = self.bus.sendbuf_limit
        if limit:
            self._pending_bytes += len(data)
            if self._pending_bytes + self.transport.get_write_buffer_size() > limit:  # type: ignore[union-attr]
                self.flush()  # writes and applies the limit now

    def flush(self) -> None:
        pending = self._pending
        self._pending = None
        self._pending_bytes = 0
        transport = self.transport
        if not pending or transport is None or self.closed:
            return
        transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
        limit = self.bus.sendbuf_limit
        if limit and transport.get_write_buffer_size() > limit:
            self.bus._buffer_exceeded(self)

    def close(self, abort: bool = False) -> None:
        if self.closed:
            return
        if not abort:
            self.flush()
        self.closed = True
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()
        self.bus._link_closed(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self.bus._link_closed(self)


class ClusterBus:
    """The cluster bus of one node. Implements router.cluster_link.ClusterLink.

    ``node`` delivers forwarded PUBLISH frames; ``filters`` exposes the node's
    own filters. Start with :meth:`start`, stop with :meth:`stop`.
    """

    def __init__(
        self,
        node: LocalDelivery,
        config: NodeConfig,
        filters: LocalFilters,
        *,
        client_port: int | None = None,
        ping_interval_ms: int | None = None,
    ) -> None:
        self.node = node
        self.config = config
        self.filters = filters
        self.node_id = node.node_id
        self._short = short_id(node.node_id)
        self.client_port = client_port if client_port is not None else config.port
        self.port = config.bus_port  # the actual port after start() when 0
        self.sendbuf_limit = config.cluster_link_sendbuf_limit
        self.max_body = 2 * config.proto_max_bulk_len + 64 * 1024
        self.node_timeout_ms = config.node_timeout_ms
        self.ping_interval_ms = ping_interval_ms or max(20, min(1000, config.node_timeout_ms // 10))
        self.visibility_timeout_ms = config.subscribe_visibility_timeout_ms
        self._secret = config.cluster_secret.encode() if config.cluster_secret else None
        bind = config.bind
        self.advertised_host = "" if bind in ("0.0.0.0", "::", "") else bind
        self.membership = Membership(
            self.node_id,
            self.advertised_host or "127.0.0.1",
            self.client_port,
            self.port,
            config.node_timeout_ms,
        )
        self.routing = PeerTable()
        self._out: dict[str, Link] = {}
        self._in: dict[str, Link] = {}
        self._links: set[Link] = set()
        self._dialing: set[tuple[str, int]] = set()
        self._backoff: dict[tuple[str, int], tuple[int, int]] = {}  # key -> (attempt, next ms)
        self._seeds: set[tuple[str, int]] = set()
        self._filter_requested: dict[tuple[str, FilterKind], int] = {}
        self._epoch = 0
        self._announced_fp: dict[FilterKind, int] = {}
        self._announced_m: dict[FilterKind, int] = {}
        self._next_delta_id = 1
        self._waits: dict[int, _Wait] = {}
        self._server: asyncio.Server | None = None
        self._cron: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rng = random.Random()
        self._stopping = False
        self._self_addrs: set[tuple[str, int]] = set()
        # counters (INFO)
        self.sent: dict[MsgType, int] = dict.fromkeys(MsgType, 0)
        self.received: dict[MsgType, int] = dict.fromkeys(MsgType, 0)
        self.publish_suppressed = 0
        self.publish_dropped_no_link = 0
        self.false_positives = 0
        self.sequence_gaps = 0
        self.bad_frames = 0
        self.auth_failures = 0
        self.buffer_limit_exceeded = 0
        self.links_dropped = 0
        self.filter_resizes = 0
        self.filter_verify_failures = 0
        self.visibility_waits = 0
        self.visibility_timeouts = 0
        self._fp_window_received = 0
        self._fp_window_false = 0

    def _loop_call_soon(self, callback: Callable[[], None]) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        loop.call_soon(callback)

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        """Listen on the bus port (0 = any free port, see ``port``) and dial the seeds."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._server = await loop.create_server(
            lambda: Link(self, False, None), self.config.bind, self.config.bus_port
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self.membership.myself.bus_port = self.port
        for kind in FilterKind:
            m, fp, _, _ = self.filters.summary(kind)
            self._announced_fp[kind] = fp
            self._announced_m[kind] = m
        for seed in self.config.join:
            host, _, port = seed.rpartition(":")
            key = (host or "127.0.0.1", int(port))
            self._seeds.add(key)
        self._tick()

    async def stop(self) -> None:
        """Send LEAVE to every peer, close every link and the listener."""
        self._stopping = True
        if self._cron is not None:
            self._cron.cancel()
        for link in list(self._links):
            if link.authenticated:
                self._send(link, Leave())
        for wait in list(self._waits.values()):
            if not wait.future.done():
                wait.future.set_result(None)
        self._waits.clear()
        await asyncio.sleep(0)  # let the transports flush the LEAVE frames
        for link in list(self._links):
            link.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    # -- ClusterLink ---------------------------------------------------------------

    def forward_publish(self, channel: bytes, message: bytes, shard: bool, origin_seq: int) -> int:
        peers = self.routing.peer_count
        if not peers:  # a lone node: nothing to route to
            return 0
        mask = self.routing.route(channel, shard)
        if not mask:
            self.publish_suppressed += peers
            return 0
        sent = 0
        out = self._out
        tail = channel + message
        pack = PUBLISH_HEAD.pack
        flags = FLAG_SHARD if shard else 0
        length = 16 + len(tail)
        short = self._short
        clen = len(channel)
        nodes = self.routing.nodes_of(mask)
        for node_id in nodes:
            link = out.get(node_id)
            if link is None or not link.authenticated:
                link = self._in.get(node_id)
                if link is None or not link.authenticated:
                    self.publish_dropped_no_link += 1
                    continue
            link.send_seq = seq = (link.send_seq + 1) & 0xFFFFFFFF
            link.write(
                pack(MAGIC, VERSION, T_PUBLISH, flags, length, short, seq, origin_seq, clen) + tail
            )
            sent += 1
        self.sent[MsgType.PUBLISH] += sent
        self.publish_suppressed += peers - len(nodes)
        return sent

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        if not changes:
            return None
        self._epoch += 1
        wait: _Wait | None = None
        if self.visibility_timeout_ms > 0 and self._loop is not None:
            wait = _Wait(self._loop.create_future())
        live = self._live_links()
        for change in changes:
            kind = _KIND_OF[change.filter]
            m, _fp, mask, match_all = self.filters.summary(kind)
            if m != self._announced_m.get(kind):
                # the node resized this filter: positions are of the new m; send it whole
                self._announce_full(kind)
                continue
            delta_id = self._next_delta_id
            self._next_delta_id = (delta_id + 1) & 0xFFFFFFFF or 1
            msg = FilterDelta(
                kind,
                delta_id,
                m,
                self._announced_fp.get(kind, 0),
                change.fingerprint,
                change.set_positions,
                change.cleared_positions,
                self._epoch,
                mask,
                match_all,
            )
            self._announced_fp[kind] = change.fingerprint
            frame = encode(msg, self._short)
            for peer_id, link in live:
                link.write(frame)
                self.sent[MsgType.FILTER_DELTA] += 1
                if wait is not None:
                    wait.pending.add((peer_id, delta_id))
                    self._waits[delta_id] = wait
        if wait is None:
            return None
        self.visibility_waits += 1
        if not wait.pending:
            wait.future.set_result(None)
            return wait.future
        assert self._loop is not None
        wait.handle = self._loop.call_later(
            self.visibility_timeout_ms / 1000, self._visibility_timeout, wait
        )
        return wait.future

    def peer_count(self) -> int:
        return len(self.membership.peers)

    def info_fields(self) -> dict[str, int | str]:
        ms = self.membership
        sent_total = sum(self.sent.values())
        recv_total = sum(self.received.values())
        fields: dict[str, int | str] = {
            "cluster_state": ms.cluster_state(),
            "cluster_slots_assigned": 0,
            "cluster_slots_ok": 0,
            "cluster_slots_pfail": 0,
            "cluster_slots_fail": 0,
            "cluster_known_nodes": 1 + len(ms.peers),
            "cluster_size": 0,
            "cluster_current_epoch": self._epoch,
            "cluster_my_epoch": self._epoch,
        }
        for mtype, name in _REDIS_MSG_NAMES.items():
            fields[f"cluster_stats_messages_{name}_sent"] = self.sent[mtype]
        fields["cluster_stats_messages_sent"] = sent_total
        for mtype, name in _REDIS_MSG_NAMES.items():
            fields[f"cluster_stats_messages_{name}_received"] = self.received[mtype]
        fields["cluster_stats_messages_received"] = recv_total
        fields["total_cluster_links_buffer_limit_exceeded"] = self.buffer_limit_exceeded
        known, converged = self._filter_sync_state()
        fields.update(
            {
                "cluster_bus_port": self.port,
                "cluster_links_connected": sum(1 for lk in self._links if lk.authenticated),
                "cluster_nodes_pfail": ms.count(NodeFlags.PFAIL),
                "cluster_nodes_fail": ms.count(NodeFlags.FAIL),
                "cluster_peer_filters_known": known,
                "cluster_filters_converged": int(converged),
                "cluster_filter_epoch": self._epoch,
                "cluster_stats_publish_suppressed": self.publish_suppressed,
                "cluster_stats_publish_dropped_no_link": self.publish_dropped_no_link,
                "cluster_stats_false_positives_received": self.false_positives,
                "cluster_stats_filter_deltas_sent": self.sent[MsgType.FILTER_DELTA],
                "cluster_stats_filter_deltas_received": self.received[MsgType.FILTER_DELTA],
                "cluster_stats_filter_requests_sent": self.sent[MsgType.FILTER_REQUEST],
                "cluster_stats_filter_requests_received": self.received[MsgType.FILTER_REQUEST],
                "cluster_stats_filter_syncs_sent": self.sent[MsgType.FILTER_FULL],
                "cluster_stats_filter_syncs_received": self.received[MsgType.FILTER_FULL],
                "cluster_stats_filter_verify_failures": self.filter_verify_failures,
                "cluster_stats_filter_resizes": self.filter_resizes,
                "cluster_stats_sequence_gaps": self.sequence_gaps,
                "cluster_stats_bad_frames": self.bad_frames,
                "cluster_stats_auth_failures": self.auth_failures,
                "cluster_stats_links_dropped": self.links_dropped,
                "cluster_subscribe_visibility_waits": self.visibility_waits,
                "cluster_subscribe_visibility_timeouts": self.visibility_timeouts,
            }
        )
        return fields

    def nodes_lines(self) -> list[str]:
        """CLUSTER NODES: ``<id> <ip:port@cport> <flags> <master> <ping-sent>
        <pong-recv> <config-epoch> <link-state>`` (no slots), this node first."""
        me = self.membership.myself
        host = me.host
        lines = [
            f"{me.node_id} {host}:{self.client_port}@{self.port} myself,master - 0 0 "
            f"{self._epoch} connected"
        ]
        for rec in sorted(self.membership.peers.values(), key=lambda r: r.node_id):
            link = self._out.get(rec.node_id)
            state = "connected" if link is not None and link.authenticated else "disconnected"
            lines.append(
                f"{rec.node_id} {rec.host}:{rec.client_port}@{rec.bus_port} "
                f"{rec.flag_names()} - {rec.ping_sent_ms} {rec.pong_received_ms} 0 {state}"
            )
        return lines

    # -- filter sync state ---------------------------------------------------------

    def _filter_sync_state(self) -> tuple[int, bool]:
        """(peers whose both filters we hold verified, every live peer synced and linked)."""
        known = 0
        converged = True
        for rec in self.membership.peers.values():
            ok = self.routing.holds_filters(rec.node_id)
            known += ok
            if rec.flags & NodeFlags.FAIL:
                continue
            link = self._out.get(rec.node_id)
            if not ok or link is None or not link.authenticated:
                converged = False
        return known, converged

    # -- sending -------------------------------------------------------------------

    def _send(self, link: Link, msg: Message) -> None:
        link.write(encode(msg, self._short))
        self.sent[_TYPE_OF[type(msg)]] += 1

    def _link_to(self, node_id: str) -> Link | None:
        link = self._out.get(node_id)
        if link is not None and link.authenticated:
            return link
        link = self._in.get(node_id)
        if link is not None and link.authenticated:
            return link
        return None

    def _send_to(self, node_id: str, msg: Message, fallback: Link | None = None) -> None:
        link = self._link_to(node_id) or fallback
        if link is not None and not link.closed:
            self._send(link, msg)

    def _live_links(self) -> list[tuple[str, Link]]:
        live = []
        for node_id, rec in self.membership.peers.items():
            if rec.flags & NodeFlags.FAIL:
                continue
            link = self._link_to(node_id)
            if link is not None:
                live.append((node_id, link))
        return live

    def _heartbeat(self, cls: type[_HB], to: str | None) -> _HB:
        # fingerprints as announced (a change not yet announced must not look
        # like a missed delta to the peer)
        cfp = self._announced_fp[FilterKind.CHANNELS]
        pfp = self._announced_fp[FilterKind.PATTERNS]
        _, _, pmask, match_all = self.filters.summary(FilterKind.PATTERNS)
        return cls(
            self.node_id,
            self.advertised_host,
            self.client_port,
            self.port,
            cfp,
            pfp,
            self._epoch,
            pmask,
            match_all,
            0,
            self.membership.gossip_sample(to or "", GOSSIP_ENTRIES),
        )

    # -- links ---------------------------------------------------------------------

    def _link_made(self, link: Link) -> None:
        if self._stopping:
            link.close()
            return
        self._links.add(link)
        if link.outbound:
            self._send(link, Hello(self.node_id, link.nonce))

    def _link_closed(self, link: Link) -> None:
        self._links.discard(link)
        peer = link.peer_id
        if peer is None:
            return
        if self._out.get(peer) is link:
            del self._out[peer]
        if self._in.get(peer) is link:
            del self._in[peer]
        rec = self.membership.peers.get(peer)
        if rec is not None:
            rec.connected = self._link_to(peer) is not None
        if self._link_to(peer) is None:
            self._peer_unreachable(peer)

    def _peer_unreachable(self, peer: str) -> None:
        """No live link to ``peer``: stop waiting for its acks."""
        for wait in list(self._waits.values()):
            for item in [p for p in wait.pending if p[0] == peer]:
                wait.pending.discard(item)
            self._maybe_done(wait)

    def _bad_frame(self, link: Link, reason: str) -> None:
        self.bad_frames += 1
        log.warning("bus link %s: %s; closing it", link.peer_id or link.peer_host, reason)
        link.close(abort=True)

    def _auth_failed(self, link: Link, reason: str) -> None:
        self.auth_failures += 1
        log.warning("bus handshake with %s failed: %s", link.peer_host, reason)
        link.close(abort=True)

    def _buffer_exceeded(self, link: Link) -> None:
        self.buffer_limit_exceeded += 1
        self.links_dropped += 1
        log.warning("bus link to %s over its send buffer limit; dropped", link.peer_id)
        link.close(abort=True)

    def _mac(self, label: bytes, first: bytes, second: bytes, ids: bytes) -> bytes:
        if self._secret is None:
            return b""
        return hmac.new(self._secret, label + first + second + ids, sha256).digest()

    # -- dialling ------------------------------------------------------------------

    def _dial(self, key: tuple[str, int]) -> None:
        if key in self._dialing or self._stopping or self._loop is None:
            return
        self._dialing.add(key)
        self._loop.create_task(self._dial_task(key))

    async def _dial_task(self, key: tuple[str, int]) -> None:
        assert self._loop is not None
        host, port = key
        try:
            await asyncio.wait_for(
                self._loop.create_connection(lambda: Link(self, True, key), host, port),
                max(1.0, self.node_timeout_ms / 2000),
            )
        except (TimeoutError, OSError) as exc:
            attempt, _ = self._backoff.get(key, (0, 0))
            cap = min(2000, max(200, self.node_timeout_ms // 2))
            delay = min(cap, BACKOFF_BASE_MS * 2**attempt) * self._rng.uniform(0.5, 1.0)
            self._backoff[key] = (attempt + 1, now_ms() + int(delay))
            log.debug("dial %s:%d failed (%s); retry in %d ms", host, port, exc, delay)
        finally:
            self._dialing.discard(key)

    def _dial_due(self, key: tuple[str, int], now: int) -> bool:
        _, next_ms = self._backoff.get(key, (0, 0))
        if now < next_ms or key in self._dialing or key in self._self_addrs:
            return False
        # a link to it still in its handshake counts as dialling
        return not any(
            lk.dial_key == key and not lk.authenticated and not lk.closed for lk in self._links
        )

    # -- the periodic tick ---------------------------------------------------------

    def _tick(self) -> None:
        if self._stopping or self._loop is None:
            return
        try:
            self._cron_step(now_ms())
        except Exception:  # never let the timer die
            log.exception("bus cron step failed")
        self._cron = self._loop.call_later(self.ping_interval_ms / 1000, self._tick)

    def _cron_step(self, now: int) -> None:
        ms = self.membership
        half = self.node_timeout_ms // 2
        for node_id, rec in list(ms.peers.items()):
            link = self._out.get(node_id)
            if link is not None and link.authenticated:
                if rec.ping_sent_ms == 0:
                    self._send(link, self._heartbeat(Ping, node_id))
                    ms.ping_sent(node_id, now)
                elif (
                    now - rec.ping_sent_ms > half
                    and now - link.created_ms > half
                    and now - self._last_heard(node_id, link) > half
                ):
                    # no PONG and nothing at all from the peer for half the
                    # timeout: the link may be half-open; redial (as Redis does)
                    self.links_dropped += 1
                    link.close(abort=True)
            else:
                ms.ping_sent(node_id, now)  # unreachable counts as a PING outstanding
                if link is None and (rec.bus_port > 0):
                    key = (rec.host, rec.bus_port)
                    if self._dial_due(key, now):
                        self._dial(key)
        for key in list(self._seeds):
            if self._dial_due(key, now):
                self._dial(key)
        for failed in ms.check_timeouts(now):
            self._broadcast_fail(failed)
        for link in list(self._links):
            if not link.authenticated and now - link.created_ms > max(2000, half):
                self._auth_failed(link, "handshake timeout")

    def _last_heard(self, node_id: str, link: Link) -> int:
        """When any link of ``node_id`` last delivered bytes (ms)."""
        inbound = self._in.get(node_id)
        return max(link.last_rx_ms, inbound.last_rx_ms if inbound is not None else 0)

    def _broadcast_fail(self, node_id: str) -> None:
        log.warning("node %s marked failed", node_id)
        msg = Fail(node_id)
        for peer, link in self._live_links():
            if peer != node_id:
                self._send(link, msg)
        self._peer_unreachable(node_id)

    # -- receiving -----------------------------------------------------------------

    def _on_publish(self, link: Link, msg: Publish) -> None:
        self.received[MsgType.PUBLISH] += 1
        expected = link.recv_seq
        if expected is not None and msg.link_seq != expected:
            lost = (msg.link_seq - expected) & 0xFFFFFFFF
            self.sequence_gaps += lost
            log.warning("bus link from %s: %d forwarded PUBLISH lost", link.peer_id, lost)
        link.recv_seq = (msg.link_seq + 1) & 0xFFFFFFFF
        receivers = self.node.deliver(msg.channel, msg.payload, msg.shard)
        if receivers == 0:
            self.false_positives += 1
            self._fp_window_false += 1
        self._fp_window_received += 1
        if self._fp_window_received >= FP_CHECK_EVERY:
            self._check_false_positives()
        tap = self.node.tap
        if tap is not None:
            event_id = f"{link.peer_id}-{msg.origin_seq}"
            if not tap.keeps(event_id):
                return
            tap.record(
                TrafficEvent(
                    event_id,
                    time.time(),
                    self.node_id,
                    "receiver",
                    channel_text(msg.channel),
                    len(msg.payload),
                    receivers,
                    0,
                    len(self.membership.peers),
                    receivers == 0,
                    msg.shard,
                )
            )

    def _check_false_positives(self) -> None:
        """Resize the channel filter when forwards to us are mostly false positives
        beyond the target rate, or the filter's own estimate passes the target."""
        received, false = self._fp_window_received, self._fp_window_false
        self._fp_window_received = self._fp_window_false = 0
        target = self.config.filter_fp_rate
        measured = false / received if received else 0.0
        too_many = false >= 16 and measured > max(4 * target, 0.05)
        if (too_many or self.filters.estimated_fp_rate() > 2 * target) and self.filters.resize():
            self.filter_resizes += 1
            self._announce_full(FilterKind.CHANNELS)

    def _announce_full(self, kind: FilterKind) -> None:
        """Send the whole filter to every live peer (after a resize/rebuild)."""
        snap = self.filters.snapshot(kind)
        self._epoch += 1
        self._announced_fp[kind] = snap.fingerprint
        self._announced_m[kind] = snap.m
        msg = FilterFull(
            kind,
            snap.m,
            snap.k,
            snap.bits,
            snap.fingerprint,
            self._epoch,
            snap.prefix_mask,
            snap.match_all,
        )
        frame = encode(msg, self._short)
        for _, link in self._live_links():
            link.write(frame)
            self.sent[MsgType.FILTER_FULL] += 1

    def _on_message(self, link: Link, msg: Message) -> None:
        mtype = _TYPE_OF[type(msg)]
        self.received[mtype] += 1
        if not link.authenticated:
            self._on_handshake(link, msg)
            return
        peer = link.peer_id
        assert peer is not None
        if isinstance(msg, Heartbeat):
            self._on_heartbeat(link, peer, msg)
        elif isinstance(msg, FilterDelta):
            self._on_filter_delta(link, peer, msg)
        elif isinstance(msg, FilterFull):
            self._on_filter_full(peer, msg)
        elif isinstance(msg, FilterRequest):
            snap = self.filters.snapshot(msg.kind)
            self._send_to(
                peer,
                FilterFull(
                    msg.kind,
                    snap.m,
                    snap.k,
                    snap.bits,
                    snap.fingerprint,
                    self._epoch,
                    snap.prefix_mask,
                    snap.match_all,
                ),
                link,
            )
        elif isinstance(msg, Ack):
            wait = self._waits.get(msg.delta_id)
            if wait is not None:
                wait.pending.discard((peer, msg.delta_id))
                self._maybe_done(wait)
        elif isinstance(msg, Fail):
            if msg.node_id == self.node_id:
                return  # others think we failed; our PONGs will clear it
            if self.membership.fail_received(msg.node_id, now_ms()):
                log.warning("node %s marked failed (FAIL from %s)", msg.node_id, peer)
                self._peer_unreachable(msg.node_id)
        elif isinstance(msg, Leave):
            self._forget(peer)
        elif isinstance(msg, (Hello, HelloAuth)):
            self._bad_frame(link, "handshake frame on an established link")

    def _on_handshake(self, link: Link, msg: Message) -> None:
        if link.outbound:
            if not isinstance(msg, Hello) or not msg.reply or link.peer_id is not None:
                self._auth_failed(link, f"expected HELLO reply, got {type(msg).__name__}")
                return
            ids = bytes.fromhex(self.node_id) + bytes.fromhex(msg.node_id)
            expected = self._mac(b"acceptor", link.nonce, msg.nonce, ids)
            if self._secret is not None and not hmac.compare_digest(expected, msg.mac):
                self._auth_failed(link, "bad cluster secret (acceptor's HMAC)")
                return
            if msg.node_id == self.node_id:
                if link.dial_key is not None:
                    self._self_addrs.add(link.dial_key)
                    self._seeds.discard(link.dial_key)
                link.close()
                return
            link.peer_id = msg.node_id
            self._send(link, HelloAuth(self._mac(b"initiator", msg.nonce, link.nonce, ids)))
            self._authenticated(link)
        else:
            if link.peer_id is None:
                if not isinstance(msg, Hello) or msg.reply:
                    self._auth_failed(link, f"expected HELLO, got {type(msg).__name__}")
                    return
                link.peer_id = msg.node_id
                link.peer_nonce = msg.nonce
                ids = bytes.fromhex(msg.node_id) + bytes.fromhex(self.node_id)
                mac = self._mac(b"acceptor", msg.nonce, link.nonce, ids)
                self._send(link, Hello(self.node_id, link.nonce, mac, reply=True))
                return
            if not isinstance(msg, HelloAuth):
                self._auth_failed(link, f"expected HELLO_AUTH, got {type(msg).__name__}")
                return
            ids = bytes.fromhex(link.peer_id) + bytes.fromhex(self.node_id)
            expected = self._mac(b"initiator", link.nonce, link.peer_nonce, ids)
            if self._secret is not None and not hmac.compare_digest(expected, msg.mac):
                self._auth_failed(link, "bad cluster secret (initiator's HMAC)")
                return
            self._authenticated(link)

    def _authenticated(self, link: Link) -> None:
        peer = link.peer_id
        assert peer is not None
        link.authenticated = True
        link.decoder.expect_sender = short_id(peer)
        link.decoder.max_body = self.max_body
        if link.outbound:
            old = self._out.get(peer)
            if old is not None and old is not link and old.authenticated:
                link.close()
                return
            self._out[peer] = link
            if link.dial_key is not None:
                self._backoff.pop(link.dial_key, None)
                self._seeds.discard(link.dial_key)
            self._send(link, self._heartbeat(Meet, peer))
            self.membership.ping_sent(peer, now_ms())
        else:
            self._in[peer] = link
        rec = self.membership.peers.get(peer)
        if rec is not None:
            rec.connected = True

    def _on_heartbeat(self, link: Link, peer: str, hb: Heartbeat) -> None:
        if hb.node_id != peer:
            self._bad_frame(link, "heartbeat node id is not the link's peer")
            return
        now = now_ms()
        ms = self.membership
        host = hb.host or link.peer_host
        before = set(ms.peers)
        rec = ms.peers.get(peer)
        if rec is None:
            rec = ms.learn(peer, host, hb.client_port, hb.bus_port, now, direct=True)
            if rec is None:
                return
        else:
            rec.host, rec.client_port, rec.bus_port = host, hb.client_port, hb.bus_port
        rec.connected = True
        if isinstance(hb, Pong) and ms.pong_received(peer, now):
            log.warning("node %s is reachable again", peer)
        learned, failed = ms.gossip_received(peer, hb.gossip, now)
        for failed_id in failed:
            self._broadcast_fail(failed_id)
        if set(ms.peers) != before or learned:
            self._sync_routing()
        if isinstance(hb, (Ping, Meet)):
            self._send_to(peer, self._heartbeat(Pong, peer), link)
        self._check_fingerprint(peer, FilterKind.CHANNELS, hb.channel_fp, hb.filter_epoch, link)
        self._check_fingerprint(peer, FilterKind.PATTERNS, hb.pattern_fp, hb.filter_epoch, link)
        self.routing.set_pattern_meta(peer, hb.prefix_mask, hb.match_all, hb.filter_epoch)

    def _sync_routing(self) -> None:
        """Make the routing table's peers the membership's peers."""
        current = set(self.membership.peers)
        for node_id in self.routing.node_ids() - current:
            self.routing.remove_peer(node_id)
            for table in (self._out, self._in):
                link = table.get(node_id)
                if link is not None:
                    link.close()
        for node_id in current - self.routing.node_ids():
            self.routing.add_peer(node_id)

    def _check_fingerprint(
        self, peer: str, kind: FilterKind, fp: int, epoch: int, link: Link
    ) -> None:
        held = self.routing.fingerprint(peer, kind)
        if held == fp and held is not None:
            self._filter_requested.pop((peer, kind), None)
            return
        if held is not None and self.routing.epoch(peer, kind) > epoch:
            return  # an older heartbeat overtaken by a newer delta
        self.routing.mark_unknown(peer, kind)  # fail open until verified
        now = now_ms()
        last = self._filter_requested.get((peer, kind), 0)
        if now - last >= FILTER_REQUEST_RETRY_MS:
            self._filter_requested[(peer, kind)] = now
            self._send_to(peer, FilterRequest(kind), link)

    def _on_filter_full(self, peer: str, msg: FilterFull) -> None:
        if not self.routing.has_peer(peer):
            return
        if not self.routing.set_filter(
            peer,
            msg.kind,
            msg.m,
            msg.k,
            msg.bits,
            msg.fingerprint,
            msg.epoch,
            msg.prefix_mask,
            msg.match_all,
        ):
            self.filter_verify_failures += 1
        self._filter_requested.pop((peer, msg.kind), None)

    def _on_filter_delta(self, link: Link, peer: str, msg: FilterDelta) -> None:
        if self.routing.has_peer(peer) and not self.routing.apply_delta(
            peer,
            msg.kind,
            msg.m,
            msg.base_fp,
            msg.new_fp,
            msg.set_positions,
            msg.cleared_positions,
            msg.epoch,
            msg.prefix_mask,
            msg.match_all,
        ):
            # stale base or geometry change: we now send it everything until a
            # full copy is verified, so acking is still truthful
            self.routing.mark_unknown(peer, msg.kind)
            now = now_ms()
            if now - self._filter_requested.get((peer, msg.kind), 0) >= FILTER_REQUEST_RETRY_MS:
                self._filter_requested[(peer, msg.kind)] = now
                self._send_to(peer, FilterRequest(msg.kind), link)
        self._send_to(peer, Ack(msg.delta_id), link)

    def _forget(self, peer: str) -> None:
        log.info("node %s left the cluster", peer)
        self.membership.forget(peer, now_ms())
        self._sync_routing()
        self._peer_unreachable(peer)

    # -- subscribe visibility ------------------------------------------------------

    def _maybe_done(self, wait: _Wait) -> None:
        if wait.pending or wait.future.done():
            return
        wait.future.set_result(None)
        if wait.handle is not None:
            wait.handle.cancel()
        for delta_id in [d for d, w in self._waits.items() if w is wait]:
            del self._waits[delta_id]

    def _visibility_timeout(self, wait: _Wait) -> None:
        if wait.future.done():
            return
        self.visibility_timeouts += 1
        wait.pending.clear()
        self._maybe_done(wait)


_TYPE_OF: dict[type, MsgType] = {
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
}

#: Redis's per-type counter names (cluster_stats_messages_<name>_sent/received)
_REDIS_MSG_NAMES: dict[MsgType, str] = {
    MsgType.PING: "ping",
    MsgType.PONG: "pong",
    MsgType.MEET: "meet",
    MsgType.FAIL: "fail",
    MsgType.PUBLISH: "publish",
    MsgType.FILTER_REQUEST: "filter_request",
    MsgType.FILTER_FULL: "filter_full",
    MsgType.FILTER_DELTA: "filter_delta",
    MsgType.ACK: "ack",
    MsgType.LEAVE: "leave",
}
