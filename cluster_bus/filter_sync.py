"""Filter synchronisation as pure state (sans-IO: time passed in, messages out).

Two directions, one module, because both speak in the same fingerprints:

- **What we announced** of our own two filters (m, CRC64 fingerprint, pattern
  prefix mask and match-all flag) and the filter epoch. A local change goes
  out as a FILTER_DELTA against the announced fingerprint (Summary Cache's
  delta updates: explicit set/clear positions, idempotent), or as a whole
  FILTER_FULL when m changed (a rebuild). Heartbeats carry what was
  announced, never a change not yet announced, so a peer cannot mistake it
  for a missed delta.
- **What we hold** of each peer's filters (in :class:`cluster_bus.routing.PeerTable`).
  A heartbeat fingerprint that differs from our copy, or a delta whose base
  is not our copy, marks that copy unknown (the peer then gets every PUBLISH:
  fail open) and asks for the whole filter with FILTER_REQUEST, at most once
  per ``REQUEST_RETRY_MS`` per (peer, filter) until a verified copy arrives;
  a request left unanswered is sent again after an exponential backoff with
  jitter (``REQUEST_RETRY_MS`` x 2^(n-1) x rand(1, 2), at most
  ``REQUEST_RETRY_MAX_MS`` or half the node timeout, whichever is less, so a
  link that healed gets its filters within that): on a loaded cluster an
  answer takes longer than a second, and each early retry costs the peer a
  whole filter more (issue 40: 1,010 FILTER_FULL per node at N = 200 where
  398 were needed).
- **What others say** a peer announced: gossip entries carry each node's filter
  epoch and fingerprints (:mod:`cluster_bus.membership` spreads a change in
  O(log N) periods). A newer epoch whose fingerprint is not our copy's means
  we missed a delta: the same distrust-and-request as above, straight to
  that peer. Heartbeats go to one peer per period, so this, not the peer's
  own heartbeat, is what bounds the healing time as N grows.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

from cluster_bus.api import FilterChange, FilterName, FilterSnapshot
from cluster_bus.frames import (
    FilterDelta,
    FilterFull,
    FilterKind,
    FilterRequest,
    Heartbeat,
    Message,
)
from cluster_bus.nodes import NodeRecord

if TYPE_CHECKING:
    from cluster_bus.routing import PeerTable

log = logging.getLogger("bloomcast.bus")

#: a FILTER_REQUEST for one (peer, filter) is repeated at most this often (ms),
#: the wait doubling (with jitter) while it goes unanswered, up to the max
REQUEST_RETRY_MS = 1000
REQUEST_RETRY_MAX_MS = 16_000
KIND_OF: dict[FilterName, FilterKind] = {
    "channels": FilterKind.CHANNELS,
    "patterns": FilterKind.PATTERNS,
}
NAME_OF: dict[FilterKind, FilterName] = {kind: name for name, kind in KIND_OF.items()}


class FilterSync:
    """This node's announced filters and its copies of its peers' filters."""

    def __init__(
        self,
        routing: PeerTable,
        rng: random.Random | None = None,
        max_retry_ms: int = REQUEST_RETRY_MAX_MS,
    ) -> None:
        self.routing = routing
        self._rng = rng or random.Random()
        #: the longest wait between two requests of one filter (ms)
        self.max_retry_ms = max(REQUEST_RETRY_MS, min(REQUEST_RETRY_MAX_MS, max_retry_ms))
        self.epoch = 0
        #: kind -> (m, fingerprint, prefix_mask, match_all) as last announced
        self.announced: dict[FilterKind, tuple[int, int, int, bool]] = {}
        self._next_delta_id = 1
        #: (peer, kind) -> (last request ms, requests unanswered, wait before the next ms)
        self._requested: dict[tuple[str, FilterKind], tuple[int, int, int]] = {}
        self.verify_failures = 0

    # -- our filters ---------------------------------------------------------------

    def start(self, kind: FilterKind, snap: FilterSnapshot) -> None:
        """What a peer sees of ``kind`` before any change: the filter at start."""
        self.announced[kind] = (snap.m, snap.fingerprint, snap.prefix_mask, snap.match_all)

    def announce(self, changes: list[FilterChange]) -> tuple[list[FilterDelta], list[FilterKind]]:
        """The FILTER_DELTAs announcing ``changes`` (one new epoch for them all),
        and the filters whose m is no longer the announced m (a rebuild): those
        are announced whole (:meth:`full`)."""
        deltas: list[FilterDelta] = []
        whole: list[FilterKind] = []
        for change in changes:
            kind = KIND_OF[change.filter]
            m, base_fp, _, _ = self.announced[kind]
            if change.m != m:
                whole.append(kind)
                continue
            if not deltas:
                self.epoch += 1
            delta_id = self._next_delta_id
            self._next_delta_id = (delta_id + 1) & 0xFFFFFFFF or 1
            self.announced[kind] = (m, change.fingerprint, change.prefix_mask, change.match_all)
            deltas.append(
                FilterDelta(
                    kind,
                    delta_id,
                    m,
                    base_fp,
                    change.fingerprint,
                    change.set_positions,
                    change.cleared_positions,
                    self.epoch,
                    change.prefix_mask,
                    change.match_all,
                )
            )
        if len(deltas) > 1:  # one ACK per peer for the batch: its last delta's
            deltas[:-1] = [delta._replace(more=True) for delta in deltas[:-1]]
        return deltas, whole

    def full(self, kind: FilterKind, snap: FilterSnapshot, announce: bool) -> FilterFull:
        """A FILTER_FULL of ``snap``: as an announcement to every peer (a new
        epoch, and it becomes what heartbeats carry) or as the answer to one
        peer's FILTER_REQUEST (``announce`` False)."""
        if announce:
            self.epoch += 1
            self.announced[kind] = (snap.m, snap.fingerprint, snap.prefix_mask, snap.match_all)
        return FilterFull(
            kind,
            snap.m,
            snap.k,
            snap.bits,
            snap.fingerprint,
            self.epoch,
            snap.prefix_mask,
            snap.match_all,
        )

    def heartbeat_fields(self) -> tuple[int, int, int, int, bool]:
        """(channel_fp, pattern_fp, epoch, prefix_mask, match_all) as announced."""
        _, cfp, _, _ = self.announced[FilterKind.CHANNELS]
        _, pfp, pmask, match_all = self.announced[FilterKind.PATTERNS]
        return cfp, pfp, self.epoch, pmask, match_all

    # -- peers' filters --------------------------------------------------------------

    def on_heartbeat(self, peer: str, hb: Heartbeat, now: int) -> list[Message]:
        """Check both fingerprints a MEET/PING/PONG carries; FILTER_REQUESTs to send."""
        out: list[Message] = []
        for kind, fp in (
            (FilterKind.CHANNELS, hb.channel_fp),
            (FilterKind.PATTERNS, hb.pattern_fp),
        ):
            request = self._check(peer, kind, fp, hb.filter_epoch, now)
            if request is not None:
                out.append(request)
        self.routing.set_pattern_meta(peer, hb.prefix_mask, hb.match_all, hb.filter_epoch)
        return out

    def _check(self, peer: str, kind: FilterKind, fp: int, epoch: int, now: int) -> Message | None:
        routing = self.routing
        held = routing.fingerprint(peer, kind)
        if held == fp and held is not None:
            self._requested.pop((peer, kind), None)
            return None
        if held is not None and routing.epoch(peer, kind) > epoch:
            # our copy claims to be newer than the heartbeat: usually a delta
            # that overtook it on another link, but an epoch proves nothing (a
            # bogus 2^63 would silence every later heartbeat), so ask anyway,
            # keeping the copy for routing until the answer comes
            return self._request(peer, kind, now)
        return self._distrust(peer, kind, now)

    def on_gossip(self, node: NodeRecord, now: int) -> list[Message]:
        """Gossip says ``node`` announced filters at a newer epoch than we knew
        (``node.filter_epoch``, ``node.channel_fp`` / ``pattern_fp``): the
        FILTER_REQUESTs to send to it when our copy is older and differs."""
        peer = node.node_id
        routing = self.routing
        if not routing.has_peer(peer):
            return []
        out: list[Message] = []
        for kind, fp in (
            (FilterKind.CHANNELS, node.channel_fp),
            (FilterKind.PATTERNS, node.pattern_fp),
        ):
            held = routing.fingerprint(peer, kind)
            if held == fp:
                continue
            if held is not None and routing.epoch(peer, kind) > node.filter_epoch:
                continue  # our copy is newer than the gossip
            request = self._distrust(peer, kind, now)
            if request is not None:
                out.append(request)
        return out

    def retry(self, now: int) -> list[tuple[str, Message]]:
        """FILTER_REQUESTs still unanswered after ``REQUEST_RETRY_MS``, again:
        (peer, request). A peer's heartbeats are rarer than a period, so the
        retry cannot wait for the next one."""
        out: list[tuple[str, Message]] = []
        for (peer, kind), (at, _, wait) in list(self._requested.items()):
            if now - at >= wait:
                request = self._request(peer, kind, now)
                if request is not None:
                    out.append((peer, request))
        return out

    def on_full(self, peer: str, msg: FilterFull, now: int) -> list[Message]:
        """Install a peer's whole filter; one that does not verify is counted,
        logged and asked for again (the copy fails open meanwhile)."""
        if not self.routing.has_peer(peer):
            return []
        if self.routing.set_filter(
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
            self._requested.pop((peer, msg.kind), None)
            return []
        self.verify_failures += 1
        log.warning(
            "node %s sent a %s filter that does not verify; asking again", peer, msg.kind.name
        )
        request = self._request(peer, msg.kind, now)
        return [request] if request is not None else []

    def on_delta(self, peer: str, msg: FilterDelta, now: int) -> tuple[Message | None, int | None]:
        """Apply a peer's delta to our copy: the FILTER_REQUEST to send when the
        copy is now distrusted (a stale base or a new geometry), else None; and
        the delta id to ACK: always, but None for a delta with ``more`` set,
        whose batch's last delta follows on the link and is acked for both (a
        copy we distrust gets everything, so acking stays truthful). The bus
        writes the ACK as its frame (``codec.ack_frame``: no Ack built)."""
        return self._apply(peer, msg, now), None if msg.more else msg.delta_id

    def _apply(self, peer: str, msg: FilterDelta, now: int) -> Message | None:
        routing = self.routing
        if routing.has_peer(peer) and not routing.apply_delta(
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
            return self._distrust(peer, msg.kind, now)
        return None

    def forget(self, peer: str) -> None:
        """The peer left membership (its copy went with ``PeerTable.remove_peer``)."""
        for kind in FilterKind:
            self._requested.pop((peer, kind), None)

    def _distrust(self, peer: str, kind: FilterKind, now: int) -> Message | None:
        """Fail open on ``peer``'s ``kind`` filter until a verified copy arrives."""
        self.routing.mark_unknown(peer, kind)
        return self._request(peer, kind, now)

    def _request(self, peer: str, kind: FilterKind, now: int) -> Message | None:
        """A FILTER_REQUEST, unless one for (peer, filter) went out less than its
        wait ago (``REQUEST_RETRY_MS`` after the first, doubling after each
        one unanswered, with jitter, up to ``max_retry_ms``)."""
        held = self._requested.get((peer, kind))
        unanswered = 0
        if held is not None:
            at, unanswered, wait = held
            if now - at < wait:
                return None
        wait = REQUEST_RETRY_MS
        if unanswered:
            wait = min(
                self.max_retry_ms, int(wait * 2 ** (unanswered - 1) * self._rng.uniform(1, 2))
            )
        self._requested[(peer, kind)] = (now, unanswered + 1, wait)
        return FilterRequest(kind)
