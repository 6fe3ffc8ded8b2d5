"""The Spark Structured Streaming job: traffic spool -> forward-decayed statistics.

Pipeline (one streaming query, checkpointed):

1. File source (``json``, the fixed schema of :data:`spark.events.SCHEMA_FIELDS`,
   PERMISSIVE) over ``<spool>/*.ndjson`` (``pathGlobFilter``; the tap's ``.tmp``
   files are never read), ``maxFilesPerTrigger`` files per micro-batch; or,
   with ``nodes``, the nodes' spools over HTTP (:mod:`spark.spool_source`,
   each line parsed by ``from_json`` with the same schema, PERMISSIVE).
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
4. ``foreachBatch``, one aggregation (:mod:`spark.aggregate`): one row per
   spool file to the driver (counts, newest, earliest and median event time)
   gives each file its lateness threshold and moves the event-time watermark
   (:mod:`spark.lateness`); in the same pass, per half-life ``h`` (``a = ln 2 /
   h``) and distribution bin, the forward-decay sums of the applied (on-time
   and late) events per time bucket, which the driver moves to the batch
   landmark ``T_b = ceil(max t)``: ``S_b[bin] = sum w exp(a (t - T_b))`` (see
   :mod:`spark.decay`). Late events are counted by a second pass only when a
   file holds some. Then the sinks write idempotently (:mod:`spark.sinks`)
   under this checkpoint's run id (:mod:`spark.runs`): Redis (the batch id and
   run committed in the same MULTI/EXEC) and/or files (one file per run and
   batch id, renamed into place).

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
UDFs; the network source's reader is pickled by value, so executors need no
bloomcast code); only the per-bin aggregates reach the driver, which writes
the sinks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from spark.aggregate import STATS, BatchResult, batch_aggregates, dist_name
from spark.events import SCHEMA_FIELDS
from spark.lateness import WatermarkLog
from spark.nodes import read_sidecars
from spark.runs import OnConflict, open_sinks
from spark.sinks import FilesApplied, Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

# re-exported: the tests and the CLI import them from here
__all__ = ["STATS", "BatchResult", "JobConfig", "batch_aggregates", "dist_name", "run_once"]


def spark_schema() -> str:
    """DDL schema string built from :data:`SCHEMA_FIELDS`."""
    return ", ".join(f"`{name}` {kind}" for name, kind in SCHEMA_FIELDS)


@dataclass(frozen=True)
class JobConfig:
    """One run of the job. Times are seconds; ``dedup_window`` and
    ``trigger_interval`` are Spark interval strings."""

    spool: str  # a directory (or URI) the file source reads; "" with nodes
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
    nodes: str = ""  # host:port,... of nodes serving their spool (spark.spool_source)


# -- the streaming DataFrame ----------------------------------------------------------


def raw_events(spark: SparkSession, config: JobConfig) -> DataFrame:
    """The schema's columns, ``file`` and ``mtime`` (s): from the nodes' spools over
    HTTP with ``config.nodes``, else from the spool directory."""
    from pyspark.sql import functions as F

    if config.nodes:
        from spark.spool_source import SOURCE_NAME, register

        register(spark)
        lines = (
            spark.readStream.format(SOURCE_NAME)
            .option("nodes", config.nodes)
            .option("maxFilesPerTrigger", config.max_files_per_trigger)
            .load()
        )
        event = F.from_json("value", spark_schema(), {"mode": "PERMISSIVE"})
        return lines.select(event.alias("e"), "file", "mtime").select("e.*", "file", "mtime")
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
    return reader.load(config.spool).select(
        "*",
        F.col("_metadata.file_path").alias("file"),
        F.col("_metadata.file_modification_time").cast("double").alias("mtime"),
    )


def event_stream(spark: SparkSession, config: JobConfig) -> DataFrame:
    """Parsed, deduplicated events with a boolean ``malformed`` column."""
    from pyspark.sql import functions as F

    parsed = raw_events(spark, config).select(
        "*",
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


def node_addresses(config: JobConfig) -> dict[str, str]:
    """node id -> address (:mod:`spark.nodes`): the spool's sidecars, or each node's."""
    if config.nodes:
        from spark.spool_client import node_addresses as served
        from spark.spool_client import parse_nodes

        return served(parse_nodes(config.nodes))
    return read_sidecars(config.spool)


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
        from pyspark.sql import functions as F

        # not cached: one pass (spark.aggregate); a batch with late events is read a
        # second time to count them (the dedup recomputes the same rows from the same
        # state store version)
        events = df.drop("event_id", "seen")
        watermark = marks.before(batch_id)

        def aggregate(without: set[str]) -> BatchResult:
            rows = events.filter(~F.col("file").isin(sorted(without))) if without else events
            return batch_aggregates(
                rows, config.half_lives, watermark=watermark,
                allowed_lateness=config.allowed_lateness,
            )  # fmt: skip

        result = aggregate(set())
        marks.record(batch_id, result.watermark)
        result.nodes = node_addresses(config)
        if fault:
            fault(batch_id, "before")
        # a sink that already holds this batch (Spark replays a batch after a crash, or
        # another job applied its files) skips it: then it was applied before, not now;
        # files another job applied to the Redis are left out, the rest aggregated again
        without: set[str] = set()
        while True:
            try:
                applied = [sink.write(batch_id, result) for sink in sinks]
                break
            except FilesApplied as held:
                more = {path for path, i in result.files.items() if i in held.files} - without
                if not more:
                    raise  # cannot happen: a held file is one of this result's files
                without |= more
                nodes, result = result.nodes, aggregate(without)
                result.nodes = nodes
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
