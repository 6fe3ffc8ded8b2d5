"""One micro-batch's forward-decay sums and counters, in one pass over its events.

Per half-life ``h`` (``a = ln 2 / h``) and distribution the batch contributes
``S_b[bin] = sum w exp(a (t - T_b))`` against the batch landmark ``T_b =
ceil(max t)`` (:mod:`spark.decay`). ``T_b`` is only known once the batch has
been read, so the sums are taken per time bucket instead: every event is summed
against the end ``x`` of its bucket (buckets :func:`bucket_width` seconds wide,
so every exponent ``a (t - x)`` lies in ``[-500, 0]``: no overflow, no
underflow) in the same aggregation that gives the per-file counters, and the
driver moves each bucket's sum to ``T_b`` (``* exp(a (x - T_b))``; forward
decay is additive). One Spark job per batch, one row per file and per
(distribution bin, bucket) to the driver.

Late events (:mod:`spark.lateness`) need each file's threshold, which depends
on the files before it in the batch: the pass collects each file's earliest
included time, and only when some file has events below its threshold does a
second pass (over the cached batch) count them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark.decay import decay_rate, half_life_label
from spark.lateness import FileStats, late_thresholds
from spark.sinks import file_identity

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

STATS = ("channels", "forwarded", "receiver", "false_positive", "forwards")

#: the largest ``a (x - t)`` inside a time bucket (exp(-500) ~ 7e-218: a normal double)
BUCKET_EXPONENT = 500.0

_FILE, _STAT = 0, 1


def dist_name(stat: str, half_life: float) -> str:
    """Distribution name: ``channels:1m``."""
    return f"{stat}:{half_life_label(half_life)}"


def bucket_width(half_lives: Sequence[float]) -> float:
    """Seconds per time bucket: ``500 / a`` for the largest rate (1m: about 12 h)."""
    return BUCKET_EXPONENT / max(decay_rate(h) for h in half_lives)


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
    nodes: dict[str, str] = field(default_factory=dict)  # node id -> address (spark.nodes)
    #: path -> identity (spark.sinks.file_identity) of every spool file the batch read
    files: dict[str, str] = field(default_factory=dict)

    def to_json(self, batch_id: int) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
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


def _items(included: Any) -> Any:
    """Per event: one file item, and (when included) one item per distribution bin it
    weighs in: ``struct(kind, a, b, x, w)``, ``x`` = mtime (file) or bucket end (stat)."""
    from pyspark.sql import functions as F

    def item(kind: int, a: Any, b: Any, x: Any, w: Any) -> Any:
        return F.struct(
            F.lit(kind).alias("kind"),
            a.cast("string").alias("a"),
            b.cast("string").alias("b"),
            x.cast("double").alias("x"),
            w.cast("double").alias("w"),
        )

    end = F.col("bucket_end")
    fwd = F.col("forwarded")
    saved = F.greatest(F.col("peers") - fwd, F.lit(0))
    fp = F.col("false_positive").cast("int")
    # per file and second of its included events (b): counters, and a histogram for the median
    second = F.when(included, F.floor(F.col("time")).cast("long")).otherwise(F.lit(None))
    file_item = item(
        _FILE, F.col("file"), F.coalesce(second.cast("string"), F.lit("")), F.col("mtime"), F.lit(1)
    )
    origin = F.array(
        file_item,
        item(_STAT, F.lit("channels"), F.col("channel"), end, F.lit(1)),
        item(_STAT, F.lit("forwarded"), F.col("node"), end, fwd),
        item(_STAT, F.lit("forwards"), F.lit("sent"), end, fwd),
        item(_STAT, F.lit("forwards"), F.lit("saved"), end, saved),
    )
    receiver = F.array(
        file_item,
        item(_STAT, F.lit("receiver"), F.col("node"), end, F.lit(1)),
        item(_STAT, F.lit("false_positive"), F.col("node"), end, fp),
    )
    origin_event = included & (F.col("role") == "origin")
    return F.when(origin_event, origin).when(included, receiver).otherwise(F.array(file_item))


def batch_aggregates(
    df: DataFrame,
    half_lives: Sequence[float],
    *,
    watermark: float | None = None,
    allowed_lateness: float = 600.0,
) -> BatchResult:
    """Forward-decay sums and counters of one micro-batch (one Spark job; a second one
    only when the batch holds late events). ``watermark``: event-time watermark before
    the batch (s)."""
    from pyspark.sql import functions as F

    included = ~F.col("malformed") & ~F.col("early")
    width = bucket_width(half_lives)
    rates = [decay_rate(h) for h in half_lives]
    df = df.withColumn("bucket_end", (F.floor(F.col("time") / width) + 1) * width)
    exploded = df.select(
        "time",
        "malformed",
        "early",
        "skewed",
        F.explode(_items(included)).alias("i"),
    ).filter((F.col("i.kind") == _FILE) | (F.col("i.w") > 0))
    is_file = F.col("kind") == _FILE
    t_file = F.when(is_file & ~F.col("malformed") & ~F.col("early"), F.col("time"))
    aggs = [
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(is_file, F.col("malformed").cast("long"))).alias("malformed"),
        F.sum(F.when(is_file, F.col("early").cast("long"))).alias("early"),
        F.sum(F.when(is_file, F.col("skewed").cast("long"))).alias("skewed"),
        F.max(t_file).alias("max_time"),
        F.min(t_file).alias("min_time"),
        *(
            F.sum(
                F.when(~is_file, F.col("w") * F.exp(F.lit(a) * (F.col("time") - F.col("x"))))
            ).alias(f"s{j}")
            for j, a in enumerate(rates)
        ),
    ]
    rows = (
        exploded.select("time", "malformed", "early", "skewed", "i.*")
        .groupBy("kind", "a", "b", "x")
        .agg(*aggs)
        .collect()
    )
    per_file = _per_file([r for r in rows if r["kind"] == _FILE])
    malformed = sum(f.malformed for f in per_file)
    early = sum(f.early for f in per_file)
    files = [f.stats for f in per_file]
    thresholds, after = late_thresholds(files, watermark, allowed_lateness)
    result = BatchResult(
        time=None,
        events=sum(f.rows for f in per_file) - malformed - early,
        malformed=malformed,
        early=early,
        skewed=sum(f.skewed for f in per_file),
        watermark=after,
        files={f.stats.path: file_identity(f.stats.path, f.stats.mtime) for f in per_file},
    )
    max_times = [f.max_time for f in files if f.max_time is not None]
    if not max_times:
        return result
    landmark = float(math.ceil(max(max_times)))
    result.time = landmark
    if any(f.min_time is not None and f.min_time < thresholds[f.stats.path] for f in per_file):
        limits = F.create_map(*[F.lit(x) for f, t in thresholds.items() for x in (f, t)])
        late = F.col("time") < F.element_at(limits, F.col("file"))
        result.late = df.filter(included & late).count()
    for r in rows:
        if r["kind"] != _STAT:
            continue
        for j, h in enumerate(half_lives):
            name = dist_name(r["a"], h)
            result.half_lives[name] = h
            value = float(r[f"s{j}"] or 0.0) * math.exp(rates[j] * (float(r["x"]) - landmark))
            if value > 0:
                bins = result.dists.setdefault(name, {})
                bins[r["b"]] = bins.get(r["b"], 0.0) + value
    return result


@dataclass
class _File:
    """One spool file of the batch, folded from its per-second rows."""

    stats: FileStats
    rows: int
    malformed: int
    early: int
    skewed: int
    min_time: float | None


def _per_file(rows: list[Any]) -> list[_File]:
    """Fold the per (file, second) rows. The median is taken from the per-second
    histogram of the included events: the earliest event time in the second that
    holds the middle event (rank ceil(n / 2)): exact when no two events share a
    second, otherwise at most 1 s below the true median (never above it)."""
    grouped: dict[tuple[str, float], list[Any]] = {}
    for r in rows:
        grouped.setdefault((r["a"], float(r["x"])), []).append(r)
    out = []
    for (path, mtime), parts in grouped.items():
        seconds = sorted((int(p["b"]), p) for p in parts if p["b"])
        included = sum(int(p["rows"]) for _, p in seconds)
        median = None
        if included:
            rank, seen = (included + 1) // 2, 0
            for _, p in seconds:
                seen += int(p["rows"])
                if seen >= rank:
                    median = float(p["min_time"])
                    break
        times = [p for _, p in seconds]
        out.append(
            _File(
                FileStats(
                    path,
                    mtime,
                    max((float(p["max_time"]) for p in times), default=None),
                    median,
                ),
                sum(int(p["rows"]) for p in parts),
                sum(int(p["malformed"] or 0) for p in parts),
                sum(int(p["early"] or 0) for p in parts),
                sum(int(p["skewed"] or 0) for p in parts),
                min((float(p["min_time"]) for p in times), default=None),
            )
        )
    return out
