"""The Spark Structured Streaming job: traffic spool -> forward-decayed statistics.

Pipeline (one streaming query, checkpointed):

1. File source (``json``, the fixed schema of :data:`spark.events.SCHEMA_FIELDS`,
   PERMISSIVE) over ``<spool>/*.ndjson`` (``pathGlobFilter``; the tap's ``.tmp``
   files are never read), ``maxFilesPerTrigger`` files per micro-batch.
2. A line that is not JSON (a row of nulls), or lacks a usable ``event_id``/
   ``time``/``node``/``role``/``channel``, is *malformed*: it gets a key of its
   own (``uuid()``, so the same bad line twice counts twice), is counted per
   batch, and skipped.
   An event stamped more than ``max_clock_skew`` after its file's modification
   time is *too early*: counted (``early``), left out of the sums. One stamped
   after its file was written, but within ``max_clock_skew``, is *skewed*:
   counted (``skewed``) and applied at the file's write time, so it never
   weighs more than 1 at a later read (:mod:`spark.lateness`).
3. ``withWatermark(<batch time>, dedup_window)`` +
   ``dropDuplicatesWithinWatermark(event_id, node)``: a re-delivered event (a
   file copied twice, a replayed spool) is counted once if it arrives within
   ``dedup_window`` of wall-clock time of the first copy. The watermark is on
   processing time, so Spark never drops an event as late; event-time
   lateness is counted by the job itself (``late``, :mod:`spark.lateness`)
   and late events are included in the sums.
4. ``foreachBatch``: one row per spool file to the driver (counts, newest and
   median event time) gives each file its lateness threshold and moves the
   event-time watermark (:mod:`spark.lateness`); then per half-life ``h``
   (``a = ln 2 / h``) and distribution, ``S_b[bin] = sum w exp(a (t - T_b))``
   over the applied (on-time and late) events against the batch landmark
   ``T_b = ceil(max t)`` (see :mod:`spark.decay`), collected to the driver (one
   row per distribution bin), then written idempotently by the sinks
   (:mod:`spark.sinks`) under this checkpoint's run id (:mod:`spark.runs`):
   Redis (the batch id and run committed in the same MULTI/EXEC) and/or files
   (one file per run and batch id, renamed into place).

Distributions (``<stat>:<half-life label>``, e.g. ``channels:1m``):

- ``channels``       bin = channel, weight 1 per origin event (cluster-wide publish rate);
- ``forwarded``      bin = node, weight ``forwarded`` per origin event (traffic sent to peers);
- ``receiver``       bin = node, weight 1 per receiver event;
- ``false_positive`` bin = node, weight 1 per receiver event with ``false_positive``
  (``false_positive / receiver`` per node is the false-positive rate);
- ``forwards``       bins ``sent`` (weight ``forwarded``) and ``saved`` (weight
  ``peers - forwarded``) per origin event: forwards saved versus broadcast.

Trending channels (short vs long half-life share) are derived at read time
from two ``channels`` distributions (:mod:`spark.stats_command`).

Nothing here assumes local mode: all work is DataFrame operations (no Python
UDFs, so executors need no bloomcast code); only the per-bin aggregates reach
the driver, which writes the sinks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from spark.decay import decay_rate, half_life_label
from spark.events import SCHEMA_FIELDS
from spark.lateness import FileStats, WatermarkLog, late_thresholds
from spark.runs import OnConflict, open_sinks
from spark.sinks import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

STATS = ("channels", "forwarded", "receiver", "false_positive", "forwards")


def dist_name(stat: str, half_life: float) -> str:
    """Distribution name: ``channels:1m``."""
    return f"{stat}:{half_life_label(half_life)}"


def spark_schema() -> str:
    """DDL schema string built from :data:`SCHEMA_FIELDS`."""
    return ", ".join(f"`{name}` {kind}" for name, kind in SCHEMA_FIELDS)


@dataclass(frozen=True)
class JobConfig:
    """One run of the job. Times are seconds; ``dedup_window`` and
    ``trigger_interval`` are Spark interval strings."""

    spool: str
    checkpoint: str
    half_lives: tuple[float, ...] = (60.0, 3600.0)
    redis_url: str | None = None
    redis_layout: str = "exact"  # exact | goforget (spark.goforget)
    out: str | None = None
    once: bool = True
    max_files_per_trigger: int = 100
    dedup_window: str = "10 minutes"
    trigger_interval: str = "5 seconds"
    clean_source: str = "off"  # Spark file source cleanSource: off | delete | archive
    max_clock_skew: float = 3600.0  # s; events stamped later than file mtime + this: early
    on_conflict: str = "refuse"  # sinks holding another run: refuse | continue | fresh
    allowed_lateness: float = 600.0  # s behind the event-time watermark before an event is late
    query_name: str = "bloomcast_stats"


@dataclass
class BatchResult:
    """What one micro-batch adds: ``dists[dist][bin] = S_b`` against landmark ``time``."""

    time: float | None
    events: int  # events applied to the sums (late ones included)
    malformed: int
    late: int = 0  # of ``events``: stamped before the watermark - allowed lateness
    early: int = 0  # stamped after file mtime + max clock skew: counted, not applied
    skewed: int = 0  # of ``events``: stamped after file mtime (within the skew), applied at mtime
    watermark: float | None = None  # event-time watermark after this batch (s)
    applied: bool = True  # False: a replay every sink had already applied
    half_lives: dict[str, float] = field(default_factory=dict)  # dist -> half-life s
    dists: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self, batch_id: int) -> dict[str, Any]:
        return {
            "batch_id": batch_id,
            "time": self.time,
            "events": self.events,
            "malformed": self.malformed,
            "late": self.late,
            "early": self.early,
            "skewed": self.skewed,
            "dists": {
                d: {"half_life": self.half_lives[d], "bins": bins} for d, bins in self.dists.items()
            },
        }


# -- the streaming DataFrame ----------------------------------------------------------


def event_stream(spark: SparkSession, config: JobConfig) -> DataFrame:
    """Parsed, deduplicated events with a boolean ``malformed`` column."""
    from pyspark.sql import functions as F

    # the JSON source with a fixed schema parses straight from the file's bytes (about
    # twice as fast as text + from_json); PERMISSIVE: a line that does not parse is a
    # row of nulls, which the validity check below counts as malformed
    reader = (
        spark.readStream.format("json")
        .schema(spark_schema())
        .option("mode", "PERMISSIVE")
        .option("pathGlobFilter", "*.ndjson")
        .option("maxFilesPerTrigger", config.max_files_per_trigger)
    )
    if config.clean_source != "off":
        reader = reader.option("cleanSource", config.clean_source)
        if config.clean_source == "archive":
            reader = reader.option("sourceArchiveDir", str(Path(config.spool) / "_archive"))
    parsed = reader.load(config.spool).select(
        "*",
        F.col("_metadata.file_path").alias("file"),
        F.col("_metadata.file_modification_time").cast("double").alias("mtime"),
        F.current_timestamp().alias("seen"),  # the batch's time (replays keep it)
    )
    valid = (
        F.col("event_id").isNotNull()
        & F.col("time").isNotNull()
        & ~F.isnan("time")
        & F.col("node").isNotNull()
        & F.col("channel").isNotNull()
        & F.col("role").isin("origin", "receiver")
    )
    valid = F.coalesce(valid, F.lit(False))
    written = F.least(F.col("mtime"), F.col("seen").cast("double"))
    parsed = parsed.select(
        # a malformed line gets a key of its own: the same bad line twice counts twice
        F.when(valid, F.col("event_id"))
        .otherwise(F.concat(F.lit("malformed:"), F.expr("uuid()")))
        .alias("event_id"),
        F.when(valid, F.col("node")).otherwise(F.lit("")).alias("node"),
        "seen",
        "file",
        "mtime",
        # a skewed event is applied at its file's write time (never in the future)
        F.least(F.col("time"), written).alias("time"),
        "role",
        "channel",
        F.coalesce("forwarded", F.lit(0)).alias("forwarded"),
        F.coalesce("peers", F.lit(0)).alias("peers"),
        F.coalesce("false_positive", F.lit(False)).alias("false_positive"),
        (~valid).alias("malformed"),
        (valid & (F.col("time") > written + F.lit(config.max_clock_skew))).alias("early"),
        (
            valid
            & (F.col("time") > written)
            & (F.col("time") <= written + F.lit(config.max_clock_skew))
        ).alias("skewed"),
    )
    # watermark on processing time: dedup state is kept dedup_window of wall time,
    # and no event is ever dropped as late by Spark (lateness is counted, not dropped)
    return parsed.withWatermark("seen", config.dedup_window).dropDuplicatesWithinWatermark(
        ["event_id", "node"]
    )


def batch_aggregates(
    df: DataFrame,
    half_lives: Sequence[float],
    *,
    watermark: float | None = None,
    allowed_lateness: float = 600.0,
) -> BatchResult:
    """Forward-decay sums of one micro-batch (two Spark jobs; rows per file and per bin
    to the driver). ``watermark``: event-time watermark before the batch (s)."""
    from pyspark.sql import functions as F

    included = ~F.col("malformed") & ~F.col("early")
    per_file = (
        df.groupBy("file", "mtime")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(F.col("malformed").cast("long")).alias("malformed"),
            F.sum(F.col("early").cast("long")).alias("early"),
            F.sum(F.col("skewed").cast("long")).alias("skewed"),
            F.max(F.when(included, F.col("time"))).alias("max_time"),
            F.percentile_approx(F.when(included, F.col("time")), 0.5).alias("median_time"),
        )
        .collect()
    )
    rows = sum(int(r["rows"]) for r in per_file)
    malformed = sum(int(r["malformed"] or 0) for r in per_file)
    early = sum(int(r["early"] or 0) for r in per_file)
    skewed = sum(int(r["skewed"] or 0) for r in per_file)
    files = [
        FileStats(
            r["file"],
            float(r["mtime"]),
            None if r["max_time"] is None else float(r["max_time"]),
            None if r["median_time"] is None else float(r["median_time"]),
        )
        for r in per_file
    ]
    thresholds, after = late_thresholds(files, watermark, allowed_lateness)
    result = BatchResult(
        time=None,
        events=rows - malformed - early,
        malformed=malformed,
        early=early,
        skewed=skewed,
        watermark=after,
    )
    max_times = [f.max_time for f in files if f.max_time is not None]
    if not max_times:
        return result
    landmark = float(math.ceil(max(max_times)))
    result.time = landmark
    limits = F.create_map(*[F.lit(x) for f, t in thresholds.items() for x in (f, t)])
    late = F.coalesce(F.col("time") < F.element_at(limits, F.col("file")), F.lit(False))

    def item(stat: str, key: Any, weight: Any) -> Any:
        return F.struct(
            F.lit(stat).alias("stat"), key.alias("bin"), weight.cast("double").alias("w")
        )

    fwd = F.col("forwarded")
    late_item = item("_late", F.lit(""), late.cast("int"))
    origin = F.array(
        late_item,
        item("channels", F.col("channel"), F.lit(1)),
        item("forwarded", F.col("node"), fwd),
        item("forwards", F.lit("sent"), fwd),
        item("forwards", F.lit("saved"), F.greatest(F.col("peers") - fwd, F.lit(0))),
    )
    receiver = F.array(
        late_item,
        item("receiver", F.col("node"), F.lit(1)),
        item("false_positive", F.col("node"), F.col("false_positive").cast("int")),
    )
    items = (
        df.filter(included)
        .select(
            "time",
            "file",
            F.explode(F.when(F.col("role") == "origin", origin).otherwise(receiver)).alias("i"),
        )
        .select("time", "i.stat", "i.bin", "i.w")
        .filter(F.col("w") > 0)
    )
    sums = [
        F.sum(F.col("w") * F.exp(F.lit(decay_rate(h)) * (F.col("time") - F.lit(landmark)))).alias(
            f"s{j}"
        )
        for j, h in enumerate(half_lives)
    ]
    for r in items.groupBy("stat", "bin").agg(*sums, F.sum("w").alias("n")).collect():
        if r["stat"] == "_late":
            result.late = int(r["n"])
            continue
        for j, h in enumerate(half_lives):
            name = dist_name(r["stat"], h)
            result.half_lives[name] = h
            value = float(r[f"s{j}"])
            if value > 0:
                result.dists.setdefault(name, {})[r["bin"]] = value
    return result


# -- running it -----------------------------------------------------------------------

#: test hook: called with (batch id, "before" | "after") around the sink writes
FaultHook = Callable[[int, str], None]


def start_query(
    spark: SparkSession,
    config: JobConfig,
    sinks: Sequence[Sink],
    *,
    fault: FaultHook | None = None,
    on_batch: Callable[[int, BatchResult], None] | None = None,
) -> StreamingQuery:
    """Start the streaming query (``--once``: availableNow; else every trigger_interval)."""
    stream = event_stream(spark, config)

    marks = WatermarkLog(config.checkpoint)

    def write_batch(df: DataFrame, batch_id: int) -> None:
        # cached for the two passes below: only the columns they read (the dedup key
        # and the batch time are done with), which makes building the cache cheaper
        df = df.drop("event_id", "seen").persist()
        try:
            result = batch_aggregates(
                df,
                config.half_lives,
                watermark=marks.before(batch_id),
                allowed_lateness=config.allowed_lateness,
            )
        finally:
            df.unpersist()
        marks.record(batch_id, result.watermark)
        if fault:
            fault(batch_id, "before")
        # a sink that already holds this batch id (Spark replays a batch after a
        # crash) skips it: then the batch was applied before, not now
        applied = [sink.write(batch_id, result) for sink in sinks]
        result.applied = all(applied)
        if on_batch:
            on_batch(batch_id, result)
        if fault:
            fault(batch_id, "after")

    writer = (
        stream.writeStream.queryName(config.query_name)
        .foreachBatch(write_batch)
        .option("checkpointLocation", config.checkpoint)
    )
    if not config.once:
        return writer.trigger(processingTime=config.trigger_interval).start()
    # --once: no extra no-data micro-batch at the end only to evict dedup state (the
    # next run's first batch evicts it); the query clones the session conf at start
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "false")
    try:
        return writer.trigger(availableNow=True).start()
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def run_once(
    spark: SparkSession,
    config: JobConfig,
    *,
    fault: FaultHook | None = None,
    on_batch: Callable[[int, BatchResult], None] | None = None,
) -> None:
    """Process everything in the spool now (availableNow) and return. Raises the
    query's exception if a batch failed (the checkpoint then replays it)."""
    from dataclasses import replace

    sinks, _ = open_sinks(config, config.checkpoint, cast("OnConflict", config.on_conflict))
    query = start_query(spark, replace(config, once=True), sinks, fault=fault, on_batch=on_batch)
    query.awaitTermination()
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"stats query failed: {error}")
