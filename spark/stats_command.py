"""``bloomcast stats``: run the Spark job over a traffic spool, read its distributions.

    bloomcast stats run --spool DIR [--master local[*]] [--half-life 1m,1h]
                        [--redis URL] [--out DIR] [--checkpoint DIR] [--once | --stream]
    bloomcast stats top DIST [-n 10] [--redis URL | --out DIR] [--json]

``DIST`` is ``<stat>:<half-life>`` (``channels:1m``, ``forwarded:1h``,
``receiver:1m``, ``false_positive:1m``, ``forwards:1m``) or a derived view:
``false_positive_rate:<h>`` (per node false_positive / receiver) and
``trending[:<short>/<long>]`` (each channel's share under the short half-life
over its share under the long one; default: shortest and longest found).

pyspark is imported only inside :func:`run` (``configure`` stays light).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark.decay import parse_half_life

# ``stats top`` lives in spark.stats_top (re-exported: the demo reads Source and top_rows here)
from spark.stats_top import DEFAULT_OUT, Source, split_dist, top_rows  # noqa: F401

if TYPE_CHECKING:
    from pyspark.sql.session import SparkSession

    SparkBuilder = SparkSession.Builder


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="stats_command", metavar="{run,top}")
    r = sub.add_parser("run", help="run the Structured Streaming job over a spool")
    r.add_argument("--spool", required=True, help="traffic spool directory (*.ndjson)")
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
    t = sub.add_parser("top", help="print a distribution decayed to now")
    t.add_argument("dist", help="e.g. channels:1m, forwards:1h, false_positive_rate:1m, trending")
    t.add_argument("-n", type=int, default=10, help="rows to print")
    src = t.add_mutually_exclusive_group()
    src.add_argument("--redis", help="read from this Redis")
    src.add_argument("--out", help=f"read the job's files here (default {DEFAULT_OUT})")
    t.add_argument("--now", type=float, help="decay to this Unix time instead of now")
    t.add_argument("--json", action="store_true", help="print JSON rows instead of a table")


def run(args: argparse.Namespace) -> int:
    if args.stats_command == "run":
        return _run_job(args)
    if args.stats_command == "top":
        from spark.stats_top import top

        return top(args)
    print("usage: bloomcast stats {run,top} ... (see --help)", file=sys.stderr)
    return 2


# -- stats run ------------------------------------------------------------------------


#: log4j2 configuration of a quiet driver: WARN and above, to stderr (without
#: --verbose); also keeps Spark from printing its "default log4j profile" notices
QUIET_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""


def _quiet(builder: SparkBuilder, user_conf: list[str]) -> SparkBuilder:
    """Spark and log4j below WARN, pandas' version warning and Py4J's own logging hidden."""
    import logging
    import tempfile
    import warnings

    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    if any(c.startswith("spark.driver.extraJavaOptions=") for c in user_conf):
        return builder
    fd, path = tempfile.mkstemp(prefix="bloomcast-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w") as f:
        f.write(QUIET_LOG4J2)
    return builder.config(
        "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{path}"
    )


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
    if "://" not in args.spool and not os.path.isdir(args.spool):
        print(f"bloomcast stats run: spool directory {args.spool} does not exist", file=sys.stderr)
        return 2
    try:
        half_lives = tuple(parse_half_life(h) for h in args.half_life.split(","))
    except ValueError as exc:
        print(f"bloomcast stats run: {exc}", file=sys.stderr)
        return 2
    out = args.out if (args.out or args.redis) else DEFAULT_OUT
    checkpoint = args.checkpoint or str(Path(out or DEFAULT_OUT) / "_checkpoint")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from spark.job import JobConfig
    from spark.runs import RunConflict, open_sinks

    config = JobConfig(
        spool=os.path.abspath(args.spool) if "://" not in args.spool else args.spool,
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
        print(f"bloomcast stats run: {exc}", file=sys.stderr)
        return 2
    from spark.run_progress import RunProgress

    progress = RunProgress()
    try:
        return _run_spark(args, config, sinks, check, out, stop, handler, progress)
    finally:
        progress.close()


def _run_spark(
    args: argparse.Namespace,
    config: Any,
    sinks: Any,
    check: Any,
    out: str | None,
    stop: threading.Event,
    handler: Callable[[int, Any], None] | None,
    progress: Any,
) -> int:
    from pyspark.sql import SparkSession

    from spark.job import BatchResult, start_query

    progress.phase(f"starting Spark (master {args.master})")
    # an embedding process (tests, a notebook) may already run a session: reuse, don't stop it
    owned = SparkSession.getActiveSession() is None
    builder = SparkSession.builder.master(args.master)
    if args.master.startswith("local") and "SPARK_LOCAL_IP" not in os.environ:
        # local mode needs no network: keep the driver on loopback
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    if not args.verbose:
        builder = _quiet(builder, args.conf)
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"bloomcast stats run: --conf expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        builder = builder.config(key, value)
    spark = (
        builder.appName("bloomcast-stats")
        .config("spark.ui.showConsoleProgress", "false")
        .config(
            "spark.sql.shuffle.partitions",
            str(args.shuffle_partitions or default_shuffle_partitions(args.master)),
        )
        .getOrCreate()
    )
    if handler is not None:
        signal.signal(signal.SIGINT, handler)  # PySpark's context installed its own
    spark.sparkContext.setLogLevel("INFO" if args.verbose else "WARN")
    totals = dict.fromkeys(("batches", "events", "late", "skewed", "early", "malformed"), 0)
    totals["replayed"] = 0

    def on_batch(batch_id: int, result: BatchResult) -> None:
        if result.events + result.early + result.malformed == 0:
            return  # a no-data batch Spark runs for its dedup state: nothing to report
        if not result.applied:
            # a replay after a crash-restart that the sinks already held: not counted
            totals["replayed"] += 1
            progress.batch(f"batch {batch_id}: already applied before a restart, skipped")
            return
        totals["batches"] += 1
        for key in ("events", "late", "skewed", "early", "malformed"):
            totals[key] += getattr(result, key)
        progress.batch(
            f"batch {batch_id}: {result.events} events ({result.late} late, "
            f"{result.skewed} clock-skewed), "
            f"{result.early} too early, {result.malformed} malformed, "
            f"{sum(len(b) for b in result.dists.values())} bins"
        )

    started = time.perf_counter()
    interrupted = stop.is_set()
    try:
        if interrupted:
            return 130
        progress.phase(f"starting the query over {args.spool}")
        query = start_query(spark, config, sinks, on_batch=on_batch)
        progress.phase("reading the spool")
        while query.isActive and not stop.is_set():
            query.awaitTermination(1)
            status = query.status if query.isActive else {}
            progress.tick(
                str(status.get("message", "")) or "running", totals["batches"], totals["events"]
            )
        interrupted = stop.is_set()
        if interrupted:
            _stop_between_batches(query)
        error = None if interrupted else query.exception()
        if error is not None:
            print(f"bloomcast stats run: query failed: {error}", file=sys.stderr)
            return 1
    finally:
        if owned:
            spark.stop()
    elapsed = time.perf_counter() - started
    where = " and ".join(x for x in (args.redis, out and str(Path(out) / "batches")) if x)
    print(summary_line(totals, elapsed, where) + f" (run {check.run})")
    return 130 if interrupted else 0


def default_shuffle_partitions(master: str) -> int:
    """One shuffle partition per local core (``local[N]``: N; ``local[*]``: the CPUs;
    ``local``: 1), 8 on a cluster. Each partition is a dedup state store that every
    micro-batch loads and commits, so extra partitions are fixed cost per batch."""
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master)
    if m is None:
        return 8
    if m[1] is None:
        return 1
    return (os.cpu_count() or 2) if m[1] == "*" else max(1, int(m[1]))


def _stop_between_batches(query: Any, patience: float = 60.0) -> None:
    """Stop the query when no micro-batch is running (at most ``patience`` s later):
    interrupting one mid-batch leaves JVM stack traces on stderr."""
    deadline = time.monotonic() + patience
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.1)
    query.stop()


def summary_line(totals: dict[str, int], elapsed: float, where: str) -> str:
    """The run summary: what was applied (replays the sinks skipped are not counted)."""
    replayed = f", {totals['replayed']} replayed batches skipped" if totals["replayed"] else ""
    return (
        f"{totals['batches']} batches, {totals['events']} events applied "
        f"({totals['late']} late, {totals['skewed']} clock-skewed), "
        f"{totals['early']} too early (not applied), "
        f"{totals['malformed']} malformed lines{replayed} in {elapsed:.1f}s -> {where}"
    )
