"""The demo's workload driver: the asyncio part that talks to the cluster.

It plans the workload (each PUBLISH with the deliveries and the PUBLISH reply
the oracle expects), probes the subscribe-to-remote-delivery delay, then runs
every phase through redis-py: subscription changes (each confirmed, so subscribe
visibility has spread them), paced publishes from every node, and a drain
before the next phase. It measures and records; judging what it recorded is
:mod:`bloomcast.demo.checks`' job, so a check can change without touching the
driver.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from rich.progress import Progress

    from bloomcast.demo.workload import (
        Change,
        Delivery,
        DeliveryVerifier,
        Publish,
        RoutingExpectation,
        Workload,
    )
    from bloomcast.testing import LocalCluster

#: how long a phase may take to drain its deliveries before they count as lost
DRAIN_TIMEOUT = 15.0
#: after the last expected delivery, keep reading this long to catch duplicates
DRAIN_GRACE = 0.15
#: per-subscriber confirmation wait (the node's visibility timeout is shorter)
CONFIRM_TIMEOUT = 15.0
VISIBILITY_TIMEOUT_MS = 5000


@dataclass
class DriveResult:
    """What the asyncio part measured."""

    verify: Any = None  # VerifyResult
    reply_mismatches: int = 0
    reply_examples: list[str] = field(default_factory=list)
    routing: Any = None  # RoutingExpectation
    timeline: list[dict[str, Any]] = field(default_factory=list)
    probe_total_ms: list[float] = field(default_factory=list)
    probe_confirm_ms: list[float] = field(default_factory=list)
    probe_after_confirm_ms: list[float] = field(default_factory=list)
    probe_failures: int = 0
    probe_order_violations: int = 0
    bloom_fp_from_fill: float = 0.0
    filters: list[dict[str, float]] = field(default_factory=list)
    counters_before: dict[str, int] = field(default_factory=dict)
    counters_after: dict[str, int] = field(default_factory=dict)
    workload_seconds: float = 0.0
    channel_counts: Counter[str] = field(default_factory=Counter)
    #: the exact oracle of the live hot channels: per channel (PUBLISH, not
    #: SPUBLISH; probes too), the sum of 2^((t - HOT_EPOCH) / 60 s) over its
    #: publishes at monotonic times t (the node's clock: CLOCK_MONOTONIC)
    hot_exact: dict[str, float] = field(default_factory=dict)
    #: BLOOMCAST.HOTCHANNELS CLUSTER COUNT 10 at the end (name -> publishes/s, error/s)
    hot_live: list[tuple[str, float, float]] = field(default_factory=list)
    hot_at: float = 0.0  # monotonic time of that answer (the middle of its round trip)
    hot_wall: float = 0.0  # the same moment in Unix time (the Spark job's event times)
    hot_round_trip: float = 0.0  # seconds the answer took (each node read its clock within)
    hot_error: str = ""  # why there is none
    #: Unix time minus monotonic time when the run began, and how far that
    #: difference moved by the live answer (NTP slews the Unix clock only)
    clock_offset: float = field(default_factory=lambda: time.time() - time.monotonic())
    clock_drift: float = 0.0
    #: channels the demo SPUBLISHed (the Spark job's ``channels`` counts them
    #: too; the live summary keeps them apart, KIND shard)
    spublished: set[str] = field(default_factory=set)

    def published(self, channel: str) -> None:
        """One PUBLISH to ``channel`` now, in the oracle."""
        w = math.exp2((time.monotonic() - HOT_EPOCH) / HOT_HALF_LIFE)
        self.hot_exact[channel] = self.hot_exact.get(channel, 0.0) + w

    def exact_rate(self, channel: str) -> float:
        """The oracle's 1 m decayed PUBLISH rate of ``channel`` at ``hot_at``, per
        second (the decayed count times ln 2 / half-life, as the node reports it)."""
        decay = math.exp2(-(self.hot_at - HOT_EPOCH) / HOT_HALF_LIFE)
        return self.hot_exact.get(channel, 0.0) * decay * math.log(2) / HOT_HALF_LIFE


#: the oracle's reference time (monotonic, when this module loads) and half-life
HOT_EPOCH = time.monotonic()
HOT_HALF_LIFE = 60.0


SUMMED_COUNTERS = (
    "cluster_stats_messages_publish_sent",
    "cluster_stats_messages_publish_received",
    "cluster_stats_false_positives_received",
    "cluster_stats_publish_suppressed",
    "cluster_stats_publish_held_no_link",
    "cluster_stats_publish_lost",
    "cluster_stats_publish_replayed",
    "cluster_stats_sequence_gaps",
    "cluster_subscribe_visibility_waits",
    "cluster_subscribe_visibility_timeouts",
    "cluster_stats_filter_deltas_sent",
    "cluster_stats_filter_resizes",
)


async def cluster_counters(clients: list[aioredis.Redis]) -> dict[str, int]:
    """The :data:`SUMMED_COUNTERS` summed over every node's CLUSTER INFO."""
    from bloomcast.testing import parse_info

    totals: dict[str, int] = dict.fromkeys(SUMMED_COUNTERS, 0)
    for r in clients:
        info = parse_info(await r.execute_command("CLUSTER", "INFO"))
        for key in SUMMED_COUNTERS:
            totals[key] += int(info.get(key, 0))
    return totals


