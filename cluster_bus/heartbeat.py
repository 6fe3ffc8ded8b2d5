"""Heartbeats and membership on the wire: MEET / PING / PONG, gossip, FAIL, LEAVE,
and the periodic tick that sends them.

Redis Cluster's failure detection (``clusterCron`` in redis ``src/cluster.c``):
every period, PING each peer with no PING outstanding; a PING outstanding
longer than the node timeout makes the peer PFAIL; failure reports from a
majority make it FAIL, which is broadcast. A link silent for half the node
timeout with a PING outstanding may be half-open: it is dropped and redialled.
Every heartbeat carries a few gossip entries about other nodes (how nodes
learn of each other) and this node's announced filter fingerprints (how peers
notice a missed delta: :mod:`cluster_bus.filter_sync`). The state lives in the
sans-IO :class:`cluster_bus.membership.Membership`; this class puts it on the wire.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from cluster_bus.filter_sync import FilterSync
from cluster_bus.frames import Fail, Heartbeat, Meet, Message, Ping, Pong
from cluster_bus.info import BusStats
from cluster_bus.link import Address, Link, now_ms
from cluster_bus.membership import Membership
from cluster_bus.mesh import Dialer, Mesh
from cluster_bus.routing import PeerTable

_HB = TypeVar("_HB", Meet, Ping, Pong)

log = logging.getLogger("bloomcast.bus")

#: gossip entries per heartbeat (Redis sends ~1/10 of the nodes, at least 3)
GOSSIP_ENTRIES = 8


class Heartbeats:
    """Membership on the wire for one bus. ``unreachable(peer)`` is called when
    a peer can no longer be counted on (FAIL, LEAVE), ``forgotten(peer)`` when
    it leaves membership (its per-peer state goes: sessions, filter copies)."""

    def __init__(
        self,
        membership: Membership,
        mesh: Mesh,
        dialer: Dialer,
        routing: PeerTable,
        sync: FilterSync,
        stats: BusStats,
        *,
        advertised_host: str,
        node_timeout_ms: int,
        unreachable: Callable[[str], None],
        forgotten: Callable[[str], None],
    ) -> None:
        self.membership = membership
        self.mesh = mesh
        self.dialer = dialer
        self.routing = routing
        self.sync = sync
        self.stats = stats
        self._advertised_host = advertised_host
        self.node_timeout_ms = node_timeout_ms
        self._unreachable = unreachable
        self._forgotten = forgotten
        self.seeds: set[Address] = set()

    def on_heartbeat(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, Heartbeat)
        if msg.node_id != peer:
            link.owner.bad_frame(link, "heartbeat node id is not the link's peer")
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
            self.broadcast_fail(failed_id)
        if set(ms.peers) != before or learned:
            self.sync_routing()
        if isinstance(msg, (Ping, Meet)):
            self.mesh.send_to(peer, self.make(Pong, peer), link)
        for request in self.sync.on_heartbeat(peer, msg, now):
            self.mesh.send_to(peer, request, link)

    def on_fail(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, Fail)
        if msg.node_id == self.membership.myself.node_id:
            return  # others think we failed; our PONGs will clear it
        if self.membership.fail_received(msg.node_id, now_ms()):
            log.warning("node %s marked failed (FAIL from %s)", msg.node_id, peer)
            self._unreachable(msg.node_id)

    def on_leave(self, link: Link, peer: str, msg: Message) -> None:
        log.info("node %s left the cluster", peer)
        self.membership.forget(peer, now_ms())
        self.sync_routing()
        self._unreachable(peer)

    def sync_routing(self) -> None:
        """Make the routing table's peers the membership's peers."""
        current = set(self.membership.peers)
        for node_id in self.routing.node_ids() - current:
            self.routing.remove_peer(node_id)
            self.mesh.close_peer(node_id)
            self._forgotten(node_id)
        for node_id in current - self.routing.node_ids():
            self.routing.add_peer(node_id)

    def broadcast_fail(self, node_id: str) -> None:
        log.warning("node %s marked failed", node_id)
        msg = Fail(node_id)
        for peer, link in self.mesh.live(self.membership):
            if peer != node_id:
                self.mesh.send(link, msg)
        self._unreachable(node_id)

    def make(self, cls: type[_HB], to: str) -> _HB:
        me = self.membership.myself
        cfp, pfp, epoch, pmask, match_all = self.sync.heartbeat_fields()
        return cls(
            me.node_id,
            self._advertised_host,
            me.client_port,
            me.bus_port,
            cfp,
            pfp,
            epoch,
            pmask,
            match_all,
            0,
            self.membership.gossip_sample(to, GOSSIP_ENTRIES),
        )

    def tick(self, now: int) -> None:
        """PING, redial, half-open links, PFAIL/FAIL: once per heartbeat period."""
        ms = self.membership
        dialer = self.dialer
        half = self.node_timeout_ms // 2
        for node_id, rec in list(ms.peers.items()):
            link = self.mesh.out.get(node_id)
            if link is not None and link.authenticated:
                if rec.ping_sent_ms == 0:
                    self.mesh.send(link, self.make(Ping, node_id))
                    ms.ping_sent(node_id, now)
                elif (
                    now - rec.ping_sent_ms > half
                    and now - link.created_ms > half
                    and now - self.mesh.last_heard(node_id, link) > half
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
        for key in list(self.seeds):
            if dialer.due(key, now):
                dialer.dial(key)
        for failed in ms.check_timeouts(now):
            self.broadcast_fail(failed)
