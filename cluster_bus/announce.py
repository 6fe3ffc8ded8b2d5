"""Our filter changes on the wire: a loop iteration's changes folded into one
FILTER_DELTA per filter to every live peer, or the whole filter after a
rebuild at a new m, and one wait for their ACKs when subscribe visibility is
on (:mod:`cluster_bus.visibility`). What to
announce is decided by the sans-IO :class:`cluster_bus.filter_sync.FilterSync`;
this sends it."""

from __future__ import annotations

import asyncio

from cluster_bus.api import FilterChange, LocalDelivery, merge_changes
from cluster_bus.codec import encode
from cluster_bus.filter_sync import NAME_OF, FilterSync
from cluster_bus.frames import FilterKind, MsgType
from cluster_bus.heartbeat import Heartbeats
from cluster_bus.info import BusStats
from cluster_bus.membership import Membership
from cluster_bus.mesh import Mesh
from cluster_bus.nodes import SUSPECT_FLAGS
from cluster_bus.visibility import Visibility

_SUSPECT = int(SUSPECT_FLAGS)


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
        #: this loop iteration's changes, announced at its end (:meth:`flush`)
        self._changes: list[FilterChange] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def changed(
        self, changes: list[FilterChange], loop: asyncio.AbstractEventLoop | None, wait: bool
    ) -> asyncio.Future[None] | None:
        """ClusterLink.filters_changed: ``changes`` join this loop iteration's batch,
        announced once at the iteration's end (:meth:`flush`): all the (P|S)(UN)SUBSCRIBEs
        of one iteration, over any number of connections, cost each peer one
        FILTER_DELTA per filter and one ACK (issue 48). ``wait`` (subscribe
        visibility on): the future of the batch's wait, which resolves once
        every live peer not suspected acked it. ``loop`` None (the bus has not
        started): announced at once, nothing to wait for."""
        if not changes:
            return None
        if loop is None:
            self._changes += changes
            self.flush()
            return None
        if not self._changes:
            self._loop = loop
            loop.call_soon(self.flush)
        self._changes += changes
        return self.visibility.batch(loop) if wait else None

    def flush(self) -> None:
        """Announce the batch: its changes folded into one per filter
        (``merge_changes``; the fingerprint is read now, the filter's state
        after them all), a FILTER_DELTA each to every live peer, or the whole
        filter after a rebuild at a new m."""
        changes = self._changes
        future = self.visibility.take_batch()
        if not changes:
            if future is not None and not future.done():
                future.set_result(None)
            return
        self._changes = []
        deltas, whole = self.sync.announce(merge_changes(changes))
        for kind in whole:  # the node rebuilt this filter at a new m: send it whole
            self.full(kind)
        self.heartbeats.filters_announced()
        if not deltas:
            if future is not None and not future.done():
                future.set_result(None)
            return
        wait_id = self.visibility.open() if future is not None else 0
        live = self.mesh.live(self.membership)
        frames = [encode(msg, self._sender) for msg in deltas]
        for _, link in live:
            for frame in frames:
                link.write(frame)
        self.stats.sent[MsgType.FILTER_DELTA] += len(live) * len(deltas)
        if wait_id:
            # a suspected peer gets the deltas but is not waited for: it may be
            # stopped, and it heals from the fingerprints when it is back (the
            # flags as an int: an IntFlag's & costs microseconds, per peer)
            peers = self.membership.peers
            # the batch's last delta's ACK: a peer acks a batch once (the
            # deltas before it, flagged ``more``, came first on the same link)
            self.visibility.expect_peers(
                wait_id,
                [peer_id for peer_id, _ in live if not int(peers[peer_id].flags) & _SUSPECT],
                deltas[-1].delta_id,
            )
        if future is not None and self._loop is not None:
            self.visibility.future(wait_id, self._loop, future)

    def full(self, kind: FilterKind) -> None:
        """Send the whole filter to every live peer (after a rebuild at a new m)."""
        snapshot = self.node.filter_snapshot(NAME_OF[kind])
        frame = encode(self.sync.full(kind, snapshot, True), self._sender)
        live = self.mesh.live(self.membership)
        for _, link in live:
            link.write(frame)
        self.stats.sent[MsgType.FILTER_FULL] += len(live)
