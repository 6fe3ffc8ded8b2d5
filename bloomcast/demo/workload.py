"""The demo workload: a seeded model of a chat-like pub/sub application, and the
exact oracle that says which subscriber must get which message.

Pure: no sockets, no clocks except the publish timestamp written into payloads.
``bloomcast demo`` (bloomcast/demo/) drives it through real clients. It ships
in the product because the demo does; the benchmarks reuse it
(bench/zipf_workload.py): bench imports the product, never the reverse.

Model (issue 6):

* channels ``user:<id>`` (one inbox per user), ``room:<id>`` with Zipf
  popularity (weight of room r proportional to r^-s), ``alerts:<kind>``,
  ``ticker:<sym>`` (published, never subscribed: pure broadcast waste in Redis
  Cluster) and shard channels ``shard:{<j>}`` (SSUBSCRIBE / SPUBLISH);
* subscribers of four kinds, spread over the nodes: *user* (own inbox plus a
  few rooms), *room* (rooms only), *pattern* (PSUBSCRIBE ``alerts:*`` or
  ``room:1?``) and *shard* (SSUBSCRIBE to shard channels);
* a schedule of phases. Phase 0 joins most subscribers; every later phase
  has some subscribers leave (unsubscribe everything), some join, and some
  move between rooms, then publishers on every node publish. In the last
  phases the least popular room goes viral (``trend_share`` of PUBLISH), so
  the statistics job's "trending channels" has a known answer.

The oracle (:func:`expected_deliveries`) follows Redis's delivery rules: a
PUBLISH reaches every client subscribed to the channel (a ``message``) and, in
addition, one ``pmessage`` per pattern of that client that matches the channel
(Redis glob, ``stringmatchlen``, via :mod:`router.glob`); an SPUBLISH reaches the clients subscribed
to that shard channel (``smessage``) and no pattern subscriber. In bloomcast a
PUBLISH on any node reaches subscribers on every node.

The expectation is exact when the demo keeps phases apart: subscription changes
of a phase are confirmed (with subscribe visibility on, a confirmation means
every peer has the filter change) before its first PUBLISH, and every message of
a phase is drained before the next phase's changes.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from bloom import (
    DEFAULT_K,
    DEFAULT_MAX_PREFIX,
    literal_prefix,
    m_for_capacity,
    theoretical_fp_rate,
)
from router.glob import stringmatch

SubKind = Literal["channel", "pattern", "shard"]
Action = Literal["subscribe", "unsubscribe"]

ALERT_KINDS = ("cpu", "disk", "net", "auth")
TICKERS = ("AAPL", "MSFT", "NVDA", "AMZN")
#: the patterns pattern subscribers use (issue 6)
PATTERNS = ("alerts:*", "room:1?")


def glob_match(pattern: bytes, subject: bytes) -> bool:
    """Redis glob match (``stringmatchlen`` rules): the node's own matcher."""
    return stringmatch(pattern, subject)


# -- the model -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscription:
    """One (P|S)SUBSCRIBE target: ``kind`` channel, pattern or shard, and its name."""

    kind: SubKind
    name: str


@dataclass(frozen=True, slots=True)
class Change:
    """A subscriber (un)subscribes one target."""

    sub_id: str
    action: Action
    target: Subscription


@dataclass(frozen=True, slots=True)
class Publish:
    """A PUBLISH (or SPUBLISH when ``shard``) by a publisher on ``node``."""

    msg_id: str
    node: int
    channel: str
    shard: bool = False


@dataclass(frozen=True, slots=True)
class Phase:
    """Subscription changes (applied and confirmed first), then publishes."""

    index: int
    changes: tuple[Change, ...]
    publishes: tuple[Publish, ...]


