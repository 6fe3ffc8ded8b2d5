"""``bloomcast stats``: run the Spark job over a traffic spool, read its distributions.

    bloomcast stats run (--spool DIR | --nodes HOST:PORT,...) [--master local[*]]
                        [--half-life 1m,1h] [--redis URL] [--out DIR] [--checkpoint DIR]
                        [--once | --stream]
    bloomcast stats top DIST [-n 10] [--redis URL | --out DIR | --live HOST:PORT] [--json]

``DIST`` is ``<stat>:<half-life>`` (``channels:1m``, ``forwarded:1h``,
``receiver:1m``, ``false_positive:1m``, ``forwards:1m``) or a derived view:
``false_positive_rate:<h>`` (per node false_positive / receiver) and
``trending[:<short>/<long>]`` (each channel's share under the short half-life
over its share under the long one; default: shortest and longest found).
With ``--live`` the same table comes from a running node's
``BLOOMCAST.HOTCHANNELS CLUSTER`` (every node's summary merged; seconds
behind, not minutes): ``channels:10s|1m|10m`` and ``trending[:10s/10m]``.

pyspark is imported only inside :func:`run` (``configure`` stays light).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark.decay import parse_half_life

# ``stats top`` lives in spark.stats_top (re-exported: the demo reads Source and top_rows here)
from spark.stats_run import default_shuffle_partitions  # noqa: F401 (tests import it here)
from spark.stats_top import DEFAULT_OUT, Source, redis_errors, split_dist, top_rows  # noqa: F401

if TYPE_CHECKING:
    from pyspark.sql.session import SparkSession

    SparkBuilder = SparkSession.Builder


def configure(parser: argparse.ArgumentParser) -> None:
    """``bloomcast stats run`` (the streaming job) and ``bloomcast stats top``."""
    sub = parser.add_subparsers(dest="stats_command", metavar="{run,top}")
    _configure_run(sub.add_parser("run", help="run the Structured Streaming job over a spool"))
    t = sub.add_parser("top", help="print a distribution decayed to now")
    t.add_argument("dist", help="e.g. channels:1m, forwards:1h, false_positive_rate:1m, trending")
    t.add_argument("-n", type=int, default=10, help="rows to print")
    src = t.add_mutually_exclusive_group()
    src.add_argument("--redis", help="read from this Redis")
    src.add_argument("--out", help=f"read the job's files here (default {DEFAULT_OUT})")
    src.add_argument(
        "--live",
        metavar="HOST:PORT",
        help="ask a running node (client port) for the whole cluster's hot channels now "
        "(BLOOMCAST.HOTCHANNELS CLUSTER; AUTH from REDISCLI_AUTH)",
    )
    t.add_argument("--now", type=float, help="decay to this Unix time instead of now")
    t.add_argument("--json", action="store_true", help="print JSON rows instead of a table")


def _configure_run(r: argparse.ArgumentParser) -> None:
    """The job's source and sinks, then its streaming settings."""
    where = r.add_mutually_exclusive_group(required=True)
    where.add_argument("--spool", help="traffic spool directory (*.ndjson), local or shared")
    where.add_argument(
        "--nodes",
        metavar="HOST:PORT,...",
        help="read each node's spool over HTTP from its --metrics-port, no shared "
        "directory ([user:password@]host:port; offsets in the checkpoint, files "
        "deleted on the node once committed)",
    )
    r.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    r.add_argument("--half-life", default="1m,1h", help="comma-separated half-lives (1m,1h)")
    r.add_argument("--redis", help="write distributions to this Redis (redis://host:port/db)")
    r.add_argument(
        "--redis-layout",
        choices=("exact", "goforget"),
        default="exact",
        help="exact: float forward-decay counts (default); goforget: integer counts, "
        "_T = wall-clock time, EXPIRE, as bitly's goforget reads them",
    )
    r.add_argument("--out", help=f"write per-batch JSON/Parquet here (default {DEFAULT_OUT})")
    r.add_argument("--checkpoint", help="Spark checkpoint directory (default <out>/_checkpoint)")
    conflict = r.add_mutually_exclusive_group()
    conflict.add_argument(
        "--continue",
        dest="on_conflict",
        action="store_const",
        const="continue",
        help="the sinks hold another run's statistics: add this run to them",
    )
    conflict.add_argument(
        "--fresh",
        dest="on_conflict",
        action="store_const",
        const="fresh",
        help="the sinks hold another run's statistics: delete them first",
    )
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="process what is there, then stop")
    mode.add_argument("--stream", action="store_true", help="keep running (Ctrl-C stops)")
    _configure_streaming(r)