async def filter_figures(clients: list[aioredis.Redis]) -> list[dict[str, float]]:
    """Each node's channel filter from INFO: m, k, fill ratio and the estimated
    false-positive rate (X/m)^k the node computes from its bits."""
    out = []
    for r in clients:
        info = await r.info()
        out.append(
            {
                "m": float(info.get("channel_filter_m", 0)),
                "k": float(info.get("channel_filter_k", 0)),
                "fill_ratio": float(info.get("channel_filter_fill_ratio", 0.0)),
                "estimated_fp_rate": float(info.get("channel_filter_estimated_fp_rate", 0.0)),
            }
        )
    return out


class SubscriberConn:
    """One subscriber: a redis-py PubSub connection and the task reading it.

    Every message goes to the verifier; every (un)subscribe confirmation
    resolves the future of the change that asked for it."""

    _CONFIRM: ClassVar[dict[tuple[str, str], str]] = {
        ("subscribe", "channel"): "subscribe",
        ("subscribe", "pattern"): "psubscribe",
        ("subscribe", "shard"): "ssubscribe",
        ("unsubscribe", "channel"): "unsubscribe",
        ("unsubscribe", "pattern"): "punsubscribe",
        ("unsubscribe", "shard"): "sunsubscribe",
    }

    def __init__(self, sub_id: str, client: aioredis.Redis, verifier: DeliveryVerifier) -> None:
        self.sub_id = sub_id
        self.pubsub = client.pubsub()
        self.verifier = verifier
        self.reader: asyncio.Task[None] | None = None
        self.pending: dict[tuple[str, str], list[asyncio.Future[None]]] = defaultdict(list)
        self.error: BaseException | None = None

    async def apply(self, change: Change) -> None:
        kind = self._CONFIRM[(change.action, change.target.kind)]
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending[(kind, change.target.name)].append(fut)
        await getattr(self.pubsub, kind)(change.target.name)
        if self.reader is None:
            self.reader = asyncio.create_task(self._read())
        await asyncio.wait_for(fut, CONFIRM_TIMEOUT)

    async def _read(self) -> None:
        try:
            while True:
                msg = await self.pubsub.get_message(timeout=None)
                if msg is None:
                    continue
                kind = msg["type"]
                channel = as_text(msg["channel"])
                if kind in ("message", "pmessage", "smessage"):
                    pattern = as_text(msg["pattern"]) if kind == "pmessage" else None
                    self.verifier.observe(self.sub_id, kind, channel, msg["data"], pattern)
                else:
                    waiting = self.pending.get((kind, channel))
                    if waiting:
                        fut = waiting.pop(0)
                        if not fut.done():
                            fut.set_result(None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # surfaced by the drive loop, never silent
            self.error = exc
            for futs in self.pending.values():
                for f in futs:
                    if not f.done():
                        f.set_exception(exc)

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader
        await self.pubsub.aclose()


def as_text(value: Any) -> str:
    """A reply field as text (redis-py gives bytes; odd bytes stay visible, escaped)."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


@dataclass
class PlannedPublish:
    pub: Publish
    deliveries: list[Delivery]
    local_receivers: int


def plan(
    workload: Workload, geometry: dict[int, Any]
) -> tuple[list[list[PlannedPublish]], list[RoutingExpectation]]:
    """Per phase: each PUBLISH with its expected deliveries and local receiver
    count, and the phase's routing expectation (exact minimum, broadcast, FP theory)."""
    from bloomcast.demo.workload import (
        RoutingExpectation,
        SubscriptionState,
        expected_deliveries,
        peer_fp_rates,
        routing_expectation,
    )

    state = SubscriptionState(workload.subscribers)
    phases, routing = [], []
    for phase in workload.phases:
        for c in phase.changes:
            state.apply(c)
        rates = peer_fp_rates(state, geometry)
        planned, expect = [], RoutingExpectation()
        for pub in phase.publishes:
            ds = expected_deliveries(state, pub)
            local = sum(1 for d in ds if state.subscribers[d.sub_id].node == pub.node)
            planned.append(PlannedPublish(pub, ds, local))
            expect.add(routing_expectation(state, pub, rates))
        phases.append(planned)
        routing.append(expect)
    return phases, routing


async def probe_subscribe_delay(clients: list[aioredis.Redis], i: int, result: DriveResult) -> None:
    """Trial ``i``: SUBSCRIBE a fresh channel on node i mod N while a client on the
    next node publishes to it in a loop (one round trip at a time); the delay
    runs from sending SUBSCRIBE to the first message (resolution: one PUBLISH
    round trip). No message within CONFIRM_TIMEOUT counts as a failed probe."""
    n = len(clients)
    sub, pub = clients[i % n], clients[(i + 1) % n]
    channel = f"probe:{i}"
    pubsub = sub.pubsub()
    stop = asyncio.Event()

    async def publish_loop() -> None:
        k = 0
        while not stop.is_set():
            result.published(channel)
            await pub.publish(channel, f"probe {k}")
            k += 1

    t0 = time.perf_counter()
    await pubsub.subscribe(channel)
    publisher = asyncio.create_task(publish_loop())
    t_confirm: float | None = None
    t_first: float | None = None
    try:
        async with asyncio.timeout(CONFIRM_TIMEOUT):
            while t_first is None:
                msg = await pubsub.get_message(timeout=None)
                if msg is None:
                    continue
                if msg["type"] == "subscribe":
                    t_confirm = time.perf_counter()
                elif msg["type"] == "message":
                    t_first = time.perf_counter()
                    if t_confirm is None:
                        # Redis always confirms a SUBSCRIBE before its first message
                        result.probe_order_violations += 1
    except TimeoutError:
        result.probe_failures += 1
    finally:
        stop.set()
        await publisher
        await pubsub.aclose()
    if t_first is None:
        return
    result.probe_total_ms.append((t_first - t0) * 1e3)
    if t_confirm is not None:
        result.probe_confirm_ms.append((t_confirm - t0) * 1e3)
        result.probe_after_confirm_ms.append((t_first - t_confirm) * 1e3)


@dataclass
class _Phases:
    """The phases' shared state while :func:`drive` runs them: the connections,
    the oracle's verifier, what is measured and the progress bars."""

    clients: list[aioredis.Redis]
    publishers: list[aioredis.Redis]
    subs: dict[str, SubscriberConn]
    verifier: DeliveryVerifier
    result: DriveResult
    progress: Progress
    t_pub: Any  # the progress bars' task ids
    t_del: Any
    payload_bytes: int
    per_node_rate: float
    expected_total: int = 0

    async def apply_changes(self, changes: Sequence[Change]) -> None:
        """Subscription changes, each confirmed (visibility: every peer has them);
        one subscriber's in order, the subscribers side by side."""
        by_sub: dict[str, list[Change]] = defaultdict(list)
        for c in changes:
            by_sub[c.sub_id].append(c)

        async def apply_all(sub_id: str, changes: list[Change]) -> None:
            for c in changes:
                await self.subs[sub_id].apply(c)

        await asyncio.gather(*(apply_all(s, cs) for s, cs in by_sub.items()))

    async def publish(self, phase_plan: list[PlannedPublish]) -> None:
        """The phase's publishes from every node, each node paced at its rate."""
        for pp in phase_plan:
            self.verifier.expect(pp.deliveries)
        self.expected_total += sum(len(pp.deliveries) for pp in phase_plan)
        self.progress.update(self.t_del, total=self.expected_total)
        by_node: dict[int, list[PlannedPublish]] = defaultdict(list)
        for pp in phase_plan:
            by_node[pp.pub.node].append(pp)
        t0 = asyncio.get_running_loop().time()
        await asyncio.gather(*(self._publish_node(n, items, t0) for n, items in by_node.items()))

    async def _publish_node(self, node: int, items: list[PlannedPublish], t0: float) -> None:
        from bloomcast.demo.workload import make_payload

        loop, result, r = asyncio.get_running_loop(), self.result, self.publishers[node]
        for i, pp in enumerate(items):
            delay = t0 + i / self.per_node_rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            payload = make_payload(pp.pub.msg_id, self.payload_bytes)
            if pp.pub.shard:
                result.spublished.add(pp.pub.channel)
                n = await r.execute_command("SPUBLISH", pp.pub.channel, payload)
            else:
                result.published(pp.pub.channel)
                n = await r.publish(pp.pub.channel, payload)
            result.channel_counts[pp.pub.channel] += 1
            if int(n) != pp.local_receivers:
                result.reply_mismatches += 1
                if len(result.reply_examples) < 5:
                    result.reply_examples.append(
                        f"{'SPUBLISH' if pp.pub.shard else 'PUBLISH'} {pp.pub.channel} "
                        f"on node {node} replied {n}, expected {pp.local_receivers}"
                    )
            self.progress.advance(self.t_pub)
            self.progress.update(self.t_del, completed=self.verifier.delivered())

    async def drain(self) -> None:
        """Every expected delivery of the phase arrives before the next changes
        (or DRAIN_TIMEOUT passes); a failed subscriber connection ends the run."""
        deadline = time.perf_counter() + DRAIN_TIMEOUT
        while self.verifier.outstanding() and time.perf_counter() < deadline:
            self.progress.update(self.t_del, completed=self.verifier.delivered())
            await asyncio.sleep(0.02)
        await asyncio.sleep(DRAIN_GRACE)
        self.progress.update(self.t_del, completed=self.verifier.delivered())
        errors = [s.error for s in self.subs.values() if s.error is not None]
        if errors:
            raise RuntimeError(f"a subscriber connection failed: {errors[0]!r}")

    async def record(
        self,
        phase_index: int,
        phase_plan: list[PlannedPublish],
        changes: int,
        expect: RoutingExpectation,
        last: dict[str, int],
        start: float,
    ) -> dict[str, int]:
        """The phase's row of the timeline, from the counters since ``last``; the
        counters now."""
        result = self.result
        now = await cluster_counters(self.clients)
        filters = await filter_figures(self.clients)
        # the filters' theory: every PUBLISH routed past a peer with no receiver
        # there is one trial of that peer's false-positive rate (from its fill)
        phase_fp = sum(
            n * filters[peer]["estimated_fp_rate"] for peer, n in expect.exposure.items()
        )
        result.bloom_fp_from_fill += phase_fp
        result.filters = filters
        sent = now["cluster_stats_messages_publish_sent"]
        result.timeline.append(
            {
                "t": round(time.perf_counter() - start, 3),
                "phase": phase_index,
                "publishes": len(phase_plan),
                "bus_sent": sent - last["cluster_stats_messages_publish_sent"],
                "exact_minimum": expect.exact_minimum,
                "broadcast": expect.broadcast,
                "changes": changes,
                "false_positives": now["cluster_stats_false_positives_received"]
                - last["cluster_stats_false_positives_received"],
                "bloom_fp_expected": phase_fp,
            }
        )
        return now


async def live_hot_channels(client: aioredis.Redis, result: DriveResult) -> None:
    """The cluster-wide top 10 by 1 m decayed PUBLISH rate, as a node answers it."""
    from bloomcast.dashboard.model import hot_rows

    t0, w0 = time.monotonic(), time.time()
    try:
        reply = await client.execute_command("BLOOMCAST.HOTCHANNELS", "CLUSTER", "COUNT", 10)
    except Exception as exc:  # judged by the check: no answer fails it
        result.hot_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return
    t1, w1 = time.monotonic(), time.time()
    result.hot_at, result.hot_wall, result.hot_round_trip = (t0 + t1) / 2, (w0 + w1) / 2, t1 - t0
    result.clock_drift = abs(result.hot_wall - result.hot_at - result.clock_offset)
    result.hot_live = [
        (r["name"], r.get("publishes") or 0.0, r.get("error") or 0.0) for r in hot_rows(reply)
    ]


async def drive(
    cluster: LocalCluster,
    workload: Workload,
    planned: list[list[PlannedPublish]],
    routing: list[RoutingExpectation],
    args: argparse.Namespace,
    progress: Progress,
) -> DriveResult:
    """Probe, then run every phase: changes (confirmed), publishes (paced), drain."""
    import redis.asyncio as aioredis

    from bloomcast.demo.workload import DeliveryVerifier, RoutingExpectation

    result = DriveResult()
    verifier = DeliveryVerifier()
    # one pool per node holds every subscriber of that node (a pub/sub
    # connection each) and the probes: redis-py 8's pools stop at 100 by default
    per_node = len(workload.subscribers) + 64
    clients = [
        aioredis.Redis(host=cluster.host, port=p, socket_timeout=30, max_connections=per_node)
        for p in cluster.ports
    ]
    publishers = [
        aioredis.Redis(host=cluster.host, port=p, socket_timeout=30) for p in cluster.ports
    ]
    subs = {
        s.sub_id: SubscriberConn(s.sub_id, clients[s.node], verifier) for s in workload.subscribers
    }
    t_probe = progress.add_task("subscribe-to-remote-delivery probes", total=args.probes)
    t_phase = progress.add_task("phases (join/leave, publish, drain)", total=len(planned))
    phases = _Phases(
        clients,
        publishers,
        subs,
        verifier,
        result,
        progress,
        t_pub=progress.add_task("PUBLISH", total=workload.total_publishes()),
        t_del=progress.add_task("deliveries verified", total=1),
        payload_bytes=workload.spec.payload_bytes,
        per_node_rate=max(args.rate / cluster.size, 0.1),
    )
    try:
        for i in range(args.probes):
            await probe_subscribe_delay(clients, i, result)
            progress.advance(t_probe)

        result.counters_before = await cluster_counters(clients)
        start = time.perf_counter()
        routing_total = RoutingExpectation()
        last = result.counters_before
        for phase, phase_plan, expect in zip(workload.phases, planned, routing, strict=True):
            await phases.apply_changes(phase.changes)
            await phases.publish(phase_plan)
            await phases.drain()
            last = await phases.record(
                phase.index, phase_plan, len(phase.changes), expect, last, start
            )
            routing_total.add(expect)
            progress.advance(t_phase)
        result.workload_seconds = time.perf_counter() - start
        result.counters_after = last
        await live_hot_channels(clients[0], result)
        result.routing = routing_total
        result.verify = verifier.result()
    finally:
        for s in subs.values():
            await s.close()
        for r in clients + publishers:
            await r.aclose()
    return result
