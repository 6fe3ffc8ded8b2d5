"""Where the job's per-batch results go: idempotent writes keyed by the batch id.

Spark replays a micro-batch after a crash (the checkpoint records it as
started, not finished), so every sink must apply a batch id at most once or
overwrite its own earlier attempt:

- :class:`RedisSink`: one sorted set per distribution in goforget's key layout
  (``<dist>``, ``<dist>._T``, ``<dist>._Z``), all rewritten in one MULTI/EXEC
  that also records what it applied, so a batch is applied once however many
  jobs write the Redis: (1) per run (``bloomcast:stats:_runs``, run id -> last
  batch id), so a replay of this run's batch is skipped even when other runs
  wrote in between; (2) per spool file (``bloomcast:stats:_files``, a sorted
  set of file identities, ``<file name>@<mtime ms>``, scored by the time they
  were applied, kept :data:`FILE_MEMORY` seconds): a batch whose files are all
  there is skipped, and one with only some of them raises
  :class:`FilesApplied`, so the job aggregates the batch again without those
  files (two jobs reading overlapping sources count each file once);
- :class:`FileSink`: one JSON and one Parquet file per batch id, written to a
  ``.tmp`` name and renamed, so a replay overwrites its own files;
  :func:`read_file_distributions` / :func:`read_file_counters` fold them back.

The batch (:class:`spark.job.BatchResult`) and the configuration
(:class:`spark.job.JobConfig`) are typed here by what the sinks read of them
(:class:`Batch`, :class:`SinkConfig`): :mod:`spark.job` imports this module,
never the other way round.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from spark.decay import decay_rate, decay_to, merge
from spark.goforget import expire_seconds, goforget_rate, round_counts

if TYPE_CHECKING:
    import redis

#: Redis keys of the job's own bookkeeping (next to the distributions)
BATCH_KEY = "bloomcast:stats:_batch"
MALFORMED_KEY = "bloomcast:stats:_malformed"
EVENTS_KEY = "bloomcast:stats:_events"
LATE_KEY = "bloomcast:stats:_late"
EARLY_KEY = "bloomcast:stats:_early"
SKEWED_KEY = "bloomcast:stats:_skewed"
#: hash node id -> announced address (spark.nodes)
NODES_KEY = "bloomcast:stats:_nodes"
#: the run (see :mod:`spark.runs`) whose batch id ``BATCH_KEY`` holds: the last writer
RUN_KEY = "bloomcast:stats:_run"
#: hash run id -> the last batch id that run applied (every run that wrote here)
RUNS_KEY = "bloomcast:stats:_runs"
#: sorted set: identity of every spool file applied (``<name>@<mtime ms>``) -> when
FILES_KEY = "bloomcast:stats:_files"
#: seconds a file identity is remembered: a file read again later counts again
FILE_MEMORY = 86400.0


class FilesApplied(Exception):
    """Some (not all) of a batch's files are already applied to this Redis, by another
    job or run: ``files`` holds their identities."""

    def __init__(self, files: set[str]) -> None:
        super().__init__(f"{len(files)} files already applied")
        self.files = files


def file_identity(path: str, mtime: float) -> str:
    """``<file name>@<mtime in ms>``: one spool file, whichever source or directory read
    it (the tap's names are ``<writer node id>-<n>``, never reused)."""
    return f"{path.rstrip('/').rsplit('/', 1)[-1]}@{round(mtime * 1000)}"


#: file-sink layout under --out
BATCH_DIR = "batches"


class Batch(Protocol):
    """What a sink reads of one micro-batch (:class:`spark.job.BatchResult`)."""

    @property
    def time(self) -> float | None: ...
    @property
    def events(self) -> int: ...
    @property
    def malformed(self) -> int: ...
    @property
    def late(self) -> int: ...
    @property
    def early(self) -> int: ...
    @property
    def skewed(self) -> int: ...
    @property
    def half_lives(self) -> dict[str, float]: ...
    @property
    def dists(self) -> dict[str, dict[str, float]]: ...
    @property
    def nodes(self) -> dict[str, str]: ...
    @property
    def files(self) -> dict[str, str]: ...
    def to_json(self, batch_id: int) -> dict[str, Any]: ...


class SinkConfig(Protocol):
    """What :func:`make_sinks` reads of the job's configuration (:class:`spark.job.JobConfig`)."""

    @property
    def redis_url(self) -> str | None: ...
    @property
    def out(self) -> str | None: ...
    @property
    def redis_layout(self) -> str: ...


class RedisSink:
    """goforget's key names, one MULTI/EXEC per batch, replays skipped by batch id.

    Per distribution ``d``: ``d`` is a sorted set bin -> decayed count at
    ``d._T`` (integer Unix seconds), ``d._Z`` the sum of its scores. The
    transaction WATCHes the batch-id key and every key it rewrites; the new
    batch id is SET inside the same MULTI, so a batch is applied exactly once
    even if Spark replays it after a crash.

    ``layout``: ``exact`` (default) holds the float forward-decay counts at the
    event-time landmark; ``goforget`` holds what goforget reads (integer counts
    and ``_Z``, ``_T`` = the wall-clock second of the write, goforget's EXPIRE;
    see :mod:`spark.goforget`). ``clock``: Unix seconds (the goforget layout's ``now``).
    """

    def __init__(
        self,
        client: redis.Redis,
        run: str = "",
        layout: str = "exact",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if layout not in ("exact", "goforget"):
            raise ValueError(f"unknown Redis layout {layout!r} (exact or goforget)")
        self.client = client
        self.run = run
        self.layout = layout
        self.clock = clock

    def write(self, batch_id: int, result: Batch) -> bool:
        """Apply the batch; False when it was already applied (a replay, or its files
        by another job). Raises :class:`FilesApplied` when only some files were."""
        import redis as redis_mod

        watched = [RUNS_KEY, FILES_KEY]
        for d in result.dists:
            watched += [d, f"{d}._T"]
        ids = sorted(set(result.files.values()))
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(*watched)
                    last = pipe.hget(RUNS_KEY, self.run)
                    # batch ids restart at 0 with every run: compare within this run only
                    if last is not None and int(last) >= batch_id:
                        pipe.unwatch()
                        return False
                    held = self._held(pipe, ids)
                    if held and len(held) == len(ids):
                        pipe.unwatch()
                        return False
                    if held:
                        pipe.unwatch()
                        raise FilesApplied(held)
                    updates = {}
                    for d, bins in result.dists.items():
                        assert result.time is not None
                        pairs = cast(
                            "list[tuple[bytes, float]]", pipe.zrange(d, 0, -1, withscores=True)
                        )
                        old = {_text(k): float(v) for k, v in pairs}
                        raw_t = pipe.get(f"{d}._T")
                        old_t = float(raw_t) if raw_t is not None and old else None
                        rate = decay_rate(result.half_lives[d])
                        updates[d] = merge(old, old_t, bins, result.time, rate)
                    pipe.multi()
                    for d, (scores, t) in updates.items():
                        if self.layout == "goforget":
                            self._queue_goforget(pipe, d, scores, t, result.half_lives[d])
                            continue
                        pipe.delete(d)
                        pipe.zadd(d, dict(scores))
                        pipe.set(f"{d}._Z", repr(math.fsum(scores.values())))
                        pipe.set(f"{d}._T", str(int(t)))
                    pipe.incrby(EVENTS_KEY, result.events)
                    pipe.incrby(MALFORMED_KEY, result.malformed)
                    pipe.incrby(LATE_KEY, result.late)
                    pipe.incrby(EARLY_KEY, result.early)
                    pipe.incrby(SKEWED_KEY, result.skewed)
                    if result.nodes:
                        pipe.hset(NODES_KEY, mapping=dict[Any, Any](result.nodes))
                    pipe.set(BATCH_KEY, batch_id)
                    pipe.set(RUN_KEY, self.run)
                    pipe.hset(RUNS_KEY, self.run, batch_id)
                    now = self.clock()
                    if ids:
                        pipe.zadd(FILES_KEY, dict.fromkeys(ids, now))
                    pipe.zremrangebyscore(FILES_KEY, "-inf", now - FILE_MEMORY)
                    pipe.execute()
                    return True
                except redis_mod.WatchError:
                    continue

    @staticmethod
    def _held(pipe: Any, ids: list[str]) -> set[str]:
        """The file identities of ``ids`` this Redis already applied."""
        if not ids:
            return set()
        scores = pipe.zmscore(FILES_KEY, ids)
        return {i for i, score in zip(ids, scores, strict=True) if score is not None}

    def _queue_goforget(
        self, pipe: Any, d: str, scores: dict[str, float], t: float, half_life: float
    ) -> None:
        """Queue distribution ``d`` in goforget's layout: counts decayed to the wall-clock
        second now, rounded; ``_Z`` their sum; ``_T`` now; goforget's EXPIRE."""
        now = int(self.clock())
        rate = decay_rate(half_life)
        counts = round_counts(decay_to(scores, t, rate, now))
        keys = (d, f"{d}._Z", f"{d}._T")
        pipe.delete(*keys)
        if not counts:
            return  # goforget holds no empty distribution (its worker lets it expire)
        pipe.zadd(d, dict(counts))
        pipe.set(keys[1], sum(counts.values()))
        pipe.set(keys[2], now)
        ttl = expire_seconds(max(counts.values()), goforget_rate(half_life))
        for key in keys:
            pipe.expire(key, ttl)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class FileSink:
    """One JSON (and one Parquet) file per batch id under ``<out>/batches/``.

    ``<out>/batches/<run>-<batch id, 12 digits>.json``: :meth:`spark.job.BatchResult.to_json`.
    ``<out>/batches/<run>-<batch id>.parquet``: rows (dist, bin, half_life, time, s).
    The run id (:mod:`spark.runs`) keeps two runs' batch 0 apart: a run never
    overwrites another run's files.
    Each is written to a ``.tmp`` name and renamed, so a replayed batch
    overwrites its own file and a reader never sees half a file. Readers fold
    all batches with :func:`spark.decay.merge` (forward decay is additive).
    """

    def __init__(self, out: str | os.PathLike[str], run: str = "") -> None:
        self.directory = Path(out) / BATCH_DIR
        self.directory.mkdir(parents=True, exist_ok=True)
        self.run = run

    def write(self, batch_id: int, result: Batch) -> bool:
        """Write (or, on a replay, rewrite) the batch's files; False when it was a replay."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        stem = self.directory / (f"{self.run}-{batch_id:012d}" if self.run else f"{batch_id:012d}")
        replay = stem.with_suffix(".json").exists()
        tmp = stem.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result.to_json(batch_id), sort_keys=True))
        os.replace(tmp, stem.with_suffix(".json"))
        rows: dict[str, list[Any]] = {"dist": [], "bin": [], "half_life": [], "time": [], "s": []}
        for d, bins in result.dists.items():
            for b, s in bins.items():
                rows["dist"].append(d)
                rows["bin"].append(b)
                rows["half_life"].append(result.half_lives[d])
                rows["time"].append(result.time)
                rows["s"].append(s)
        ptmp = stem.with_suffix(".parquet.tmp")
        pq.write_table(pa.table(rows), ptmp)
        os.replace(ptmp, stem.with_suffix(".parquet"))
        return not replay


def read_file_distributions(
    out: str | os.PathLike[str],
) -> dict[str, tuple[dict[str, float], float, float]]:
    """Fold every batch file under ``out``: dist -> (bin -> count at T, T, half-life)."""
    state: dict[str, tuple[dict[str, float], float, float]] = {}
    directory = Path(out) / BATCH_DIR
    for path in sorted(directory.glob("*.json")):
        batch = json.loads(path.read_text())
        for d, entry in batch["dists"].items():
            h = float(entry["half_life"])
            old, old_t, _ = state.get(d, ({}, None, h))
            scores, t = merge(old, old_t, entry["bins"], float(batch["time"]), decay_rate(h))
            state[d] = (scores, t, h)
    return state


def read_file_nodes(out: str | os.PathLike[str]) -> dict[str, str]:
    """node id -> address over all batch files (a later batch's address wins)."""
    nodes: dict[str, str] = {}
    for path in sorted((Path(out) / BATCH_DIR).glob("*.json")):
        nodes.update(json.loads(path.read_text()).get("nodes", {}))
    return nodes


def read_file_counters(out: str | os.PathLike[str]) -> dict[str, int]:
    """Totals over all batch files: events (applied; late and skewed ones included),
    late, skewed, early, malformed, batches."""
    totals = {"events": 0, "late": 0, "skewed": 0, "early": 0, "malformed": 0, "batches": 0}
    for path in (Path(out) / BATCH_DIR).glob("*.json"):
        batch = json.loads(path.read_text())
        for key in ("events", "late", "skewed", "early", "malformed"):
            totals[key] += batch.get(key, 0)
        totals["batches"] += 1
    return totals


Sink = RedisSink | FileSink


def make_sinks(config: SinkConfig, run: str = "") -> list[Sink]:
    """Redis sink when ``redis_url``; file sink when ``out`` (at least one is required).
    ``run``: the run id the sinks write under (:func:`spark.runs.open_sinks` checks it)."""
    sinks: list[Sink] = []
    if config.redis_url:
        import redis

        sinks.append(RedisSink(redis.Redis.from_url(config.redis_url), run, config.redis_layout))
    if config.out:
        sinks.append(FileSink(config.out, run))
    if not sinks:
        raise ValueError("give --redis URL or --out DIR")
    return sinks
