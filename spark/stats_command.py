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
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from spark.decay import decay_rate, decay_to, parse_half_life

DEFAULT_OUT = "bloomcast-stats"


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="stats_command", metavar="{run,top}")
    r = sub.add_parser("run", help="run the Structured Streaming job over a spool")
    r.add_argument("--spool", required=True, help="traffic spool directory (*.ndjson)")
    r.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    r.add_argument("--half-life", default="1m,1h", help="comma-separated half-lives (1m,1h)")
    r.add_argument("--redis", help="write distributions to this Redis (redis://host:port/db)")
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
        help="seconds an event may be stamped after its spool file was written "
        "(later: counted as too early, not applied; default 3600)",
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
        default=8,
        help="spark.sql.shuffle.partitions of the job (default 8: a small cluster)",
    )
    r.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable), as spark-submit --conf",
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
        return _top(args)
    print("usage: bloomcast stats {run,top} ... (see --help)", file=sys.stderr)
    return 2


# -- stats run ------------------------------------------------------------------------


def _run_job(args: argparse.Namespace) -> int:
    try:
        half_lives = tuple(parse_half_life(h) for h in args.half_life.split(","))
    except ValueError as exc:
        print(f"bloomcast stats run: {exc}", file=sys.stderr)
        return 2
    out = args.out if (args.out or args.redis) else DEFAULT_OUT
    checkpoint = args.checkpoint or str(Path(out or DEFAULT_OUT) / "_checkpoint")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from spark.job import BatchResult, JobConfig, start_query
    from spark.runs import RunConflict, open_sinks

    config = JobConfig(
        spool=os.path.abspath(args.spool) if "://" not in args.spool else args.spool,
        checkpoint=checkpoint,
        half_lives=half_lives,
        redis_url=args.redis,
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
    from pyspark.sql import SparkSession

    # an embedding process (tests, a notebook) may already run a session: reuse, don't stop it
    owned = SparkSession.getActiveSession() is None
    builder = SparkSession.builder.master(args.master)
    if args.master.startswith("local") and "SPARK_LOCAL_IP" not in os.environ:
        # local mode needs no network: keep the driver on loopback
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"bloomcast stats run: --conf expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        builder = builder.config(key, value)
    spark = (
        builder.appName("bloomcast-stats")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    totals = {"batches": 0, "events": 0, "late": 0, "early": 0, "malformed": 0, "replayed": 0}

    def on_batch(batch_id: int, result: BatchResult) -> None:
        if result.events + result.early + result.malformed == 0:
            return  # a no-data batch Spark runs for its dedup state: nothing to report
        if not result.applied:
            # a replay after a crash-restart that the sinks already held: not counted
            totals["replayed"] += 1
            print(f"batch {batch_id}: already applied before a restart, skipped", file=sys.stderr)
            return
        totals["batches"] += 1
        for key in ("events", "late", "early", "malformed"):
            totals[key] += getattr(result, key)
        print(
            f"batch {batch_id}: {result.events} events ({result.late} late), "
            f"{result.early} too early, {result.malformed} malformed, "
            f"{sum(len(b) for b in result.dists.values())} bins",
            file=sys.stderr,
        )

    started = time.perf_counter()
    try:
        query = start_query(spark, config, sinks, on_batch=on_batch)
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
        error = query.exception()
        if error is not None:
            print(f"bloomcast stats run: query failed: {error}", file=sys.stderr)
            return 1
    finally:
        if owned:
            spark.stop()
    elapsed = time.perf_counter() - started
    where = " and ".join(x for x in (args.redis, out and str(Path(out) / "batches")) if x)
    print(summary_line(totals, elapsed, where) + f" (run {check.run})")
    return 0


def summary_line(totals: dict[str, int], elapsed: float, where: str) -> str:
    """The run summary: what was applied (replays the sinks skipped are not counted)."""
    replayed = f", {totals['replayed']} replayed batches skipped" if totals["replayed"] else ""
    return (
        f"{totals['batches']} batches, {totals['events']} events applied "
        f"({totals['late']} late), {totals['early']} too early (not applied), "
        f"{totals['malformed']} malformed lines{replayed} in {elapsed:.1f}s -> {where}"
    )


# -- stats top ------------------------------------------------------------------------


def split_dist(dist: str) -> tuple[str, float]:
    """``channels:1m`` -> (``channels``, 60.0). Raises ValueError."""
    stat, sep, label = dist.rpartition(":")
    if not sep or not stat:
        raise ValueError(f"distribution {dist!r} has no half-life (e.g. channels:1m)")
    return stat, parse_half_life(label)


class Source:
    """Distributions written by the job, from Redis or from the file sink."""

    def __init__(self, redis_url: str | None, out: str | None) -> None:
        self.redis_url = redis_url
        self.out = out or DEFAULT_OUT
        self._files: dict[str, tuple[dict[str, float], float, float]] | None = None

    def load(self, dist: str) -> tuple[dict[str, float], float | None]:
        """bin -> decayed count at T, and T (None when the distribution is empty)."""
        if self.redis_url:
            import redis

            client = redis.Redis.from_url(self.redis_url, decode_responses=True)
            with client.pipeline(transaction=True) as pipe:
                pipe.zrange(dist, 0, -1, withscores=True)
                pipe.get(f"{dist}._T")
                pairs, raw_t = pipe.execute()
            client.close()
            return {b: float(s) for b, s in pairs}, (float(raw_t) if raw_t else None)
        if self._files is None:
            from spark.sinks import read_file_distributions

            self._files = read_file_distributions(self.out)
        counts, t, _h = self._files.get(dist, ({}, None, 0.0))
        return counts, t

    def names(self) -> list[str]:
        if self.redis_url:
            import redis

            client = redis.Redis.from_url(self.redis_url, decode_responses=True)
            found = [k for k in client.scan_iter(match="channels:*") if "._" not in k]
            client.close()
            return found
        if self._files is None:
            from spark.sinks import read_file_distributions

            self._files = read_file_distributions(self.out)
        return list(self._files)

    def decayed(self, dist: str, now: float) -> dict[str, float]:
        _stat, h = split_dist(dist)
        counts, t = self.load(dist)
        return decay_to(counts, t, decay_rate(h), now) if t is not None else {}


def top_rows(source: Source, dist: str, n: int, now: float) -> tuple[list[str], list[list[Any]]]:
    """(column names, rows) for ``stats top``; raises ValueError on an unknown view."""
    stat, _, label = dist.partition(":")
    if stat == "trending":
        if label:
            short_label, _, long_label = label.partition("/")
            short, long_ = f"channels:{short_label}", f"channels:{long_label}"
        else:
            found = sorted(
                (split_dist(d)[1], d) for d in source.names() if d.startswith("channels:")
            )
            if len(found) < 2:
                raise ValueError("trending needs channels under two half-lives")
            short, long_ = found[0][1], found[-1][1]
        s, lg = source.decayed(short, now), source.decayed(long_, now)
        zs, zl = sum(s.values()), sum(lg.values())
        rows: list[list[Any]] = []
        for ch in s:
            share_s = s[ch] / zs if zs else 0.0
            share_l = lg.get(ch, 0.0) / zl if zl else 0.0
            if share_s == 0.0:
                continue  # decayed away under both half-lives
            # a channel new since the long window has no long share: rank it first
            ratio = share_s / share_l if share_l else float("inf")
            rows.append([ch, share_s, share_l, ratio])
        rows.sort(key=lambda r: (-float(r[3]), -float(r[1]), str(r[0])))
        return ["channel", f"share {short}", f"share {long_}", "ratio"], rows[:n]
    if stat == "false_positive_rate":
        fp = source.decayed(f"false_positive:{label}", now)
        recv = source.decayed(f"receiver:{label}", now)
        rows = [
            [node, fp.get(node, 0.0), c, fp.get(node, 0.0) / c] for node, c in recv.items() if c > 0
        ]
        rows.sort(key=lambda r: (-float(r[3]), str(r[0])))
        return ["node", "false positives", "received", "false-positive rate"], rows[:n]
    _, h = split_dist(dist)
    counts = source.decayed(dist, now)
    z = sum(counts.values())
    a = decay_rate(h)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    # a decayed count C with rate a estimates an event rate of C * a per second
    return ["bin", "decayed count", "probability", "rate/s"], [
        [b, c, c / z if z else 0.0, c * a] for b, c in ranked
    ]


def _top(args: argparse.Namespace) -> int:
    now = args.now if args.now is not None else time.time()
    source = Source(args.redis, args.out)
    try:
        columns, rows = top_rows(source, args.dist, args.n, now)
    except ValueError as exc:
        print(f"bloomcast stats top: {exc}", file=sys.stderr)
        return 2
    if args.json:
        clean = [[None if x == float("inf") else x for x in r] for r in rows]
        print(json.dumps([dict(zip(columns, r, strict=True)) for r in clean]))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{args.dist} (decayed to {time.strftime('%H:%M:%S', time.localtime(now))})"
    )
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*(str(x) if isinstance(x, str) else f"{x:.6g}" for x in r))
    Console().print(table)
    return 0
