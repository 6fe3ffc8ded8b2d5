"""``bloomcast stats run`` once its flags are checked: the Spark session, the query,
the progress and the summary line (spark/stats_command.py checks the flags).
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

if TYPE_CHECKING:
    from pyspark.sql.session import SparkSession

    SparkBuilder = SparkSession.Builder


def source_text(args: argparse.Namespace) -> str:
    """What the job reads, for the progress line: the spool, or the nodes (no passwords)."""
    if args.nodes:
        from spark.spool_client import parse_nodes

        return "nodes " + ",".join(n.key for n in parse_nodes(args.nodes))
    return str(args.spool)


#: an exception line in a Python or JVM traceback (``pkg.Name: message``)
_EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception|Unreachable)): (.+)$")


def one_line(error: object) -> str:
    """One line of a failed query's (multi-line, Py4J-wrapped) error: the innermost
    ``Name: message`` of a traceback, else its first line."""
    text = str(error)
    found = [m for line in text.splitlines() if (m := _EXCEPTION_LINE.match(line))]
    if found:
        inner = found[-1]
        return f"{inner[1]}: {inner[2].strip()}"
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


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


def run_spark(
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
        progress.phase(f"starting the query over {source_text(args)}")
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
            print(f"bloomcast stats run: query failed: {one_line(error)}", file=sys.stderr)
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