@dataclass(frozen=True)
class WorkloadSpec:
    """Sizes of the workload. Counts are numbers of channels/subscribers/messages."""

    nodes: int = 5
    users: int = 400
    rooms: int = 60
    zipf_s: float = 1.1  # room popularity exponent
    shard_channels: int = 8
    subscribers: int = 300
    initial_active: float = 0.8  # share of subscribers joined in phase 0
    churn: float = 0.08  # share of subscribers leaving (and joining) per phase
    room_moves: float = 0.05  # share of active subscribers changing rooms per phase
    phases: int = 10
    publishes_per_phase: int = 300
    payload_bytes: int = 64
    # a cold room goes viral: from this share of the phases on, this share of
    # PUBLISH goes to room:<rooms> (the least popular), so "trending" has a truth
    trend_from: float = 0.6
    trend_share: float = 0.1
    seed: int = 1

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.subscribers < 1 or self.phases < 1:
            raise ValueError("nodes, subscribers and phases must be >= 1")
        if self.users < 1 or self.rooms < 20 or self.shard_channels < 1:
            raise ValueError("need >= 1 user, >= 20 rooms (room:1? must match), >= 1 shard")


@dataclass
class Subscriber:
    sub_id: str
    node: int
    kind: Literal["user", "room", "pattern", "shard"]
    user: int | None = None


class SubscriptionState:
    """Who is subscribed to what right now (the oracle's input)."""

    def __init__(self, subscribers: Iterable[Subscriber]) -> None:
        self.subscribers = {s.sub_id: s for s in subscribers}
        self.targets: dict[str, set[Subscription]] = {s: set() for s in self.subscribers}
        # reverse indexes: exact channel -> subs, shard channel -> subs, pattern -> subs
        self._channel: dict[str, set[str]] = defaultdict(set)
        self._shard: dict[str, set[str]] = defaultdict(set)
        self._pattern: dict[str, set[str]] = defaultdict(set)

    def _index(self, kind: SubKind) -> dict[str, set[str]]:
        return {"channel": self._channel, "shard": self._shard, "pattern": self._pattern}[kind]

    def apply(self, change: Change) -> None:
        """Apply one change (Redis semantics: subscribing twice is one subscription)."""
        index = self._index(change.target.kind)
        name = change.target.name
        if change.action == "subscribe":
            self.targets[change.sub_id].add(change.target)
            index[name].add(change.sub_id)
        else:
            self.targets[change.sub_id].discard(change.target)
            index[name].discard(change.sub_id)
            if not index[name]:
                del index[name]

    def active(self, sub_id: str) -> bool:
        return bool(self.targets[sub_id])

    def node_channels(self, node: int) -> set[str]:
        """Distinct channels and shard channels subscribed on ``node`` (its channel filter)."""
        out: set[str] = set()
        for index in (self._channel, self._shard):
            for name, subs in index.items():
                if any(self.subscribers[s].node == node for s in subs):
                    out.add(name)
        return out

    def node_patterns(self, node: int) -> set[str]:
        return {
            p
            for p, subs in self._pattern.items()
            if any(self.subscribers[s].node == node for s in subs)
        }

    def patterns(self) -> dict[str, set[str]]:
        return self._pattern

    def channel_subs(self, channel: str, shard: bool) -> set[str]:
        return (self._shard if shard else self._channel).get(channel, set())


def zipf_weights(n: int, s: float) -> list[float]:
    """Weights 1/r^s for ranks r = 1..n (Zipf's law), not normalised."""
    return [1.0 / (r**s) for r in range(1, n + 1)]