def _configure_streaming(r: argparse.ArgumentParser) -> None:
    """Micro-batches, event time, Spark's own settings."""
    r.add_argument(
        "--max-files-per-trigger",
        type=int,
        default=100,
        help="spool files read per micro-batch (Spark maxFilesPerTrigger, default 100)",
    )
    r.add_argument(
        "--dedup-window",
        default="10 minutes",
        help="watermark delay for dedup (default 10 minutes)",
    )
    r.add_argument(
        "--trigger-interval", default="5 seconds", help="micro-batch interval (default 5 seconds)"
    )
    r.add_argument(
        "--max-clock-skew",
        type=float,
        default=3600.0,
        help="seconds an event may be stamped after its spool file was written: "
        "applied at the file's write time and counted as clock-skewed (later: "
        "counted as too early, not applied; default 3600)",
    )
    r.add_argument(
        "--allowed-lateness",
        type=float,
        default=600.0,
        help="seconds behind the event-time watermark before an event counts as late "
        "(late events are still applied; default 600)",
    )
    r.add_argument(
        "--shuffle-partitions",
        type=int,
        default=None,
        help="spark.sql.shuffle.partitions of the job (default: the cores of a local[N] "
        "master, 8 on a cluster; fixed by a checkpoint's first run)",
    )
    r.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable), as spark-submit --conf",
    )
    r.add_argument(
        "--verbose",
        action="store_true",
        help="show Spark's and log4j's INFO logging (default: WARN and above)",
    )
    r.add_argument(
        "--clean-source",
        choices=("off", "delete", "archive"),
        default="off",
        help="what Spark does with processed spool files",
    )


def run(args: argparse.Namespace) -> int:
    if args.stats_command == "run":
        return _run_job(args)
    if args.stats_command == "top":
        from spark.stats_top import top

        return top(args)
    print("usage: bloomcast stats {run,top} ... (see --help)", file=sys.stderr)
    return 2


# -- stats run ------------------------------------------------------------------------


def _run_job(args: argparse.Namespace) -> int:
    """``stats run``; Ctrl-C at any point stops the query and exits 130.

    SIGINT only sets a flag: raised as KeyboardInterrupt inside a Py4J call (and
    PySpark's own handler, which cancels jobs from inside one) it leaves Py4J
    tracebacks and a half-stopped query behind.
    """
    stop = threading.Event()

    def on_sigint(_signum: int, _frame: object) -> None:
        stop.set()

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if main else None
    try:
        code = _run_job_until(args, stop, on_sigint if main else None)
    except KeyboardInterrupt:
        code = 130
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    if code == 130:
        print("bloomcast stats run: interrupted", file=sys.stderr)
    return code


def _run_job_until(
    args: argparse.Namespace, stop: threading.Event, handler: Callable[[int, Any], None] | None
) -> int:
    def fail(message: str, code: int = 2) -> int:
        print(f"bloomcast stats run: {message}", file=sys.stderr)
        return code

    missing = missing_spark()
    if missing:
        return fail(missing, 1)
    if args.spool and "://" not in args.spool and not os.path.isdir(args.spool):
        return fail(f"spool directory {args.spool} does not exist")
    try:
        half_lives = tuple(parse_half_life(h) for h in args.half_life.split(","))
        unreachable = nodes_unreachable(args.nodes, once=not args.stream)
    except ValueError as exc:
        return fail(str(exc))
    if unreachable:
        return fail(unreachable, 1)
    out = args.out if (args.out or args.redis) else DEFAULT_OUT
    checkpoint = args.checkpoint or str(Path(out or DEFAULT_OUT) / "_checkpoint")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from spark.job import JobConfig
    from spark.runs import RunConflict, open_sinks

    spool = args.spool or ""
    config = JobConfig(
        spool=os.path.abspath(spool) if spool and "://" not in spool else spool,
        nodes=args.nodes or "",
        checkpoint=checkpoint,
        half_lives=half_lives,
        redis_url=args.redis,
        redis_layout=args.redis_layout,
        out=out,
        once=not args.stream,
        max_files_per_trigger=args.max_files_per_trigger,
        dedup_window=args.dedup_window,
        trigger_interval=args.trigger_interval,
        clean_source=args.clean_source,
        max_clock_skew=args.max_clock_skew,
        allowed_lateness=args.allowed_lateness,
        on_conflict=args.on_conflict or "refuse",
    )
    try:
        sinks, check = open_sinks(config, checkpoint, args.on_conflict or "refuse")
    except RunConflict as exc:
        return fail(str(exc))
    except redis_errors() as exc:
        return fail(f"cannot reach Redis {args.redis}: {exc}", 1)
    from spark.run_progress import RunProgress
    from spark.stats_run import run_spark

    progress = RunProgress()
    try:
        code = run_spark(args, config, sinks, check, out, stop, handler, progress)
    finally:
        progress.close()
    if code == 0 and args.nodes:
        from spark.spool_client import release_committed

        release_committed(checkpoint, args.nodes)
    return code


def missing_spark() -> str | None:
    """The one line ``stats run`` prints when the ``spark`` extra is not installed."""
    import importlib.util

    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return (
                f"needs the spark extra ({module} is not installed): "
                "pip install 'bloomcast[spark]' (in a checkout: uv sync --extra spark)"
            )
    return None


def nodes_unreachable(nodes: str | None, once: bool) -> str | None:
    """With ``--nodes``: the first node whose spool cannot be listed (``--once`` only:
    a streaming job waits for it). ValueError for a malformed list."""
    if not nodes:
        return None
    from spark.spool_client import SpoolUnreachable, parse_nodes

    for node in parse_nodes(nodes):
        if not once:
            continue
        try:
            node.listing()
        except SpoolUnreachable as exc:
            return f"{exc} (is it started with --traffic-dir and --metrics-port?)"
    return None
