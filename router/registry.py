"""The subscription filters (``SubscriptionFilters``): the Bloom filters that summarise a
node's subscriptions, which peers test before forwarding.

The subscriptions themselves live in :mod:`router.pubsub`; it tells the
registry when a name gets its first local subscriber (in either channel
kind) and when it loses its last one, so the filters see each distinct name
once:

- a ``CountingBloomFilter`` over channels and shard channels (its exported
  bit filter is exact up to false positives);
- a ``PatternFilter`` over the patterns' literal prefixes, likewise per
  distinct pattern.

Every change returns the :class:`FilterChange` list the node hands to its
ClusterLink (empty when no exported bit flipped), with the filter's m, prefix
mask and match-all flag, so the bus never asks back.

The registry also keeps the false-positive resize policy
(:meth:`SubscriptionFilters.forward_received`): a filter that makes peers forward too
much here for nothing is rebuilt at twice its m from the exact subscriptions.
Compiled on the compiled data plane (``router._registry``): every forwarded
PUBLISH is counted there in C.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import cython

from cluster_bus.api import (
    CountingBloomFilter,
    FilterChange,
    FilterName,
    FilterSnapshot,
    PatternFilter,
)

log = logging.getLogger("bloomcast.node")

#: the largest channel filter a false-positive resize grows to (2^24 bits = 2 MiB)
MAX_RESIZE_M = 1 << 24
#: the resize policy judges forwards received in windows of this many
FP_CHECK_EVERY = 256


@cython.final
@cython.cclass
class SubscriptionFilters:
    """The filters of one node; not thread-safe (one asyncio loop)."""

    def __init__(self, capacity: int, fp_rate: float, max_m: int = MAX_RESIZE_M) -> None:
        self.fp_rate = fp_rate
        self.max_m = max_m
        self.channel_filter = CountingBloomFilter.for_capacity(capacity, fp_rate)
        self.pattern_filter = PatternFilter.for_capacity(capacity, fp_rate)
        #: every channel name subscribed (both kinds), for a rebuild; set by
        #: :class:`router.pubsub.PubSub`
        self.channel_names: Callable[[], set[bytes]] = set
        self.filter_epoch = 0  # bumped on every rebuild
        self.false_positives_received = 0  # forwards here that no local subscriber wanted
        self._window_received = 0
        self._window_false = 0
        #: :data:`FP_CHECK_EVERY` (a test may set it)
        self.check_every = FP_CHECK_EVERY

    # ------------------------------------------------------------ channels

    def channel_added(self, channel: bytes) -> list[FilterChange]:
        """``channel`` got its first local subscriber (of either kind)."""
        return self._channel_change(set_positions=self.channel_filter.add(channel))

    def channel_removed(self, channel: bytes) -> list[FilterChange]:
        """``channel`` lost its last local subscriber (of either kind)."""
        return self._channel_change(cleared=self.channel_filter.remove(channel))

    def _channel_change(
        self, set_positions: tuple[int, ...] = (), cleared: tuple[int, ...] = ()
    ) -> list[FilterChange]:
        if not set_positions and not cleared:
            return []
        cf = self.channel_filter
        # the fingerprint read when announced (FilterChange), not per change
        return [FilterChange("channels", set_positions, cleared, cf.fingerprint, cf.m)]

    # ------------------------------------------------------------ patterns

    def pattern_added(self, pattern: bytes) -> list[FilterChange]:
        """``pattern`` got its first local subscriber."""
        pf = self.pattern_filter
        before = (pf.prefix_lengths, pf.match_all)
        return self._pattern_change(before, pf.add(pattern), ())

    def pattern_removed(self, pattern: bytes) -> list[FilterChange]:
        """``pattern`` lost its last local subscriber."""
        pf = self.pattern_filter
        before = (pf.prefix_lengths, pf.match_all)
        return self._pattern_change(before, (), pf.remove(pattern))

    def _pattern_change(
        self, before: tuple[int, bool], set_positions: tuple[int, ...], cleared: tuple[int, ...]
    ) -> list[FilterChange]:
        pf = self.pattern_filter
        if not set_positions and not cleared and before == (pf.prefix_lengths, pf.match_all):
            return []
        return [
            FilterChange(
                "patterns",
                set_positions,
                cleared,
                pf.fingerprint,
                pf.m,
                pf.prefix_lengths,
                pf.match_all,
            )
        ]

    # ------------------------------------------------------------ resizing

    def forward_received(self, false_positive: bool) -> list[FilterChange]:
        """Count a PUBLISH a peer forwarded here (``false_positive``: no local
        receiver). Every :attr:`check_every` forwards, rebuild the channel filter
        at twice its m (up to ``max_m``) when that window was mostly false
        positives beyond the target (at least 16, and above max(4 x target,
        5%)) or the filter's own estimate (X/m)^k passes twice the target. The
        returned change carries the new m: the bus then announces it whole."""
        self._window_received += 1
        if false_positive:
            self.false_positives_received += 1
            self._window_false += 1
        if self._window_received < self.check_every:
            return []
        received, false = self._window_received, self._window_false
        self._window_received = self._window_false = 0
        target = self.fp_rate
        too_many = false >= 16 and false / received > max(4 * target, 0.05)
        m = self.channel_filter.m * 2
        if not (too_many or self.channel_filter.estimated_fp_rate > 2 * target) or m > self.max_m:
            return []
        estimate = self.channel_filter.estimated_fp_rate
        self.rebuild_channel_filter(m)
        cf = self.channel_filter
        log.info(
            "Channel filter resized to m=%d bits: %d of the last %d forwards received had "
            "no receiver, estimated FP rate %.3g (target %g)",
            m, false, received, estimate, target,
        )  # fmt: skip
        return [FilterChange("channels", (), (), cf.fingerprint(), cf.m)]

    def rebuild_channel_filter(self, m: int) -> None:
        """Rebuild the channel filter at size m from the exact subscriptions."""
        names = self.channel_names()
        self.channel_filter = CountingBloomFilter.from_keys(names, m, self.channel_filter.k)
        self.filter_epoch += 1

    def snapshot(self, name: FilterName) -> FilterSnapshot:
        """One filter as the bus sends it whole (FILTER_FULL)."""
        if name == "channels":
            return FilterSnapshot.of_channels(self.channel_filter)
        return FilterSnapshot.of_patterns(self.pattern_filter)

    # ------------------------------------------------------------ figures

    def filter_info(self) -> dict[str, int | str]:
        """The INFO ``# Filters`` section: geometry, fill and estimates per filter."""
        out: dict[str, int | str] = {}
        pf = self.pattern_filter
        cf = self.channel_filter
        for name, bits, fingerprint in (
            ("channel", cf, cf.fingerprint()),
            ("pattern", pf.counting, pf.fingerprint()),
        ):
            out[f"{name}_filter_m"] = bits.m
            out[f"{name}_filter_k"] = bits.k
            out[f"{name}_filter_set_bits"] = bits.set_bits
            out[f"{name}_filter_fill_ratio"] = f"{bits.fill_ratio:.6f}"
            out[f"{name}_filter_estimated_count"] = f"{bits.estimated_count:.2f}"
            out[f"{name}_filter_estimated_fp_rate"] = f"{bits.estimated_fp_rate:.6g}"
            out[f"{name}_filter_fingerprint"] = f"{fingerprint:016x}"
        out["pattern_filter_prefix_lengths"] = f"{self.pattern_filter.prefix_lengths:#x}"
        out["pattern_filter_match_all"] = int(self.pattern_filter.match_all)
        out["filter_epoch"] = self.filter_epoch
        return out
