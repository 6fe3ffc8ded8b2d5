"""Subscribe visibility: a (P)SUBSCRIBE confirmation that waits for the peers.

With ``--subscribe-visibility-timeout MS`` the node sends a subscribe
confirmation only once every live peer acknowledged (ACK) the filter delta it
caused, or after MS: a message published anywhere after the confirmation then
reaches the new subscriber (nats-server #1142 and #2150 ask for exactly this
signal). A wait ends when every (peer, delta id) it expects is acked, when a
peer it expects becomes unreachable (suspected, FAIL, link lost: it no longer
counts, and a suspected peer is not waited for at all), on timeout (counted
in ``cluster_subscribe_visibility_timeouts`` and logged, naming the peers
that did not answer, at most once per ``LOG_EVERY_MS``), or when the bus
stops. On by default in a node (1000 ms): Redis Cluster's broadcast
delivers a PUBLISH made anywhere after the SUBSCRIBE reply, and so must we.

A peer that let a wait time out is *lagging*: later waits do not wait for it
until it acks again (any ACK: its link is in order, so it then holds every
delta before), so one stopped or overloaded peer costs one timeout, not one
per SUBSCRIBE until it is suspected (issue 48). CLUSTER INFO
``cluster_subscribe_visibility_lagging`` counts the peers lagging now,
``cluster_subscribe_visibility_skipped`` the waits that left one out (logged
with the timeout's line, at most once per ``LOG_EVERY_MS``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from itertools import repeat

from cluster_bus.info import BusStats

log = logging.getLogger("bloomcast.bus")

#: a timed-out wait is logged at most this often (the rest are counted)
LOG_EVERY_MS = 10_000


class Visibility:
    """Open waits: the (peer, delta id) ACKs each still owes, and its future.

    One wait per announced batch (:mod:`cluster_bus.announce`: a loop turn's
    changes), however many SUBSCRIBEs wait on it: :meth:`batch` is the
    future of the batch not yet announced, :meth:`take_batch` hands it to
    the announcement, which opens the wait."""

    def __init__(self, timeout_ms: int, stats: BusStats) -> None:
        self.timeout_ms = timeout_ms
        self._stats = stats
        self._pending: dict[int, set[tuple[str, int]]] = {}
        self._of_delta: dict[int, int] = {}  # delta id -> wait id
        self._deltas: dict[int, list[int]] = {}  # wait id -> its delta ids
        self._futures: dict[int, tuple[asyncio.Future[None], asyncio.TimerHandle | None]] = {}
        self._batch: asyncio.Future[None] | None = None
        self._next = 1
        self._logged_ms = -LOG_EVERY_MS
        self._unlogged = 0
        #: peers that let a wait time out and have not acked since (module doc)
        self.lagging: set[str] = set()

    def batch(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """The future of the batch of changes not yet announced."""
        future = self._batch
        if future is None:
            future = self._batch = loop.create_future()
        return future

    def take_batch(self) -> asyncio.Future[None] | None:
        """The batch's future (None: nobody waits on it), as it is announced."""
        future, self._batch = self._batch, None
        return future

    def open_waits(self) -> int:
        """Waits opened and not yet done."""
        return len(self._pending)

    def open(self) -> int:
        wait_id = self._next
        self._next += 1
        self._pending[wait_id] = set()
        self._deltas[wait_id] = []
        return wait_id

    def future(
        self,
        wait_id: int,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[None] | None = None,
    ) -> asyncio.Future[None]:
        """The future of an opened wait (``future``: that one; done at once
        when the wait expects nothing)."""
        self._stats.visibility_waits += 1
        if future is None:
            future = loop.create_future()
        handle = None
        if self._pending.get(wait_id):
            handle = loop.call_later(self.timeout_ms / 1000, self._timed_out, wait_id)
        self._futures[wait_id] = (future, handle)
        self._maybe_done(wait_id)
        return future

    def expect_peers(self, wait_id: int, peers: list[str], delta_id: int) -> None:
        """Wait ``wait_id`` also waits for the ACK of ``delta_id`` from each of
        ``peers``, in one call (the pairs built in C: a subscribe batch at N =
        200 expects 199). A lagging peer is left out (module doc)."""
        lagging = self.lagging
        if lagging:
            waited = [peer for peer in peers if peer not in lagging]
            if len(waited) != len(peers):
                self._stats.visibility_skipped += 1
                peers = waited
        self._pending[wait_id].update(zip(peers, repeat(delta_id)))
        if self._of_delta.get(delta_id) != wait_id:
            self._of_delta[delta_id] = wait_id
            self._deltas[wait_id].append(delta_id)

    def acked(self, peer: str, delta_id: int) -> None:
        if self.lagging:
            self.lagging.discard(peer)  # it acks again: waited for again
        wait_id = self._of_delta.get(delta_id)
        if wait_id is not None:
            pending = self._pending[wait_id]
            pending.discard((peer, delta_id))
            if not pending and wait_id in self._futures:  # (_maybe_done, inline)
                self._finish(wait_id)

    def peer_gone(self, peer: str) -> None:
        """``peer`` is unreachable: no wait waits for it any more (and once it
        is back, later waits do, lagging or not)."""
        self.lagging.discard(peer)
        for wait_id, pending in list(self._pending.items()):
            owed = {item for item in pending if item[0] == peer}
            if owed:
                pending -= owed
                self._maybe_done(wait_id)

    def stop(self) -> None:
        for wait_id in list(self._pending):
            self._finish(wait_id)
        future = self.take_batch()
        if future is not None and not future.done():
            future.set_result(None)

    def _maybe_done(self, wait_id: int) -> None:
        if not self._pending.get(wait_id) and wait_id in self._futures:
            self._finish(wait_id)

    def _timed_out(self, wait_id: int) -> None:
        if wait_id in self._futures:
            self._stats.visibility_timeouts += 1
            late = {peer for peer, _ in self._pending.get(wait_id, ())}
            self.lagging |= late
            self._log_timeout(sorted(late))
            self._finish(wait_id)

    def _log_timeout(self, peers: list[str]) -> None:
        now = int(time.monotonic() * 1000)
        if now - self._logged_ms < LOG_EVERY_MS:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more since the last such line)" if self._unlogged else ""
        log.warning(
            "SUBSCRIBE confirmed after %d ms without the filter ACK of node(s) %s%s; "
            "not waited for until they ack again",
            self.timeout_ms,
            ", ".join(peers),
            more,
        )
        self._logged_ms, self._unlogged = now, 0

    def _finish(self, wait_id: int) -> None:
        self._pending.pop(wait_id, None)
        for delta_id in self._deltas.pop(wait_id, ()):
            if self._of_delta.get(delta_id) == wait_id:
                del self._of_delta[delta_id]
        future, handle = self._futures.pop(wait_id, (None, None))
        if handle is not None:
            handle.cancel()
        if future is not None and not future.done():
            future.set_result(None)
