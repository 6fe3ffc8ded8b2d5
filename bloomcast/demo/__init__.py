"""``bloomcast demo``: the whole product end to end on real processes.

    bloomcast demo [--nodes 5] [--duration 30s] [--out DIR] [--seed N]

1. Starts a local cluster of N ``bloomcast node`` processes
   (:class:`bloomcast.testing.LocalCluster`) with the traffic tap on
   and subscribe visibility on, and waits until every node holds every other
   node's filters (``cluster_filters_converged:1`` everywhere).
2. Measures the subscribe-to-remote-delivery delay: a fresh channel is
   subscribed on one node while a client on another node publishes to it in a
   loop; the clock runs from sending SUBSCRIBE to the first message.
3. Runs the :mod:`bloomcast.demo.workload` schedule through redis-py: hundreds of
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

The modules, one job each: ``drive`` (the workload driver: subscribers,
planned publishes, the subscribe-delay probe), ``checks`` (the verdict and the
delivery ledger), ``stats_view`` (the Spark job and the views over its
output), ``summary`` (the console summary and the report), ``report`` (the
report and chart files). This module is the CLI glue: ``configure`` must stay
cheap (``bloomcast --help`` imports it), so everything else is imported in ``run``.

Exit code: 0 when every check passed, 1 when one failed, 2 when a part of
bloomcast the demo needs is not built, 130 on Ctrl-C. Every process the demo
starts (nodes, the Spark job) is stopped before it returns, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from bloomcast.demo.checks import Check
    from bloomcast.demo.drive import DriveResult

#: modules the demo runs, with what they are, for the "not built yet" message
NEEDED = {
    "bloomcast.node_command": "the node agent (`bloomcast node`, router/)",
    "cluster_bus.bus": "the cluster bus (cluster_bus/)",
    "spark.stats_command": "the Spark statistics job (`bloomcast stats`, spark/)",
    "spark.tap": "the traffic tap (spark/tap.py)",
}


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


def _node_flags(args: argparse.Namespace, visibility_timeout_ms: int) -> list[str]:
    """The flags every demo node starts with, beside LocalCluster's own."""
    extra = ["--subscribe-visibility-timeout", str(visibility_timeout_ms)]
    # a bus secret of its own, so no other local process can join (issue 14)
    extra += ["--cluster-secret", secrets.token_hex(16)]
    if args.filter_capacity is not None:
        extra += ["--filter-capacity", str(args.filter_capacity)]
    if args.filter_fp_rate is not None:
        extra += ["--filter-fp-rate", str(args.filter_fp_rate)]
    return extra


def _start_failed(console: Console, exc: Exception, logs: Path, nodes: int) -> None:
    """Say why the cluster did not start: the error, then the first node log with lines."""
    from rich.markup import escape

    console.print(f"[red]bloomcast demo: the cluster did not start: {escape(str(exc))}[/]")
    for i in range(nodes):
        tail = _log_tail(logs / f"node-{i}.log")
        if tail:
            console.print(f"node {i} log ({logs / f'node-{i}.log'}), last lines:")
            console.print(escape(tail), highlight=False)
            break


def _stats_job(
    args: argparse.Namespace,
    console: Console,
    out: Path,
    node_ids: dict[str, str],
    workload_end: float,
    result: DriveResult,
) -> tuple[dict[str, Any], dict[str, Check]]:
    """The Spark statistics job over the stopped nodes' spool: its views, its
    check and the live hot channels' against it (skipped, and said so, with
    ``--skip-stats``)."""
    from bloomcast.demo.checks import SPARK_HOT, Check, live_vs_spark, spark_check
    from bloomcast.demo.stats_view import run_stats_job, spark_rates, stats_views

    if args.skip_stats:
        why = "--skip-stats: the Spark job did not run, the live top 10 was not held to it"
        return {}, {SPARK_HOT: Check(True, f"skipped: {why}", skipped=True)}
    spool, stats_out = out / "spool", out / "stats"
    what = f"running the Spark statistics job over {spool}/ (master {args.master})"
    console.print(f"{what} ...")
    status = console.status(what) if not args.no_progress else contextlib.nullcontext()
    with status:
        code, seconds, last = run_stats_job(spool, stats_out, args.master, out / "stats.log")
    stats = stats_views(stats_out, node_ids, workload_end) if code == 0 else {}
    stats["exit_code"], stats["seconds"], stats["last_line"] = code, round(seconds, 1), last
    checks = {"spark job": spark_check(stats, code, seconds, out / "stats.log")}
    if code != 0:
        checks[SPARK_HOT] = Check(False, f"no Spark output to compare: the job exited {code}")
        return stats, checks
    # (name, live rate, Spark's, the stated bound) per live row, for the report
    rates, window_end = spark_rates(stats_out, result.hot_wall)
    checks[SPARK_HOT], stats["live_vs_spark"] = live_vs_spark(result, rates, window_end)
    return stats, checks


def _write_files(console: Console, report: dict[str, Any], out: Path) -> None:
    """report.json, then chart.png, which needs matplotlib, the ``bench``
    extra's (a node's install has no need of it): without it the report is
    whole and the chart left out, said in one line; then the summary."""
    from bloomcast.demo.report import plot_chart, write_report
    from bloomcast.demo.summary import print_summary

    write_report(report, out / "report.json")
    report["files"] = {"report": str(out / "report.json")}
    if importlib.util.find_spec("matplotlib") is not None:
        plot_chart(report, out / "chart.png")
        report["files"]["chart"] = str(out / "chart.png")
    print_summary(console, report)
    if "chart" not in report["files"]:
        console.print(
            "chart.png not drawn: matplotlib is not installed (pip install 'bloomcast[bench]')"
        )


def _run(args: argparse.Namespace, console: Console) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from bloomcast.demo.drive import VISIBILITY_TIMEOUT_MS, as_text, drive, plan
    from bloomcast.demo.summary import build_report
    from bloomcast.demo.workload import FilterGeometry, Workload, WorkloadSpec
    from bloomcast.testing import LocalCluster, free_ports
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
    extra = _node_flags(args, VISIBILITY_TIMEOUT_MS)
    metrics = free_ports(args.nodes)  # each node's Prometheus /metrics and /healthz
    cluster = LocalCluster(
        args.nodes, traffic_dir=spool, log_dir=logs, extra_args=extra, metrics_ports=metrics
    )
    try:
        try:
            cluster.start()
        except (TimeoutError, RuntimeError) as exc:
            _start_failed(console, exc, logs, args.nodes)
            return 1
        console.print(
            f"cluster ready in {time.perf_counter() - t_start:.1f}s: every node holds every "
            f"other node's filters (client ports {cluster.ports})"
        )
        console.print(f"Prometheus /metrics on ports {metrics}", highlight=False)
        node_ids = {}
        for i in range(args.nodes):
            with cluster.client(i) as r:
                node_ids[as_text(r.execute_command("CLUSTER", "MYID"))] = f"node {i}"
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
    stats, checks = _stats_job(args, console, out, node_ids, workload_end, result)

    report = build_report(args, workload, result, stats, checks, alive)
    _write_files(console, report, out)
    console.print(
        f"wrote {' and '.join(report['files'].values())} "
        f"in {time.perf_counter() - t_start:.0f}s total"
    )
    return 0 if report["ok"] else 1
