"""``bloomcast demo``: the whole product end to end on real processes.

    bloomcast demo [--nodes 5] [--duration 30s] [--out DIR] [--seed N]

1. Starts a local cluster of N ``bloomcast node`` processes
   (:class:`bloomcast.testing.LocalCluster`) with the traffic tap on
   and subscribe visibility on, and waits until every node holds every other
   node's filters (``cluster_filters_converged:1`` everywhere).
2. Measures the subscribe-to-remote-delivery delay: a fresh channel is
   subscribed on one node while a client on another node publishes to it in a
   loop; the clock runs from sending SUBSCRIBE to the first message.
3. Runs the :mod:`bench.workload` schedule through redis-py: hundreds of
   subscriber connections on every node (channels, patterns, shard channels)
   joining and leaving phase by phase, publishers on every node.
4. Verifies every delivery against the oracle (lost, duplicated, unexpected),
   each PUBLISH reply (local receivers) and the bus accounting: CLUSTER INFO
   ``cluster_stats_messages_publish_sent`` summed over the nodes against the
   exact-interest minimum and against Redis Cluster's broadcast (publishes x
   (N - 1)), false positives observed against the filters' theory.
5. Stops the cluster (the taps flush), runs ``bloomcast stats run --once`` over
   the spool on a local Spark, and prints hot channels, trending channels and
   per-node false-positive rates with their decayed counts.
6. Writes ``report.json`` and ``chart.png`` into ``--out``.

Exit code: 0 when every check passed, 1 when one failed, 2 when a part of
bloomcast the demo needs is not built, 130 on Ctrl-C. Every process the demo
starts (nodes, the Spark job) is stopped before it returns, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from rich.console import Console
    from rich.progress import Progress

    from bench.workload import (
        Change,
        Delivery,
        DeliveryVerifier,
        Publish,
        RoutingExpectation,
        Workload,
    )
    from bloomcast.testing import LocalCluster

#: modules the demo runs, with what they are, for the "not built yet" message
NEEDED = {
    "bloomcast.node_command": "the node agent (`bloomcast node`, router/)",
    "cluster_bus.bus": "the cluster bus (cluster_bus/)",
    "spark.stats_command": "the Spark statistics job (`bloomcast stats`, spark/)",
    "spark.tap": "the traffic tap (spark/tap.py)",
}

#: half-lives for the Spark job: a demo lasts seconds to minutes
SHORT_HALF_LIFE = "10s"
LONG_HALF_LIFE = "10m"
#: trending lists only channels with at least this share of the short-half-life traffic
TRENDING_MIN_SHARE = 0.01
#: how long a phase may take to drain its deliveries before they count as lost
DRAIN_TIMEOUT = 15.0
#: after the last expected delivery, keep reading this long to catch duplicates
DRAIN_GRACE = 0.15
#: per-subscriber confirmation wait (the node's visibility timeout is shorter)
CONFIRM_TIMEOUT = 15.0
VISIBILITY_TIMEOUT_MS = 5000


def parse_duration(text: str) -> float:
    """``"30s"``, ``"2m"``, ``"500ms"``, ``"45"`` (seconds) -> seconds (> 0)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text)
    if not m or float(m[1]) <= 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (e.g. 30s, 2m)")
    return float(m[1]) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[m[2] or "s"]


