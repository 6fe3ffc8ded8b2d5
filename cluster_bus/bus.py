"""ClusterBus: the node-to-node bus of one node (asyncio), the node's :class:`ClusterLink`.

This module is the orchestration; each job has its own file:
:mod:`~cluster_bus.link` (connections, dialling, backoff, send limits),
:mod:`~cluster_bus.handshake` (HELLO / HELLO_AUTH), :mod:`~cluster_bus.membership`
(PFAIL/FAIL, gossip), :mod:`~cluster_bus.filter_sync` (announced and held
filters, deltas, requests, visibility waits), :mod:`~cluster_bus.routing` (the
routing decision), :mod:`~cluster_bus.codec` (bytes), :mod:`~cluster_bus.info`
(CLUSTER INFO / NODES).

Links follow Redis Cluster's model: one TCP listener on the bus port and, for
every known peer, one outbound connection this node dials and keeps (two links
per pair). Every frame to a peer goes on our outbound link when it is up (so
filter deltas, heartbeats and PUBLISH forwards to one peer stay in one ordered
stream), else on the peer's inbound link.

The periodic tick (every ``heartbeat_ms``): PING every peer with no PING
outstanding; PING outstanding > node timeout -> PFAIL, a majority of reports
-> FAIL; redial links that are down; drop a link silent for half the node
timeout (half-open, as Redis does); refuse handshakes that take too long.

A received PUBLISH is handed to the node (:meth:`LocalDelivery.deliver_forwarded`)
and never forwarded again. Any malformed frame closes that link and is
counted; the node keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TypeVar

from cluster_bus.api import FILTER_NAMES, BusConfig, FilterChange, LocalDelivery
from cluster_bus.codec import encode, encode_publish, short_id
from cluster_bus.filter_sync import KIND_OF, NAME_OF, FilterSync, VisibilityWaits
from cluster_bus.frames import (
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
from cluster_bus.handshake import Handshake
from cluster_bus.info import BusStats, cluster_info, cluster_nodes, sync_state
from cluster_bus.link import Address, Dialer, Link, now_ms
from cluster_bus.membership import Membership
from cluster_bus.routing import PeerTable

_HB = TypeVar("_HB", Meet, Ping, Pong)

log = logging.getLogger("bloomcast.bus")

GOSSIP_ENTRIES = 8


class ClusterBus:
    """The cluster bus of one node. Start with :meth:`start`, stop with :meth:`stop`.

    ``node`` receives forwarded PUBLISH frames and gives filter snapshots;
    ``config`` is the bus's part of the node's settings.
    """

    def __init__(self, node: LocalDelivery, config: BusConfig) -> None:
        self.node = node
        self.config = config
        self.node_id = node.node_id
        self._short = short_id(node.node_id)
        self.client_port = config.client_port
        self.port = config.port  # the actual port after start() when 0
        self.sendbuf_limit = config.sendbuf_limit
        self.node_timeout_ms = config.node_timeout_ms
        self.ping_interval_ms = config.heartbeat_ms
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
        self.sync = FilterSync(self.routing)
        self.waits = VisibilityWaits()
        self._futures: dict[int, tuple[asyncio.Future[None], asyncio.TimerHandle | None]] = {}
        self.stats = BusStats()
        self._out: dict[str, Link] = {}
        self._in: dict[str, Link] = {}
        self._links: set[Link] = set()
        self.dialer = Dialer(self._links, lambda key: self._new_link(key), self.node_timeout_ms)
        self._seeds: set[Address] = set()
        self._server: asyncio.Server | None = None
        self._cron: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._handlers: dict[type, Callable[[Link, str, Message], None]] = {
            Meet: self._on_heartbeat,
            Ping: self._on_heartbeat,
            Pong: self._on_heartbeat,
            FilterDelta: self._on_filter_delta,
            FilterFull: self._on_filter_full,
            FilterRequest: self._on_filter_request,
            Ack: self._on_ack,
            Fail: self._on_fail,
            Leave: self._on_leave,
            Hello: self._on_late_handshake,
            HelloAuth: self._on_late_handshake,
        }

    def _new_link(self, dial_key: Address | None) -> Link:
        return Link(self, Handshake(self.node_id, self._secret, dial_key is not None), dial_key)

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        """Listen on the bus port (0 = any free port, see ``port``) and dial the seeds."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._server = await loop.create_server(
            lambda: self._new_link(None), self.config.bind, self.config.port
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.membership.myself.bus_port = self.port
        for name in FILTER_NAMES:
            self.sync.start(KIND_OF[name], self.node.filter_snapshot(name))
        for seed in self.config.join:
            host, _, port = seed.rpartition(":")
            self._seeds.add((host or "127.0.0.1", int(port)))
        self._tick()

    async def stop(self) -> None:
        """Send LEAVE to every peer, close every link and the listener."""
        self._stopping = self.dialer.stopping = True
        if self._cron is not None:
            self._cron.cancel()
        for link in list(self._links):
            if link.authenticated:
                self._send(link, Leave())
        for wait_id in self.waits.open_ids():
            self._finish_wait(wait_id)
        await asyncio.sleep(0)  # let the transports flush the LEAVE frames
        for link in list(self._links):
            link.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    # -- ClusterLink ---------------------------------------------------------------

    def forward_publish(self, channel: bytes, message: bytes, shard: bool, origin_seq: int) -> int:
        routing = self.routing
        peers = routing.peer_count
        if not peers:  # a lone node: nothing to route to
            return 0
        stats = self.stats
        mask = routing.route(channel, shard)
        if not mask:
            stats.publish_suppressed += peers
            return 0
        sent = 0
        out, inbound, short = self._out, self._in, self._short
        nodes = routing.nodes_of(mask)
        for node_id in nodes:
            link = out.get(node_id)
            if link is None or not link.authenticated:
                link = inbound.get(node_id)
                if link is None or not link.authenticated:
                    stats.publish_dropped_no_link += 1
                    continue
            link.send_seq = seq = (link.send_seq + 1) & 0xFFFFFFFF
            link.write(encode_publish(short, seq, origin_seq, shard, channel, message))
            sent += 1
        stats.sent[MsgType.PUBLISH] += sent
        stats.publish_suppressed += peers - len(nodes)
        return sent

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        deltas, whole = self.sync.announce(changes)
        for kind in whole:  # the node rebuilt this filter at a new m: send it whole
            self._announce_full(kind)
        if not deltas:
            return None
        visibility = self.config.visibility_timeout_ms > 0 and self._loop is not None
        wait_id = self.waits.open() if visibility else 0
        live = self._live_links()
        for msg in deltas:
            frame = encode(msg, self._short)
            for peer_id, link in live:
                link.write(frame)
                if visibility:
                    self.waits.expect(wait_id, peer_id, msg.delta_id)
            self.stats.sent[MsgType.FILTER_DELTA] += len(live)
        if not visibility:
            return None
        assert self._loop is not None
        self.stats.visibility_waits += 1
        future: asyncio.Future[None] = self._loop.create_future()
        handle = None
        if not self.waits.done(wait_id):
            timeout = self.config.visibility_timeout_ms / 1000
            handle = self._loop.call_later(timeout, self._visibility_timeout, wait_id)
        self._futures[wait_id] = (future, handle)
        self._maybe_done(wait_id)
        return future

    def peer_count(self) -> int:
        return len(self.membership.peers)

    def info_fields(self) -> dict[str, int | str]:
        return cluster_info(
            self.stats,
            self.membership,
            sync_state(self.membership, self.routing, self._linked_out),
            epoch=self.sync.epoch,
            bus_port=self.port,
            links_connected=sum(1 for lk in self._links if lk.authenticated),
            verify_failures=self.sync.verify_failures,
        )

    def nodes_lines(self) -> list[str]:
        return cluster_nodes(
            self.membership, self.client_port, self.port, self.sync.epoch, self._linked_out
        )

    def _linked_out(self, node_id: str) -> bool:
        link = self._out.get(node_id)
        return link is not None and link.authenticated

    # -- LinkOwner: what links report --------------------------------------------------

    def link_made(self, link: Link) -> None:
        if self._stopping:
            link.close()
            return
        self._links.add(link)
        if link.outbound:
            self._send(link, link.handshake.hello())

    def publish_received(self, link: Link, msg: Publish) -> None:
        self.stats.received[MsgType.PUBLISH] += 1
        expected = link.recv_seq
        if expected is not None and msg.link_seq != expected:
            lost = (msg.link_seq - expected) & 0xFFFFFFFF
            self.stats.sequence_gaps += lost
            log.warning("bus link from %s: %d forwarded PUBLISH lost", link.peer_id, lost)
        link.recv_seq = (msg.link_seq + 1) & 0xFFFFFFFF
        assert link.peer_id is not None
        self.node.deliver_forwarded(
            link.peer_id, msg.origin_seq, msg.channel, msg.payload, msg.shard
        )

    def message_received(self, link: Link, msg: Message) -> None:
        self.stats.received[_TYPE_OF[type(msg)]] += 1
        if not link.authenticated:
            self._on_handshake(link, msg)
            return
        assert link.peer_id is not None
        self._handlers[type(msg)](link, link.peer_id, msg)

    def bad_frame(self, link: Link, reason: str) -> None:
        self.stats.bad_frames += 1
        log.warning("bus link %s: %s; closing it", link.peer_id or link.peer_host, reason)
        link.close(abort=True)

    def buffer_exceeded(self, link: Link) -> None:
        self.stats.buffer_limit_exceeded += 1
        self.stats.links_dropped += 1
        log.warning("bus link to %s over its send buffer limit; dropped", link.peer_id)
        link.close(abort=True)

    def link_closed(self, link: Link) -> None:
        self._links.discard(link)
        peer = link.peer_id
        if peer is None:
            return
        if self._out.get(peer) is link:
            del self._out[peer]
        if self._in.get(peer) is link:
            del self._in[peer]
        reachable = self._link_to(peer) is not None
        rec = self.membership.peers.get(peer)
        if rec is not None:
            rec.connected = reachable
        if not reachable:
            self._peer_unreachable(peer)

    # -- handshake -------------------------------------------------------------------

    def _on_handshake(self, link: Link, msg: Message) -> None:
        step = link.handshake.receive(msg)
        if step.error is not None:
            self._auth_failed(link, step.error)
            return
        if step.myself:
            if link.dial_key is not None:
                self.dialer.myself.add(link.dial_key)
                self._seeds.discard(link.dial_key)
            link.close()
            return
        if step.send is not None:
            self._send(link, step.send)
        if step.done:
            peer = link.handshake.peer_id
            assert peer is not None
            self._authenticated(link, peer)

    def _authenticated(self, link: Link, peer: str) -> None:
        link.authenticate(peer, self.config.max_body)
        if link.outbound:
            old = self._out.get(peer)
            if old is not None and old is not link and old.authenticated:
                link.close()
                return
            self._out[peer] = link
            if link.dial_key is not None:
                self.dialer.connected(link.dial_key)
                self._seeds.discard(link.dial_key)
            self._send(link, self._heartbeat(Meet, peer))
            self.membership.ping_sent(peer, now_ms())
        else:
            self._in[peer] = link
        rec = self.membership.peers.get(peer)
        if rec is not None:
            rec.connected = True

    def _auth_failed(self, link: Link, reason: str) -> None:
        self.stats.auth_failures += 1
        log.warning("bus handshake with %s failed: %s", link.peer_host, reason)
        link.close(abort=True)

    def _on_late_handshake(self, link: Link, peer: str, msg: Message) -> None:
        self.bad_frame(link, "handshake frame on an established link")

    # -- message handlers (authenticated links) ------------------------------------------

    def _on_heartbeat(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, Heartbeat)
        if msg.node_id != peer:
            self.bad_frame(link, "heartbeat node id is not the link's peer")
            return
        now = now_ms()
        ms = self.membership
        host = msg.host or link.peer_host
        before = set(ms.peers)
        rec = ms.peers.get(peer)
        if rec is None:
            rec = ms.learn(peer, host, msg.client_port, msg.bus_port, now, direct=True)
            if rec is None:
                return
        else:
            rec.host, rec.client_port, rec.bus_port = host, msg.client_port, msg.bus_port
        rec.connected = True
        if isinstance(msg, Pong) and ms.pong_received(peer, now):
            log.warning("node %s is reachable again", peer)
        learned, failed = ms.gossip_received(peer, msg.gossip, now)
        for failed_id in failed:
            self._broadcast_fail(failed_id)
        if set(ms.peers) != before or learned:
            self._sync_routing()
        if isinstance(msg, (Ping, Meet)):
            self._send_to(peer, self._heartbeat(Pong, peer), link)
        for request in self.sync.on_heartbeat(peer, msg, now):
            self._send_to(peer, request, link)

    def _on_filter_delta(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, FilterDelta)
        for reply in self.sync.on_delta(peer, msg, now_ms()):
            self._send_to(peer, reply, link)

    def _on_filter_full(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, FilterFull)
        self.sync.on_full(peer, msg)

    def _on_filter_request(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, FilterRequest)
        snap = self.node.filter_snapshot(NAME_OF[msg.kind])
        self._send_to(peer, self.sync.full(msg.kind, snap, announce=False), link)

    def _on_ack(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, Ack)
        wait_id = self.waits.acked(peer, msg.delta_id)
        if wait_id is not None:
            self._maybe_done(wait_id)

    def _on_fail(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, Fail)
        if msg.node_id == self.node_id:
            return  # others think we failed; our PONGs will clear it
        if self.membership.fail_received(msg.node_id, now_ms()):
            log.warning("node %s marked failed (FAIL from %s)", msg.node_id, peer)
            self._peer_unreachable(msg.node_id)

    def _on_leave(self, link: Link, peer: str, msg: Message) -> None:
        log.info("node %s left the cluster", peer)
        self.membership.forget(peer, now_ms())
        self._sync_routing()
        self._peer_unreachable(peer)

    # -- filters and membership ------------------------------------------------------------

    def _announce_full(self, kind: FilterKind) -> None:
        """Send the whole filter to every live peer (after a rebuild at a new m)."""
        frame = encode(
            self.sync.full(kind, self.node.filter_snapshot(NAME_OF[kind]), True), self._short
        )
        live = self._live_links()
        for _, link in live:
            link.write(frame)
        self.stats.sent[MsgType.FILTER_FULL] += len(live)

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

    def _broadcast_fail(self, node_id: str) -> None:
        log.warning("node %s marked failed", node_id)
        msg = Fail(node_id)
        for peer, link in self._live_links():
            if peer != node_id:
                self._send(link, msg)
        self._peer_unreachable(node_id)

    def _peer_unreachable(self, peer: str) -> None:
        """No live link to ``peer``: stop waiting for its acks."""
        for wait_id in self.waits.peer_gone(peer):
            self._maybe_done(wait_id)

    # -- subscribe visibility ----------------------------------------------------------------

    def _maybe_done(self, wait_id: int) -> None:
        if self.waits.done(wait_id):
            self._finish_wait(wait_id)

    def _finish_wait(self, wait_id: int) -> None:
        self.waits.close(wait_id)
        future, handle = self._futures.pop(wait_id, (None, None))
        if handle is not None:
            handle.cancel()
        if future is not None and not future.done():
            future.set_result(None)

    def _visibility_timeout(self, wait_id: int) -> None:
        if wait_id in self._futures:
            self.stats.visibility_timeouts += 1
            self._finish_wait(wait_id)

    # -- sending -----------------------------------------------------------------------------

    def _send(self, link: Link, msg: Message) -> None:
        link.write(encode(msg, self._short))
        self.stats.sent[_TYPE_OF[type(msg)]] += 1

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

    def _heartbeat(self, cls: type[_HB], to: str) -> _HB:
        cfp, pfp, epoch, pmask, match_all = self.sync.heartbeat_fields()
        return cls(
            self.node_id,
            self.advertised_host,
            self.client_port,
            self.port,
            cfp,
            pfp,
            epoch,
            pmask,
            match_all,
            0,
            self.membership.gossip_sample(to, GOSSIP_ENTRIES),
        )

    # -- the periodic tick -------------------------------------------------------------------

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
        dialer = self.dialer
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
                    self.stats.links_dropped += 1
                    link.close(abort=True)
            else:
                ms.ping_sent(node_id, now)  # unreachable counts as a PING outstanding
                if link is None and rec.bus_port > 0:
                    key = (rec.host, rec.bus_port)
                    if dialer.due(key, now):
                        dialer.dial(key)
        for key in list(self._seeds):
            if dialer.due(key, now):
                dialer.dial(key)
        for failed in ms.check_timeouts(now):
            self._broadcast_fail(failed)
        for link in list(self._links):
            if not link.authenticated and now - link.created_ms > max(2000, half):
                self._auth_failed(link, "handshake timeout")

    def _last_heard(self, node_id: str, link: Link) -> int:
        """When any link of ``node_id`` last delivered bytes (ms)."""
        inbound = self._in.get(node_id)
        return max(link.last_rx_ms, inbound.last_rx_ms if inbound is not None else 0)


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
