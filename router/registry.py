"""Registry: the node's subscriptions and the Bloom filters that summarise them.

Three namespaces, as Redis keeps them (``src/pubsub.c``): channels, patterns
and shard channels, each mapping a name to the set of subscribed clients, plus
each client's own sets (kept on the client). The registry also owns the node's
filters, the material the cluster bus gossips:

- a ``CountingBloomFilter`` over channels and shard channels: a name is added
  when its first local subscriber appears (in either namespace) and removed
  when its last one leaves, so the counting filter sees each distinct name
  once and its exported bit filter is exact up to false positives;
- a ``PatternFilter`` over the patterns' literal prefixes, likewise per
  distinct pattern.

Every change returns the :class:`FilterChange` list the node hands to its
ClusterLink (empty when no exported bit flipped).
"""

from __future__ import annotations

from typing import Protocol

from bloom import CountingBloomFilter, PatternFilter
from router.cluster_link import FilterChange
from router.pattern_index import PatternIndex


class Subscriber(Protocol):
    """What the registry and delivery need of a client: its own subscription
    sets, its protocol version and a non-blocking, queued write."""

    channels: set[bytes]
    patterns: set[bytes]
    shard_channels: set[bytes]
    resp: int

    def write(self, data: bytes) -> None: ...


class Registry:
    """Subscriptions of one node; not thread-safe (one asyncio loop)."""

    def __init__(self, capacity: int, fp_rate: float) -> None:
        self.channels: dict[bytes, set[Subscriber]] = {}
        self.shard_channels: dict[bytes, set[Subscriber]] = {}
        self.patterns: PatternIndex[Subscriber] = PatternIndex()
        self.channel_filter = CountingBloomFilter.for_capacity(capacity, fp_rate)
        self.pattern_filter = PatternFilter.for_capacity(capacity, fp_rate)
        self.filter_epoch = 0  # bumped on every rebuild

    # ------------------------------------------------------------ channels

    def subscribe(self, sub: Subscriber, channel: bytes, shard: bool = False) -> list[FilterChange]:
        """Add one (shard) channel subscription; no-op when already subscribed."""
        own = sub.shard_channels if shard else sub.channels
        if channel in own:
            return []
        own.add(channel)
        table = self.shard_channels if shard else self.channels
        subs = table.get(channel)
        if subs is not None:
            subs.add(sub)
            return []
        table[channel] = {sub}
        other = self.channels if shard else self.shard_channels
        if channel in other:  # the name is already in the filter
            return []
        return self._channel_change(set_positions=self.channel_filter.add(channel))

    def unsubscribe(
        self, sub: Subscriber, channel: bytes, shard: bool = False
    ) -> list[FilterChange]:
        own = sub.shard_channels if shard else sub.channels
        if channel not in own:
            return []
        own.discard(channel)
        table = self.shard_channels if shard else self.channels
        subs = table[channel]
        subs.discard(sub)
        if subs:
            return []
        del table[channel]
        other = self.channels if shard else self.shard_channels
        if channel in other:
            return []
        return self._channel_change(cleared=self.channel_filter.remove(channel))

    def _channel_change(
        self, set_positions: tuple[int, ...] = (), cleared: tuple[int, ...] = ()
    ) -> list[FilterChange]:
        if not set_positions and not cleared:
            return []
        fp = self.channel_filter.fingerprint()
        return [FilterChange("channels", set_positions, cleared, fp)]

    # ------------------------------------------------------------ patterns

    def psubscribe(self, sub: Subscriber, pattern: bytes) -> list[FilterChange]:
        if pattern in sub.patterns:
            return []
        sub.patterns.add(pattern)
        if not self.patterns.add(pattern, sub):
            return []
        pf = self.pattern_filter
        before = (pf.prefix_lengths, pf.match_all)
        set_positions = pf.add(pattern)
        return self._pattern_change(before, set_positions, ())

    def punsubscribe(self, sub: Subscriber, pattern: bytes) -> list[FilterChange]:
        if pattern not in sub.patterns:
            return []
        sub.patterns.discard(pattern)
        if not self.patterns.remove(pattern, sub):
            return []
        pf = self.pattern_filter
        before = (pf.prefix_lengths, pf.match_all)
        cleared = pf.remove(pattern)
        return self._pattern_change(before, (), cleared)

    def _pattern_change(
        self, before: tuple[int, bool], set_positions: tuple[int, ...], cleared: tuple[int, ...]
    ) -> list[FilterChange]:
        pf = self.pattern_filter
        if not set_positions and not cleared and before == (pf.prefix_lengths, pf.match_all):
            return []
        return [FilterChange("patterns", set_positions, cleared, pf.fingerprint())]

    # ------------------------------------------------------------ whole client

    def drop_client(self, sub: Subscriber) -> list[FilterChange]:
        """Remove every subscription of a client (RESET, disconnect)."""
        changes: list[FilterChange] = []
        for channel in list(sub.channels):
            changes += self.unsubscribe(sub, channel)
        for channel in list(sub.shard_channels):
            changes += self.unsubscribe(sub, channel, shard=True)
        for pattern in list(sub.patterns):
            changes += self.punsubscribe(sub, pattern)
        return changes

    # ------------------------------------------------------------ resizing

    def rebuild_channel_filter(self, m: int) -> bool:
        """Rebuild the channel filter at size m from the exact subscriptions
        (asked by the cluster bus when forwards here are too often false
        positives). True when rebuilt."""
        names = set(self.channels) | set(self.shard_channels)
        self.channel_filter = CountingBloomFilter.from_keys(names, m, self.channel_filter.k)
        self.filter_epoch += 1
        return True

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