def configure(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--nodes", type=int, default=5, metavar="N", help="node processes (default 5)")
    add(
        "--duration",
        type=parse_duration,
        default=30.0,
        metavar="TIME",
        help="workload time: 30s, 2m, ... (default 30s)",
    )
    add("--out", default="bloomcast-demo", metavar="DIR", help="where report.json, chart.png, "
        "the spool and the node logs go (default ./bloomcast-demo)")  # fmt: skip
    add("--seed", type=int, default=1, metavar="N", help="workload seed (default 1)")
    add("--subscribers", type=int, default=300, metavar="N", help="subscriber connections "
        "(default 300)")  # fmt: skip
    add("--rate", type=float, default=100.0, metavar="R", help="PUBLISH/s, all publishers "
        "together (default 100)")  # fmt: skip
    add("--phase-seconds", type=float, default=3.0, metavar="S", help="seconds per join/leave "
        "phase (default 3)")  # fmt: skip
    add("--probes", type=int, default=20, metavar="N", help="subscribe-to-remote-delivery "
        "trials (default 20)")  # fmt: skip
    add("--filter-capacity", type=int, metavar="N", help="node flag: channels the first "
        "filter is sized for (default: the node's)")  # fmt: skip
    add("--filter-fp-rate", type=float, metavar="P", help="node flag: target false-positive "
        "rate per filter (default: the node's)")  # fmt: skip
    add("--master", default="local[2]", metavar="URL", help="Spark master for the statistics "
        "job (default local[2])")  # fmt: skip
    add("--skip-stats", action="store_true", help="do not run the Spark job")
    add("--no-progress", action="store_true", help="no live progress display")


def missing_parts() -> list[str]:
    """What the demo needs that is not importable yet (empty when all is there)."""
    out = []
    for module, what in NEEDED.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            out.append(f"{what} [{module}]")
    return out


# -- the run ---------------------------------------------------------------------------


@dataclass
class Check:
    ok: bool
    detail: str


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


SUMMED_COUNTERS = (
    "cluster_stats_messages_publish_sent",
    "cluster_stats_messages_publish_received",
    "cluster_stats_false_positives_received",
    "cluster_stats_publish_suppressed",
    "cluster_stats_publish_dropped_no_link",
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
                channel = _text(msg["channel"])
                if kind in ("message", "pmessage", "smessage"):
                    pattern = _text(msg["pattern"]) if kind == "pmessage" else None
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


def _text(value: Any) -> str:
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
    from bench.workload import (
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

    from bench.workload import DeliveryVerifier, RoutingExpectation, make_payload

    result = DriveResult()
    verifier = DeliveryVerifier()
    nodes = cluster.size
    clients = [aioredis.Redis(host=cluster.host, port=p, socket_timeout=30) for p in cluster.ports]
    publishers = [
        aioredis.Redis(host=cluster.host, port=p, socket_timeout=30) for p in cluster.ports
    ]
    subs = {
        s.sub_id: SubscriberConn(s.sub_id, clients[s.node], verifier) for s in workload.subscribers
    }
    total_pubs = workload.total_publishes()
    t_probe = progress.add_task("subscribe-to-remote-delivery probes", total=args.probes)
    t_phase = progress.add_task("phases (join/leave, publish, drain)", total=len(planned))
    t_pub = progress.add_task("PUBLISH", total=total_pubs)
    t_del = progress.add_task("deliveries verified", total=1)
    size = workload.spec.payload_bytes
    try:
        for i in range(args.probes):
            await probe_subscribe_delay(clients, i, result)
            progress.advance(t_probe)

        result.counters_before = await cluster_counters(clients)
        start = time.perf_counter()
        per_node_rate = max(args.rate / nodes, 0.1)
        routing_total = RoutingExpectation()
        last = result.counters_before
        expected_total = 0
        loop = asyncio.get_running_loop()
        for phase, phase_plan, expect in zip(workload.phases, planned, routing, strict=True):
            # 1. subscription changes, confirmed (visibility: every peer has them)
            by_sub: dict[str, list[Change]] = defaultdict(list)
            for c in phase.changes:
                by_sub[c.sub_id].append(c)

            async def apply_all(sub_id: str, changes: list[Change]) -> None:
                for c in changes:
                    await subs[sub_id].apply(c)

            await asyncio.gather(*(apply_all(s, cs) for s, cs in by_sub.items()))
            # 2. publishes from every node, paced
            for pp in phase_plan:
                verifier.expect(pp.deliveries)
            expected_total += sum(len(pp.deliveries) for pp in phase_plan)
            progress.update(t_del, total=expected_total)
            by_node: dict[int, list[PlannedPublish]] = defaultdict(list)
            for pp in phase_plan:
                by_node[pp.pub.node].append(pp)
            t0 = loop.time()

            async def publish_node(node: int, items: list[PlannedPublish], t0: float = t0) -> None:
                r = publishers[node]
                for i, pp in enumerate(items):
                    delay = t0 + i / per_node_rate - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    payload = make_payload(pp.pub.msg_id, size)
                    if pp.pub.shard:
                        n = await r.execute_command("SPUBLISH", pp.pub.channel, payload)
                    else:
                        n = await r.publish(pp.pub.channel, payload)
                    result.channel_counts[pp.pub.channel] += 1
                    if int(n) != pp.local_receivers:
                        result.reply_mismatches += 1
                        if len(result.reply_examples) < 5:
                            result.reply_examples.append(
                                f"{'SPUBLISH' if pp.pub.shard else 'PUBLISH'} {pp.pub.channel} "
                                f"on node {node} replied {n}, expected {pp.local_receivers}"
                            )
                    progress.advance(t_pub)
                    progress.update(t_del, completed=verifier.delivered())

            await asyncio.gather(*(publish_node(n, items) for n, items in by_node.items()))
            # 3. drain: every expected delivery of this phase arrives before the next changes
            deadline = time.perf_counter() + DRAIN_TIMEOUT
            while verifier.outstanding() and time.perf_counter() < deadline:
                progress.update(t_del, completed=verifier.delivered())
                await asyncio.sleep(0.02)
            await asyncio.sleep(DRAIN_GRACE)
            progress.update(t_del, completed=verifier.delivered())
            errors = [s.error for s in subs.values() if s.error is not None]
            if errors:
                raise RuntimeError(f"a subscriber connection failed: {errors[0]!r}")
            now = await cluster_counters(clients)
            filters = await filter_figures(clients)
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
                    "phase": phase.index,
                    "publishes": len(phase_plan),
                    "bus_sent": sent - last["cluster_stats_messages_publish_sent"],
                    "exact_minimum": expect.exact_minimum,
                    "broadcast": expect.broadcast,
                    "changes": len(phase.changes),
                    "false_positives": now["cluster_stats_false_positives_received"]
                    - last["cluster_stats_false_positives_received"],
                    "bloom_fp_expected": phase_fp,
                }
            )
            last = now
            routing_total.add(expect)
            progress.advance(t_phase)
        result.workload_seconds = time.perf_counter() - start
        result.counters_after = last
        result.routing = routing_total
        result.verify = verifier.result()
    finally:
        for s in subs.values():
            await s.close()
        for r in clients + publishers:
            await r.aclose()
    return result


# -- the Spark part --------------------------------------------------------------------


def run_stats_job(spool: Path, out: Path, master: str, log: Path) -> tuple[int, float, str]:
    """``bloomcast stats run --once`` over ``spool`` as a child process (killed on
    Ctrl-C); returns (exit code, seconds, last output line)."""
    cmd = [
        sys.executable, "-m", "bloomcast.cli", "stats", "run",
        "--spool", str(spool), "--out", str(out), "--once", "--master", master,
        "--half-life", f"{SHORT_HALF_LIFE},{LONG_HALF_LIFE}",
        "--shuffle-partitions", "2", "--max-files-per-trigger", "10000",
    ]  # fmt: skip
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    started = time.perf_counter()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
        try:
            code = proc.wait(timeout=600)
        except BaseException:
            # Ctrl-C or timeout: the whole process group (JVM included)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            raise
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
    return code, time.perf_counter() - started, lines[-1] if lines else ""


def stats_views(out: Path, node_names: dict[str, str], now: float) -> dict[str, Any]:
    """The Spark job's distributions (file sink under ``out``) decayed to ``now``
    (Unix seconds: the end of the workload, so the job's own run time does not
    decay the picture away)."""
    from spark.job import read_file_counters
    from spark.stats_command import Source, top_rows

    source = Source(None, str(out))
    views: dict[str, Any] = {"hot_dist": f"channels:{SHORT_HALF_LIFE}", "decayed_to": now}
    for key, dist, n in (
        ("hot_channels", f"channels:{SHORT_HALF_LIFE}", 10),
        ("trending", f"trending:{SHORT_HALF_LIFE}/{LONG_HALF_LIFE}", 10_000),
        ("false_positive_rate", f"false_positive_rate:{LONG_HALF_LIFE}", 20),
        ("forwards", f"forwards:{LONG_HALF_LIFE}", 2),
    ):
        try:
            columns, rows = top_rows(source, dist, n, now)
        except ValueError as exc:
            views[key] = []
            views[f"{key}_error"] = str(exc)
            continue
        out_rows: list[dict[str, Any]] = []
        for row in rows:
            d = dict(zip(columns, row, strict=True))
            if key == "trending" and float(row[1]) < TRENDING_MIN_SHARE:
                continue  # one recent PUBLISH on a quiet channel is not a trend
            if key == "trending" and len(out_rows) == 8:
                break
            if key == "false_positive_rate":
                d["node"] = node_names.get(str(d["node"]), str(d["node"]))
            out_rows.append(d)
        views[key] = out_rows
        views[f"{key}_dist"] = dist
    views["counters"] = read_file_counters(out)
    return views


# -- printing --------------------------------------------------------------------------


def _ms(p: dict[str, Any]) -> str:
    if not p.get("count"):
        return "n/a"
    return f"p50 {p['p50']:.2f} ms, p99 {p['p99']:.2f} ms (n={p['count']})"


def print_summary(console: Console, report: dict[str, Any]) -> None:
    from rich.table import Table

    d, bus, fp, lat = (report[k] for k in ("deliveries", "bus", "false_positives", "latency_ms"))
    fills = ", ".join(f"{f['fill_ratio']:.4f}" for f in fp.get("node_filters", [])) or "n/a"
    console.rule("[bold]bloomcast demo: results")
    console.print(
        f"messages delivered: [bold]{d['delivered']}[/] of {d['expected']} expected "
        f"(lost {d['lost']}, duplicated {d['duplicated']}, unexpected {d['unexpected']})"
    )
    console.print(
        f"bus PUBLISH messages: [bold]{bus['publish_sent']}[/] for {bus['publishes']} PUBLISH "
        f"({bus['per_publish']:.3f} per PUBLISH); Redis Cluster's broadcast would send "
        f"{bus['broadcast']} ({report['config']['nodes'] - 1} per PUBLISH): "
        f"[bold]{bus['ratio_vs_broadcast']:.3f}x[/] of broadcast, "
        f"{bus['broadcast'] / max(1, bus['publish_sent']):.2f}x fewer; "
        f"exact-interest minimum {bus['exact_minimum']}"
    )
    console.print(
        f"false-positive forwards: observed [bold]{fp['observed']}[/]; theory "
        f"{fp['expected_total']:.3g} = {fp['expected_prefix']} pattern-prefix forwards "
        f"+ {fp['expected_bloom']:.3g} Bloom false positives ({fp['trials']} PUBLISH routed "
        f"past peers without a receiver; filter fill {fills})"
    )
    console.print(f"subscribe-to-remote-delivery delay: {_ms(lat['subscribe_to_remote_delivery'])}")
    console.print(f"  of which SUBSCRIBE confirmation: {_ms(lat['subscribe_confirmation'])}")
    if lat["probes_message_before_confirmation"]:
        console.print(
            f"[yellow]warning: in {lat['probes_message_before_confirmation']} probe(s) a message "
            "arrived before the SUBSCRIBE confirmation (Redis confirms first)[/]"
        )
    console.print(f"publish-to-delivery latency: {_ms(lat['publish_to_delivery'])}")
    stats = report.get("stats") or {}
    if stats.get("hot_channels"):
        for key, title in (
            ("hot_channels", "hot channels"),
            ("trending", f"trending channels (>= {TRENDING_MIN_SHARE:.0%} of recent traffic)"),
            ("false_positive_rate", "per-node false-positive rate"),
            ("forwards", "forwards sent vs saved (decayed)"),
        ):
            rows = stats.get(key) or []
            if not rows:
                continue
            table = Table(title=f"{title} — Spark {stats.get(key + '_dist', '')}")
            cols = list(rows[0])
            for i, c in enumerate(cols):
                table.add_column(c, justify="left" if i == 0 else "right")
            for r in rows:
                table.add_row(
                    *(
                        v if isinstance(v, str) else ("inf" if v is None else f"{v:.4g}")
                        for v in r.values()
                    )
                )
            console.print(table)
    table = Table(title="checks")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail")
    for name, c in report["checks"].items():
        table.add_row(name, "[green]ok[/]" if c["ok"] else "[red]FAILED[/]", c["detail"])
    console.print(table)


# -- the command -----------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    missing = missing_parts()
    if missing:
        console.print("[red]bloomcast demo: cannot run yet; not built:[/]")
        for m in missing:
            console.print(f"  - {escape(m)}")
        return 2
    if args.nodes < 2:
        console.print("[red]bloomcast demo: --nodes must be >= 2 (a cluster)[/]")
        return 2
    try:
        return _run(args, console)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: every process the demo started was stopped[/]")
        return 130


def _log_tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _run(args: argparse.Namespace, console: Console) -> int:
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from bench.report import percentiles, plot_chart, write_report
    from bench.workload import FilterGeometry, Workload, WorkloadSpec
    from bloomcast.testing import LocalCluster
    from router.config import NodeConfig

    out = Path(args.out)
    spool, stats_out, logs = out / "spool", out / "stats", out / "logs"
    for d in (spool, stats_out, logs):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)

    phases = max(2, round(args.duration / args.phase_seconds))
    per_phase = max(1, round(args.rate * args.duration / phases))
    spec = WorkloadSpec(
        nodes=args.nodes,
        subscribers=args.subscribers,
        phases=phases,
        publishes_per_phase=per_phase,
        seed=args.seed,
    )
    workload = Workload(spec)
    defaults = NodeConfig()
    capacity = args.filter_capacity or defaults.filter_capacity
    fp_rate = args.filter_fp_rate or defaults.filter_fp_rate
    geometry = {n: FilterGeometry.for_capacity(capacity, fp_rate) for n in range(args.nodes)}
    planned, routing = plan(workload, geometry)
    console.print(
        f"[bold]bloomcast demo[/]: {args.nodes} nodes, {len(workload.subscribers)} subscribers, "
        f"{phases} phases, {workload.total_publishes()} PUBLISH over ~{args.duration:g}s "
        f"(seed {args.seed}); output in {out}/"
    )
    t_start = time.perf_counter()
    extra = ["--subscribe-visibility-timeout", str(VISIBILITY_TIMEOUT_MS)]
    if args.filter_capacity is not None:
        extra += ["--filter-capacity", str(args.filter_capacity)]
    if args.filter_fp_rate is not None:
        extra += ["--filter-fp-rate", str(args.filter_fp_rate)]
    cluster = LocalCluster(args.nodes, traffic_dir=spool, log_dir=logs, extra_args=extra)
    try:
        try:
            cluster.start()
        except (TimeoutError, RuntimeError) as exc:
            console.print(f"[red]bloomcast demo: the cluster did not start: {escape(str(exc))}[/]")
            for i in range(args.nodes):
                tail = _log_tail(logs / f"node-{i}.log")
                if tail:
                    console.print(f"node {i} log ({logs / f'node-{i}.log'}), last lines:")
                    console.print(escape(tail), highlight=False)
                    break
            return 1
        console.print(
            f"cluster ready in {time.perf_counter() - t_start:.1f}s: every node holds every "
            f"other node's filters (client ports {cluster.ports})"
        )
        node_ids = {}
        for i in range(args.nodes):
            with cluster.client(i) as r:
                node_ids[_text(r.execute_command("CLUSTER", "MYID"))] = f"node {i}"
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=args.no_progress,
        )
        with progress:
            result = asyncio.run(drive(cluster, workload, planned, routing, args, progress))
        alive = [cluster.alive(i) for i in range(args.nodes)]
        workload_end = time.time()
    finally:
        cluster.stop()
    # the nodes are stopped: their taps have flushed and renamed every spool file
    stats: dict[str, Any] = {}
    checks: dict[str, Check] = {}
    if not args.skip_stats:
        what = f"running the Spark statistics job over {spool}/ (master {args.master})"
        console.print(f"{what} ...")
        status = console.status(what) if not args.no_progress else contextlib.nullcontext()
        with status:
            code, seconds, last = run_stats_job(spool, stats_out, args.master, out / "stats.log")
        stats = stats_views(stats_out, node_ids, workload_end) if code == 0 else {}
        stats["exit_code"], stats["seconds"], stats["last_line"] = code, round(seconds, 1), last
        events = stats.get("counters", {}).get("events", 0)
        checks["spark job"] = Check(
            code == 0 and events > 0 and bool(stats.get("hot_channels")),
            f"exit {code} in {seconds:.1f}s, {events} events, "
            f"{len(stats.get('hot_channels', []))} hot channels (log: {out / 'stats.log'})",
        )

    report = build_report(args, workload, result, stats, checks, alive, percentiles)
    write_report(report, out / "report.json")
    plot_chart(report, out / "chart.png")
    report["files"] = {"report": str(out / "report.json"), "chart": str(out / "chart.png")}
    print_summary(console, report)
    console.print(
        f"wrote {out / 'report.json'} and {out / 'chart.png'} "
        f"in {time.perf_counter() - t_start:.0f}s total"
    )
    return 0 if report["ok"] else 1


