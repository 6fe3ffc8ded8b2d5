"""Our filter changes on the wire: a loop iteration's changes folded into one
FILTER_DELTA per filter to every live peer, or the whole filter after a
rebuild at a new m, and one wait for their ACKs when subscribe visibility is
on (:mod:`cluster_bus.visibility`). What to
announce is decided by the sans-IO :class:`cluster_bus.filter_sync.FilterSync`;
this sends it.

A batch that only clears bits (UNSUBSCRIBEs: nobody waits for them) is held
up to :data:`CLEAR_LINGER_S`, and goes out with the next batch that sets
bits, or alone when the linger ends (issue 48: a SUBSCRIBE + UNSUBSCRIBE
cycle woke every peer twice, and the peers' wake-ups, summed over the
machine's cores, are the visibility wait at N = 30). Holding a clear is
safe: until it goes out a peer forwards a little more than it must (a bit
still set in its copy), never less; a bit set again meanwhile goes out set
(the held and new changes are folded, the last one winning). Not held while
a visibility wait is open (a wait of a batch that sets nothing acks the
deltas before it), nor when the pattern filter gains a prefix length or
match-all, nor past a FILTER_REQUEST (:meth:`Announcer.release`: the
whole filter we answer with is then what we announced)."""

from __future__ import annotations

import asyncio

from cluster_bus.api import FilterChange, LocalDelivery, merge_changes
from cluster_bus.codec import encode
from cluster_bus.filter_sync import KIND_OF, NAME_OF, FilterSync
from cluster_bus.frames import FilterKind, MsgType
from cluster_bus.heartbeat import Heartbeats
from cluster_bus.info import BusStats
from cluster_bus.membership import Membership
from cluster_bus.mesh import Mesh
from cluster_bus.nodes import SUSPECT_FLAGS
from cluster_bus.visibility import Visibility

_SUSPECT = int(SUSPECT_FLAGS)

#: how long a batch of clears alone waits for a batch that sets bits (s)
CLEAR_LINGER_S = 0.1


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
        #: clears held for the next batch that sets bits (module doc)
        self._held: list[FilterChange] = []
        self._held_timer: asyncio.TimerHandle | None = None
        self.clears_linger_s = CLEAR_LINGER_S

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
        loop = self._loop
        if loop is not None and self._clears_only(changes):
            self._held += changes
            if self._held_timer is None:
                self._held_timer = loop.call_later(self.clears_linger_s, self.release)
            self.stats.clear_batches_held += 1
            if future is not None and not future.done():
                future.set_result(None)
            return
        if self._held:
            changes = self._held + changes
        self._cancel_held()
        self._announce(changes, future)

    def release(self) -> None:
        """Announce the held clears now (their linger ended, or a peer asked for
        a whole filter, which must be the one announced)."""
        changes = self._held
        self._cancel_held()
        if changes:
            self._announce(changes, None)

    def _cancel_held(self) -> None:
        self._held = []
        if self._held_timer is not None:
            self._held_timer.cancel()
            self._held_timer = None

    def _clears_only(self, changes: list[FilterChange]) -> bool:
        """``changes`` set no bit, keep m, and add neither a prefix length nor
        match-all; and no visibility wait is open (module doc)."""
        if self.visibility.open_waits():
            return False
        announced = self.sync.announced
        for change in changes:
            if change.set_positions:
                return False
            m, _, mask, match_all = announced[KIND_OF[change.filter]]
            if change.m != m or change.prefix_mask & ~mask or (change.match_all and not match_all):
                return False
        return True

    def _announce(self, changes: list[FilterChange], future: asyncio.Future[None] | None) -> None:
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
