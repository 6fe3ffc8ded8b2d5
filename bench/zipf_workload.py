"""The Zipf cluster workload (issue 18): popular channels subscribed on many
nodes, plus patterns, and the exact oracle of what each PUBLISH must reach.

Pure and seeded: no sockets. Same ``ZipfSpec``, same subscriptions, same
publish schedule, on every machine.

Model:

* ``C = channels_per_node x N`` channels ``<topic>.<rank:06d>``, ranks 1..C,
  topic ``TOPICS[(rank - 1) % 4]`` (every name has the same length, so the
  raw-socket subscribers count messages by bytes);
* popularity over PUBLISH is Zipf(``s``): the publisher picks rank r with
  weight ``r^-s`` (:func:`bloomcast.demo.workload.zipf_weights`);
* channel rank r is SUBSCRIBEd on ``k(r) = min(N, ceil(N * r^-s))`` nodes (as
  many as its share of traffic calls for: rank 1 on every node, the tail on
  one), a seeded sample of the nodes; ``feed.*`` channels are published but
  never SUBSCRIBEd (pure waste for a broadcast bus);
* PSUBSCRIBE ``news.*`` on every even node (glob and literal prefix agree:
  no extra forward), and ``c*9`` on the last node: literal prefix ``c``
  only, so its prefix filter matches every ``chat.*`` and ``cart.*``
  channel while the glob matches the tenth ending in 9; the other nine
  tenths are forwards the pattern filter forces to a node without receiver;
* every node publishes ``publishes_per_node`` times, channels drawn from the
  Zipf weights with ``Random(f"{seed}:{node}")``.

The oracle reuses the demo's (:mod:`bloomcast.demo.workload`, Redis delivery rules
via :mod:`router.glob`): the nodes with a receiver, the prefix-only nodes,
and the deliveries every subscriber must get.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from bloomcast.demo.workload import (
    Change,
    Publish,
    RoutingExpectation,
    Subscriber,
    Subscription,
    SubscriptionState,
    glob_match,
    routing_expectation,
    zipf_weights,
)

TOPICS = ("news", "chat", "cart", "feed")
#: topics never SUBSCRIBEd (only patterns can reach them)
UNSUBSCRIBED_TOPICS = ("feed",)
#: every node whose index is even PSUBSCRIBEs this
EVEN_PATTERN = "news.*"
#: the last node PSUBSCRIBEs this: a one-byte literal prefix
BROAD_PATTERN = "c*9"


def channel_of(rank: int) -> str:
    """Channel of popularity rank ``rank`` (1 = most published)."""
    return f"{TOPICS[(rank - 1) % len(TOPICS)]}.{rank:06d}"


@dataclass(frozen=True)
class ZipfSpec:
    """Sizes of the Zipf workload; ``seed`` fixes everything."""

    nodes: int = 3
    channels_per_node: int = 8
    zipf_s: float = 1.1
    publishes_per_node: int = 2000
    seed: int = 18

    def __post_init__(self) -> None:
        if self.nodes < 2 or self.channels_per_node < 1 or self.publishes_per_node < 1:
            raise ValueError("need >= 2 nodes, >= 1 channel per node, >= 1 publish")


class ZipfWorkload:
    """Subscriptions, schedule and oracle of one :class:`ZipfSpec`."""

    def __init__(self, spec: ZipfSpec) -> None:
        self.spec = spec
        n = spec.nodes
        self.channels = [channel_of(r) for r in range(1, n * spec.channels_per_node + 1)]
        self.weights = zipf_weights(len(self.channels), spec.zipf_s)
        self.node_channels: list[list[str]] = [[] for _ in range(n)]
        for rank, channel in enumerate(self.channels, start=1):
            if channel.split(".")[0] in UNSUBSCRIBED_TOPICS:
                continue
            k = min(n, math.ceil(n * rank**-spec.zipf_s))
            for node in sorted(random.Random(f"{spec.seed}:sub:{rank}").sample(range(n), k)):
                self.node_channels[node].append(channel)
        self.node_patterns: list[list[str]] = [
            ([EVEN_PATTERN] if i % 2 == 0 else []) + ([BROAD_PATTERN] if i == n - 1 else [])
            for i in range(n)
        ]

    def subscribers_on(self, node: int) -> int:
        """Channels plus patterns subscribed on ``node``."""
        return len(self.node_channels[node]) + len(self.node_patterns[node])

    def schedule(self, node: int, length: int | None = None) -> list[str]:
        """The channels node ``node`` publishes to, in order (seeded)."""
        rng = random.Random(f"{self.spec.seed}:{node}")
        k = self.spec.publishes_per_node if length is None else length
        return rng.choices(self.channels, weights=self.weights, k=k)

    @cached_property
    def state(self) -> SubscriptionState:
        """The oracle's view: one subscriber per node holding its channels, one per
        (node, pattern)."""
        subs = [Subscriber(f"c{i}", i, "room") for i in range(self.spec.nodes)]
        subs += [
            Subscriber(f"p{i}:{p}", i, "pattern")
            for i in range(self.spec.nodes)
            for p in self.node_patterns[i]
        ]
        state = SubscriptionState(subs)
        for i in range(self.spec.nodes):
            for ch in self.node_channels[i]:
                state.apply(Change(f"c{i}", "subscribe", Subscription("channel", ch)))
            for p in self.node_patterns[i]:
                state.apply(Change(f"p{i}:{p}", "subscribe", Subscription("pattern", p)))
        return state

    def expectation(self) -> RoutingExpectation:
        """Exact minimum, prefix-only forwards and broadcast over the whole schedule
        (Bloom false positives are left out: they are measured)."""
        total = RoutingExpectation()
        fp_rates = {i: 0.0 for i in range(self.spec.nodes)}
        for node in range(self.spec.nodes):
            for j, channel in enumerate(self.schedule(node)):
                pub = Publish(f"{node}:{j}", node, channel)
                total.add(routing_expectation(self.state, pub, fp_rates))
        return total

    def publish_counts(self) -> Counter[str]:
        """PUBLISH per channel over every node's schedule."""
        counts: Counter[str] = Counter()
        for node in range(self.spec.nodes):
            counts.update(self.schedule(node))
        return counts

    def expected_channel_messages(self, node: int) -> int:
        """``message`` pushes node ``node``'s channel subscriber must receive."""
        counts = self.publish_counts()
        return sum(counts[ch] for ch in self.node_channels[node])

    def expected_pattern_messages(self, pattern: str) -> int:
        """``pmessage`` pushes one subscriber of ``pattern`` must receive."""
        counts = self.publish_counts()
        return sum(c for ch, c in counts.items() if glob_match(pattern.encode(), ch.encode()))

    def describe(self) -> dict[str, object]:
        """JSON-ready summary: subscription counts and share of PUBLISH per fan-out."""
        n = self.spec.nodes
        on_nodes = Counter[str]()
        for chans in self.node_channels:
            on_nodes.update(chans)
        counts = self.publish_counts()
        total = sum(counts.values())
        everywhere = sum(c for ch, c in counts.items() if on_nodes[ch] == n)
        nowhere = sum(c for ch, c in counts.items() if on_nodes[ch] == 0)
        return {
            "channels": len(self.channels),
            "channels_on_every_node": sum(1 for ch in self.channels if on_nodes[ch] == n),
            "channels_on_one_node": sum(1 for ch in self.channels if on_nodes[ch] == 1),
            "channels_unsubscribed": sum(1 for ch in self.channels if on_nodes[ch] == 0),
            "publish_share_on_every_node": everywhere / total,
            "publish_share_unsubscribed": nowhere / total,
            "patterns": {p: [i for i in range(n) if p in self.node_patterns[i]]
                         for p in (EVEN_PATTERN, BROAD_PATTERN)},
        }  # fmt: skip


__all__ = ["ZipfSpec", "ZipfWorkload", "channel_of"]