class Workload:
    """A seeded workload: subscribers and the schedule of phases.

    The schedule is generated up front from ``spec.seed`` (same seed, same
    schedule), tracking the subscription state as it goes so every change is
    meaningful (no unsubscribe of something not subscribed)."""

    def __init__(self, spec: WorkloadSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.room_weights = zipf_weights(spec.rooms, spec.zipf_s)
        self.subscribers = self._make_subscribers()
        self.phases = self._make_phases()

    # channels

    def room(self) -> str:
        r = self.rng.choices(range(1, self.spec.rooms + 1), weights=self.room_weights)[0]
        return f"room:{r}"

    def shard_channel(self) -> str:
        return f"shard:{{{self.rng.randrange(self.spec.shard_channels)}}}"

    def _make_subscribers(self) -> list[Subscriber]:
        rng, spec = self.rng, self.spec
        kinds: list[Literal["user", "room", "pattern", "shard"]] = rng.choices(
            ["user", "room", "pattern", "shard"], weights=[60, 20, 5, 15], k=spec.subscribers
        )
        users = rng.sample(range(spec.users), k=min(spec.users, spec.subscribers))
        subs = []
        for i, kind in enumerate(kinds):
            user = users[i % len(users)] if kind == "user" else None
            subs.append(Subscriber(f"s{i}", node=i % spec.nodes, kind=kind, user=user))
        return subs

    def _join_targets(self, sub: Subscriber) -> list[Subscription]:
        rng = self.rng
        if sub.kind == "user":
            rooms = {self.room() for _ in range(rng.randint(1, 3))}
            return [Subscription("channel", f"user:{sub.user}")] + [
                Subscription("channel", r) for r in sorted(rooms)
            ]
        if sub.kind == "room":
            rooms = {self.room() for _ in range(rng.randint(1, 4))}
            return [Subscription("channel", r) for r in sorted(rooms)]
        if sub.kind == "pattern":
            return [Subscription("pattern", rng.choice(PATTERNS))]
        shards = {self.shard_channel() for _ in range(rng.randint(1, 2))}
        return [Subscription("shard", s) for s in sorted(shards)]

    def _make_phases(self) -> list[Phase]:
        rng, spec = self.rng, self.spec
        state = SubscriptionState(self.subscribers)
        phases = []
        msg = 0
        for p in range(spec.phases):
            changes: list[Change] = []
            active = [s for s in self.subscribers if state.active(s.sub_id)]
            idle = [s for s in self.subscribers if not state.active(s.sub_id)]
            if p == 0:
                joining = rng.sample(idle, k=round(spec.initial_active * len(idle)))
                leaving: list[Subscriber] = []
            else:
                n = max(1, round(spec.churn * len(self.subscribers)))
                leaving = rng.sample(active, k=min(n, len(active)))
                joining = rng.sample(idle, k=min(n, len(idle)))
                movers = [s for s in active if s.kind in ("user", "room") and s not in leaving]
                for s in rng.sample(
                    movers, k=min(len(movers), round(spec.room_moves * len(active)))
                ):
                    rooms = [t for t in state.targets[s.sub_id] if t.name.startswith("room:")]
                    if rooms and rng.random() < 0.5:
                        changes.append(
                            Change(s.sub_id, "unsubscribe", rng.choice(sorted(rooms, key=str)))
                        )
                    else:
                        changes.append(
                            Change(s.sub_id, "subscribe", Subscription("channel", self.room()))
                        )
            for s in leaving:
                changes += [
                    Change(s.sub_id, "unsubscribe", t)
                    for t in sorted(state.targets[s.sub_id], key=str)
                ]
            for s in joining:
                changes += [Change(s.sub_id, "subscribe", t) for t in self._join_targets(s)]
            for c in changes:
                state.apply(c)
            publishes = []
            trending = p >= spec.trend_from * spec.phases
            for _ in range(spec.publishes_per_phase):
                node = rng.randrange(spec.nodes)
                channel, shard = self._publish_channel(trending)
                publishes.append(Publish(f"m{msg}", node, channel, shard))
                msg += 1
            phases.append(Phase(p, tuple(changes), tuple(publishes)))
        return phases

    @property
    def trend_room(self) -> str:
        """The room that goes viral in the late phases."""
        return f"room:{self.spec.rooms}"

    def _publish_channel(self, trending: bool) -> tuple[str, bool]:
        rng = self.rng
        if trending and rng.random() < self.spec.trend_share:
            return self.trend_room, False
        roll = rng.random()
        if roll < 0.40:
            return self.room(), False
        if roll < 0.70:
            return f"user:{rng.randrange(self.spec.users)}", False
        if roll < 0.80:
            return f"alerts:{rng.choice(ALERT_KINDS)}", False
        if roll < 0.90:
            return self.shard_channel(), True
        return f"ticker:{rng.choice(TICKERS)}", False

    def total_publishes(self) -> int:
        return sum(len(p.publishes) for p in self.phases)


# -- payloads --------------------------------------------------------------------------


def make_payload(msg_id: str, size: int, now_ns: int | None = None) -> bytes:
    """``b"<msg id> <publish time, ns since the epoch> "`` padded with ``.`` to
    ``size`` bytes (longer when the header alone is longer)."""
    t = time.time_ns() if now_ns is None else now_ns
    head = f"{msg_id} {t} ".encode()
    return head + b"." * max(0, size - len(head))


def parse_payload(payload: bytes) -> tuple[str, int]:
    """(msg id, publish time in ns). Raises ValueError on a foreign payload."""
    parts = payload.split(b" ", 2)
    if len(parts) < 3:
        raise ValueError(f"not a workload payload: {payload[:40]!r}")
    return parts[0].decode(), int(parts[1])


# -- the oracle ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery a subscriber receives: ``via`` is ``message``, ``smessage`` or
    ``pmessage:<pattern>``."""

    sub_id: str
    msg_id: str
    via: str
    channel: str


def expected_deliveries(state: SubscriptionState, pub: Publish) -> list[Delivery]:
    """Every delivery ``pub`` must cause given ``state`` (Redis's rules, see module doc)."""
    out = [Delivery(s, pub.msg_id, "smessage" if pub.shard else "message", pub.channel)
           for s in sorted(state.channel_subs(pub.channel, pub.shard))]  # fmt: skip
    if not pub.shard:
        channel = pub.channel.encode()
        for pattern, subs in state.patterns().items():
            if glob_match(pattern.encode(), channel):
                out += [Delivery(s, pub.msg_id, f"pmessage:{pattern}", pub.channel) for s in subs]
    return out


def interested_nodes(state: SubscriptionState, pub: Publish) -> set[int]:
    """Nodes with at least one receiver of ``pub`` (the exact-interest routing set)."""
    return {state.subscribers[d.sub_id].node for d in expected_deliveries(state, pub)}


def prefix_only_nodes(
    state: SubscriptionState, pub: Publish, max_prefix: int = DEFAULT_MAX_PREFIX
) -> set[int]:
    """Nodes without a receiver whose pattern filter still matches ``pub``: some
    pattern's literal prefix (cut to ``max_prefix``) starts the channel but the
    glob does not match (e.g. ``room:1?`` and ``room:123``), or a pattern starts
    with a glob character (match-all). Routing by prefix must forward to them."""
    if pub.shard:
        return set()
    channel = pub.channel.encode()
    nodes: set[int] = set()
    for pattern, subs in state.patterns().items():
        prefix = literal_prefix(pattern.encode(), max_prefix)
        if prefix is None or channel.startswith(prefix):
            nodes |= {state.subscribers[s].node for s in subs}
    return nodes - interested_nodes(state, pub)


@dataclass
class RoutingExpectation:
    """Per-PUBLISH bus figures the oracle predicts (summed over a run)."""

    publishes: int = 0
    exact_minimum: int = 0  # sum over publishes of peers with a receiver
    broadcast: int = 0  # publishes x (N - 1): Redis Cluster
    prefix_forwards: int = 0  # forced forwards to pattern-prefix-only peers
    bloom_fp_expected: float = 0.0  # sum of each uninterested peer's theoretical FP rate
    # peer -> PUBLISH routed past it with no receiver and no prefix match there:
    # the trials of its filter's false-positive rate
    exposure: Counter[int] = field(default_factory=Counter)

    def add(self, other: RoutingExpectation) -> None:
        self.publishes += other.publishes
        self.exact_minimum += other.exact_minimum
        self.broadcast += other.broadcast
        self.prefix_forwards += other.prefix_forwards
        self.bloom_fp_expected += other.bloom_fp_expected
        self.exposure.update(other.exposure)


@dataclass(frozen=True)
class FilterGeometry:
    """What a node's channel filter looks like: m bits, k hashes (see bloom/)."""

    m: int
    k: int = DEFAULT_K

    @classmethod
    def for_capacity(cls, capacity: int, fp_rate: float, k: int = DEFAULT_K) -> FilterGeometry:
        return cls(m_for_capacity(capacity, fp_rate, k), k)


def peer_fp_rates(
    state: SubscriptionState, geometry: dict[int, FilterGeometry]
) -> dict[int, float]:
    """Theoretical false-positive rate of each node's channel filter,
    ``(1 - e^(-k n / m))^k`` with n = its distinct channels (Bloom 1970; see
    :func:`bloom.bloom_filter.theoretical_fp_rate`). Compute once per phase."""
    return {
        node: theoretical_fp_rate(g.m, g.k, len(state.node_channels(node)))
        for node, g in geometry.items()
    }


def routing_expectation(
    state: SubscriptionState, pub: Publish, fp_rates: dict[int, float]
) -> RoutingExpectation:
    """Bus PUBLISH messages ``pub`` needs at least, what broadcast sends, and the
    false-positive forwards the filters' theory expects: each peer without a
    receiver and without a pattern-prefix match is hit with its filter's
    false-positive rate (``fp_rates`` from :func:`peer_fp_rates`; the pattern
    filter's own FP is neglected: a handful of patterns)."""
    interested = interested_nodes(state, pub) - {pub.node}
    forced = prefix_only_nodes(state, pub) - {pub.node}
    exposed = [
        peer
        for peer in fp_rates
        if peer != pub.node and peer not in interested and peer not in forced
    ]
    fp = sum(fp_rates[peer] for peer in exposed)
    return RoutingExpectation(
        1, len(interested), len(fp_rates) - 1, len(forced), fp, Counter(exposed)
    )


# -- the verifier ----------------------------------------------------------------------


@dataclass
class VerifyResult:
    """Counts of a run; ``ok`` when nothing was lost, duplicated or unexpected."""

    expected: int
    delivered: int
    lost: int
    duplicated: int
    unexpected: int
    latencies_ms: list[float] = field(repr=False, default_factory=list)
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0 and self.duplicated == 0 and self.unexpected == 0 and self.expected > 0
        )


class DeliveryVerifier:
    """Compares what subscribers received with :func:`expected_deliveries`.

    ``expect`` before (or right after) publishing; ``observe`` every message a
    subscriber reads; ``result`` at the end. A delivery observed twice counts
    one duplicate; one that was never expected counts as unexpected (wrong
    subscriber, wrong channel, wrong kind, or a foreign payload)."""

    def __init__(self, max_examples: int = 10) -> None:
        self._expected: set[Delivery] = set()
        self._seen: Counter[Delivery] = Counter()
        self._unexpected = 0
        self._pending = 0
        self._latencies_ms: list[float] = []
        self._max_examples = max_examples
        self.examples: list[str] = []

    def _example(self, text: str) -> None:
        if len(self.examples) < self._max_examples:
            self.examples.append(text)

    def expect(self, deliveries: Iterable[Delivery]) -> None:
        for d in deliveries:
            if d not in self._expected:
                self._expected.add(d)
                if self._seen[d] == 0:
                    self._pending += 1

    def observe(
        self,
        sub_id: str,
        kind: str,
        channel: str,
        payload: bytes,
        pattern: str | None = None,
        received_ns: int | None = None,
    ) -> None:
        """One message as a client got it: ``kind`` message/pmessage/smessage."""
        try:
            msg_id, sent_ns = parse_payload(payload)
        except ValueError:
            self._unexpected += 1
            self._example(f"{sub_id}: foreign payload {payload[:30]!r}")
            return
        via = f"pmessage:{pattern}" if kind == "pmessage" else kind
        d = Delivery(sub_id, msg_id, via, channel)
        self._seen[d] += 1
        if d not in self._expected:
            self._unexpected += 1
            self._example(f"unexpected {d}")
        elif self._seen[d] == 1:
            self._pending -= 1
            now = time.time_ns() if received_ns is None else received_ns
            self._latencies_ms.append((now - sent_ns) / 1e6)
        else:
            self._example(f"duplicate {d}")

    def outstanding(self) -> int:
        """Expected deliveries not yet observed."""
        return self._pending

    def delivered(self) -> int:
        """Expected deliveries observed at least once."""
        return len(self._expected) - self._pending

    def missing(self) -> Iterator[Delivery]:
        return (d for d in self._expected if self._seen[d] == 0)

    def result(self) -> VerifyResult:
        dup = sum(n - 1 for d, n in self._seen.items() if n > 1 and d in self._expected)
        lost = list(self.missing())
        for d in lost[:3]:
            self._example(f"lost {d}")
        return VerifyResult(
            expected=len(self._expected),
            delivered=self.delivered(),
            lost=len(lost),
            duplicated=dup,
            unexpected=self._unexpected,
            latencies_ms=list(self._latencies_ms),
            examples=list(self.examples),
        )