def build_report(
    args: argparse.Namespace,
    workload: Workload,
    result: DriveResult,
    stats: dict[str, Any],
    checks: dict[str, Check],
    alive: list[bool],
    percentiles: Any,
) -> dict[str, Any]:
    v, rt = result.verify, result.routing
    before, after = result.counters_before, result.counters_after
    delta = {k: after[k] - before[k] for k in SUMMED_COUNTERS}
    sent = delta["cluster_stats_messages_publish_sent"]
    received = delta["cluster_stats_messages_publish_received"]
    fp = delta["cluster_stats_false_positives_received"]
    all_checks: dict[str, Check] = {
        "deliveries": Check(
            v.ok,
            f"{v.delivered}/{v.expected} delivered, lost {v.lost}, duplicated {v.duplicated}, "
            f"unexpected {v.unexpected}" + (f"; e.g. {v.examples[:3]}" if v.examples else ""),
        ),
        "PUBLISH replies": Check(
            result.reply_mismatches == 0,
            f"{result.reply_mismatches} replies differ from the local receiver count"
            + (f"; e.g. {result.reply_examples[:2]}" if result.reply_examples else ""),
        ),
        "fewer bus messages than broadcast": Check(
            sent < rt.broadcast, f"{sent} bus PUBLISH messages vs broadcast {rt.broadcast}"
        ),
        "bus accounting": Check(
            received == sent and sent == rt.exact_minimum + fp,
            f"sent {sent} = received {received} = exact minimum {rt.exact_minimum} "
            f"+ false positives {fp}",
        ),
        "subscribe visibility": Check(
            delta["cluster_subscribe_visibility_timeouts"] == 0,
            f"{delta['cluster_subscribe_visibility_waits']} waits, "
            f"{delta['cluster_subscribe_visibility_timeouts']} timeouts",
        ),
        "no bus loss": Check(
            delta["cluster_stats_sequence_gaps"] == 0
            and delta["cluster_stats_publish_dropped_no_link"] == 0,
            f"{delta['cluster_stats_sequence_gaps']} sequence gaps, "
            f"{delta['cluster_stats_publish_dropped_no_link']} dropped for want of a link",
        ),
        "subscribe-to-remote-delivery probes": Check(
            result.probe_failures == 0,
            f"{len(result.probe_total_ms)} delivered, {result.probe_failures} not within "
            f"{CONFIRM_TIMEOUT:g}s",
        ),
        "nodes stayed up": Check(all(alive), f"{sum(alive)}/{len(alive)} alive at the end"),
    }
    all_checks.update(checks)
    return {
        "ok": all(c.ok for c in all_checks.values()),
        "checks": {k: asdict(c) for k, c in all_checks.items()},
        "config": {
            "nodes": args.nodes,
            "seconds": args.duration,
            "seed": args.seed,
            "subscribers": len(workload.subscribers),
            "phases": len(workload.phases),
            "publishes": workload.total_publishes(),
            "rate": args.rate,
            "subscribe_visibility_timeout_ms": VISIBILITY_TIMEOUT_MS,
            "workload": asdict(workload.spec),
        },
        "deliveries": {
            "expected": v.expected,
            "delivered": v.delivered,
            "lost": v.lost,
            "duplicated": v.duplicated,
            "unexpected": v.unexpected,
            "examples": v.examples,
        },
        "bus": {
            "publishes": rt.publishes,
            "publish_sent": sent,
            "publish_received": received,
            "per_publish": sent / rt.publishes if rt.publishes else 0.0,
            "broadcast": rt.broadcast,
            "exact_minimum": rt.exact_minimum,
            "ratio_vs_broadcast": sent / rt.broadcast if rt.broadcast else 0.0,
            "suppressed": delta["cluster_stats_publish_suppressed"],
            "filter_deltas_sent": delta["cluster_stats_filter_deltas_sent"],
            "filter_resizes": delta["cluster_stats_filter_resizes"],
        },
        "false_positives": {
            "observed": fp,
            "expected_prefix": rt.prefix_forwards,
            # sum over PUBLISH of each uninterested peer's (X/m)^k, X/m read from the node
            "expected_bloom": result.bloom_fp_from_fill,
            # the same with (1 - e^(-kn/m))^k, n = the peer's distinct channels, at the
            # configured first filter size
            "expected_bloom_formula": rt.bloom_fp_expected,
            "expected_total": rt.prefix_forwards + result.bloom_fp_from_fill,
            "trials": sum(rt.exposure.values()),
            "node_filters": result.filters,
        },
        "latency_ms": {
            "publish_to_delivery": percentiles(v.latencies_ms),
            "subscribe_to_remote_delivery": percentiles(result.probe_total_ms),
            "subscribe_confirmation": percentiles(result.probe_confirm_ms),
            "confirmation_to_remote_delivery": percentiles(result.probe_after_confirm_ms),
            "probes_message_before_confirmation": result.probe_order_violations,
        },
        "workload": {
            "seconds": round(result.workload_seconds, 2),
            "top_channels": result.channel_counts.most_common(10),
        },
        "timeline": result.timeline,
        "stats": stats,
    }


def _main() -> int:  # python -m bench.demo
    parser = argparse.ArgumentParser(prog="bloomcast demo")
    configure(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(_main())
