"""The node's own filters as the bus reads them (:class:`cluster_bus.bus.LocalFilters`).

The node (router/) owns a ``bloom.CountingBloomFilter`` of its channels and
shard channels and a ``bloom.PatternFilter`` of its pattern prefixes; the bus
only reads them (fingerprints for PING/PONG, whole bits for FILTER_FULL) and
asks for a rebuild at a larger m when forwards to this node are too often
false positives. Getters, not objects, so a rebuilt filter is picked up.

Wire fingerprints: the channel filter's ``fingerprint()`` (CRC64 of its bits)
and the pattern filter's ``fingerprint()`` (CRC64 of bits, prefix mask and
match-all flag); see :func:`cluster_bus.routing.filter_fingerprint`.
"""

from __future__ import annotations

from collections.abc import Callable

from bloom import CountingBloomFilter, PatternFilter
from cluster_bus.bus import FilterSnapshot
from cluster_bus.frames import FilterKind

#: the largest channel filter a FP-driven resize grows to (2^24 bits = 2 MiB)
MAX_RESIZE_M = 1 << 24


class BloomLocalFilters:
    """LocalFilters over getters of the node's counting channel filter and pattern filter.

    ``rebuild(m)`` (optional) makes the node rebuild its channel filter at size
    m from its exact subscriptions and returns True when it did.
    """

    def __init__(
        self,
        channels: Callable[[], CountingBloomFilter],
        patterns: Callable[[], PatternFilter],
        rebuild: Callable[[int], bool] | None = None,
        max_m: int = MAX_RESIZE_M,
    ) -> None:
        self._channels = channels
        self._patterns = patterns
        self._rebuild = rebuild
        self.max_m = max_m

    def summary(self, kind: FilterKind) -> tuple[int, int, int, bool]:
        if kind is FilterKind.CHANNELS:
            c = self._channels()
            return c.m, c.fingerprint(), 0, False
        p = self._patterns()
        return p.m, p.fingerprint(), p.prefix_lengths, p.match_all

    def snapshot(self, kind: FilterKind) -> FilterSnapshot:
        if kind is FilterKind.CHANNELS:
            c = self._channels()
            return FilterSnapshot(c.m, c.k, c.exported.bits.tobytes(), c.fingerprint())
        p = self._patterns()
        counting = p.counting
        return FilterSnapshot(
            p.m,
            counting.k,
            counting.exported.bits.tobytes(),
            p.fingerprint(),
            p.prefix_lengths,
            p.match_all,
        )

    def estimated_fp_rate(self) -> float:
        return float(self._channels().estimated_fp_rate)

    def resize(self) -> bool:
        if self._rebuild is None:
            return False
        m = self._channels().m * 2
        if m > self.max_m:
            return False
        return self._rebuild(m)
