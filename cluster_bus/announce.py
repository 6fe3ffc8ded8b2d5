"""Our filter changes on the wire: a FILTER_DELTA per change to every live
peer, or the whole filter after a rebuild at a new m, and the wait for their
ACKs when subscribe visibility is on (:mod:`cluster_bus.visibility`). What to
announce is decided by the sans-IO :class:`cluster_bus.filter_sync.FilterSync`;
this sends it."""

from __future__ import annotations

import asyncio

from cluster_bus.api import FilterChange, LocalDelivery
from cluster_bus.codec import encode
from cluster_bus.filter_sync import NAME_OF, FilterSync
from cluster_bus.frames import FilterKind, MsgType
from cluster_bus.heartbeat import Heartbeats
from cluster_bus.info import BusStats
from cluster_bus.membership import Membership
from cluster_bus.mesh import Mesh
from cluster_bus.visibility import Visibility


class Announcer:
    """Sends one bus's filter changes (``sender``: our short id)."""

    def __init__(
        self,
        node: LocalDelivery,
        sync: FilterSync,
        mesh: Mesh,
        membership: Membership,
        heartbeats: Heartbeats,
        visibility: Visibility,
        stats: BusStats,
        sender: int,
    ) -> None:
        self.node, self.sync, self.mesh = node, sync, mesh
        self.membership, self.heartbeats = membership, heartbeats
        self.visibility, self.stats, self._sender = visibility, stats, sender

    def changed(
        self, changes: list[FilterChange], loop: asyncio.AbstractEventLoop | None
    ) -> asyncio.Future[None] | None:
        """ClusterLink.filters_changed: ``loop`` given when subscribe visibility
        is on (the future resolves once every live peer acked the deltas)."""
        deltas, whole = self.sync.announce(changes)
        for kind in whole:  # the node rebuilt this filter at a new m: send it whole
            self.full(kind)
        self.heartbeats.filters_announced()
        if not deltas:
            return None
        wait_id = self.visibility.open() if loop is not None else 0
        live = self.mesh.live(self.membership)
        peers = self.membership.peers
        for msg in deltas:
            frame = encode(msg, self._sender)
            for peer_id, link in live:
                link.write(frame)
                # a suspected peer gets the delta but is not waited for: it may
                # be stopped, and it heals from the fingerprints when it is back
                if wait_id and not peers[peer_id].failing:
                    self.visibility.expect(wait_id, peer_id, msg.delta_id)
            self.stats.sent[MsgType.FILTER_DELTA] += len(live)
        return self.visibility.future(wait_id, loop) if loop is not None else None

    def full(self, kind: FilterKind) -> None:
        """Send the whole filter to every live peer (after a rebuild at a new m)."""
        snapshot = self.node.filter_snapshot(NAME_OF[kind])
        frame = encode(self.sync.full(kind, snapshot, True), self._sender)
        live = self.mesh.live(self.membership)
        for _, link in live:
            link.write(frame)
        self.stats.sent[MsgType.FILTER_FULL] += len(live)
