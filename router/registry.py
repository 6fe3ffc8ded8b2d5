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
ClusterLink (empty when no exported bit flipped), with the filter's m, prefix
mask and match-all flag, so the bus never asks back.

The registry also keeps the false-positive resize policy
(:meth:`Registry.forward_received`): a filter that makes peers forward too
much here for nothing is rebuilt at twice its m from the exact subscriptions.
"""

from __future__ import annotations

import logging
from typing import Generic, Protocol, TypeVar

from bloom import CountingBloomFilter, PatternFilter
from cluster_bus.api import FilterChange, FilterName, FilterSnapshot
from router.pattern_index import PatternIndex

log = logging.getLogger("bloomcast.node")

#: the largest channel filter a false-positive resize grows to (2^24 bits = 2 MiB)
MAX_RESIZE_M = 1 << 24
#: the resize policy judges forwards received in windows of this many
FP_CHECK_EVERY = 256


class Subscriber(Protocol):
    """What the registry and delivery need of a client: its own subscription
    sets, its protocol version and a non-blocking, queued write."""

    channels: set[bytes]
    patterns: set[bytes]
    shard_channels: set[bytes]
    resp: int

    def write(self, data: bytes) -> None: ...


S = TypeVar("S", bound=Subscriber)


class Registry(Generic[S]):
    """Subscriptions of one node; not thread-safe (one asyncio loop).

    Generic in its subscribers: a node's registry holds its client
    connections (``Registry[ClientOutput]``), so delivery may use their
    output queues directly (:func:`router.client_output.write_to_all`)."""

    def __init__(self, capacity: int, fp_rate: float, max_m: int = MAX_RESIZE_M) -> None:
        self.fp_rate = fp_rate
        self.max_m = max_m
        self.channels: dict[bytes, set[S]] = {}
        self.shard_channels: dict[bytes, set[S]] = {}
        self.patterns: PatternIndex[S] = PatternIndex()
        self.channel_filter = CountingBloomFilter.for_capacity(capacity, fp_rate)
        self.pattern_filter = PatternFilter.for_capacity(capacity, fp_rate)
        self.filter_epoch = 0  # bumped on every rebuild
        self.false_positives_received = 0  # forwards here that no local subscriber wanted
        self._window_received = 0
        self._window_false = 0

    # ------------------------------------------------------------ channels

    def subscribe(self, sub: S, channel: bytes, shard: bool = False) -> list[FilterChange]:
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

    def unsubscribe(self, sub: S, channel: bytes, shard: bool = False) -> list[FilterChange]:
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
        cf = self.channel_filter
        return [FilterChange("channels", set_positions, cleared, cf.fingerprint(), cf.m)]

    # ------------------------------------------------------------ patterns

    def psubscribe(self, sub: S, pattern: bytes) -> list[FilterChange]:
        if pattern in sub.patterns:
            return []
        sub.patterns.add(pattern)
        if not self.patterns.add(pattern, sub):
            return []
        pf = self.pattern_filter
        before = (pf.prefix_lengths, pf.match_all)
        set_positions = pf.add(pattern)
        return self._pattern_change(before, set_positions, ())

    def punsubscribe(self, sub: S, pattern: bytes) -> list[FilterChange]:
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
        return [
            FilterChange(
                "patterns",
                set_positions,
                cleared,
                pf.fingerprint(),
                pf.m,
                pf.prefix_lengths,
                pf.match_all,
            )
        ]

    # ------------------------------------------------------------ whole client

    def drop_client(self, sub: S) -> list[FilterChange]:
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

    def forward_received(self, false_positive: bool) -> list[FilterChange]:
        """Count a PUBLISH a peer forwarded here (``false_positive``: no local
        receiver). Every ``FP_CHECK_EVERY`` forwards, rebuild the channel filter
        at twice its m (up to ``max_m``) when that window was mostly false
        positives beyond the target (at least 16, and above max(4 x target,
        5%)) or the filter's own estimate (X/m)^k passes twice the target. The
        returned change carries the new m: the bus then announces it whole."""
        self._window_received += 1
        if false_positive:
            self.false_positives_received += 1
            self._window_false += 1
        if self._window_received < FP_CHECK_EVERY:
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
        names = set(self.channels) | set(self.shard_channels)
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
