"""Run identity: which checkpoint wrote a sink's state.

A *run* is one Spark checkpoint. Its id (12 hex digits) is created with the
checkpoint and kept in ``<checkpoint>/bloomcast-run``. Batch ids restart at 0
with every checkpoint, so the sinks key what they hold by run:

- Redis: ``bloomcast:stats:_runs`` maps every run that wrote it to its last
  batch id (``bloomcast:stats:_run`` / ``_batch``: the last writer, as before
  that hash), both in the batch's MULTI/EXEC; a run already there (several
  jobs, one per host, writing one Redis) is never refused again;
- files: ``<out>/batches/<run>-<batch id>.json`` (files from before run ids:
  ``<batch id>.json``).

Before the first batch :func:`open_sinks` compares: a sink that holds another
run's statistics is refused (:class:`RunConflict`, one line naming both runs
and the flags) unless the user says what to do:

- ``continue``: add this run's batches to the other run's state (forward decay
  is additive, so two spools folded one after the other are exact); Redis
  then belongs to this run; the other run's files stay and are folded too;
- ``fresh``: delete the other run's statistics (Redis: every distribution key
  and the job's counters; files: the other runs' batch files), then start.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from spark.sinks import BATCH_DIR, BATCH_KEY, RUN_KEY, RUNS_KEY, Sink, SinkConfig, make_sinks

OnConflict = Literal["refuse", "continue", "fresh"]

RUN_FILE = "bloomcast-run"
UNNAMED = "(unnamed: written before run ids)"
_RUN_FILE_RE = re.compile(r"^(?:([0-9a-f]+)-)?\d{12}\.(?:json|parquet)$")
#: the statistics a run writes (the distributions' stat names, see spark.job.STATS)
_STAT_PATTERNS = ("channels:*", "forwarded:*", "receiver:*", "false_positive:*", "forwards:*")


class RunConflict(RuntimeError):
    """A sink holds another run's statistics; the message is one line for the user."""


@dataclass(frozen=True)
class RunCheck:
    """The outcome of :func:`open_sinks`: this run, and the runs it found in the sinks."""

    run: str
    redis_runs: tuple[str, ...]
    file_runs: tuple[str, ...]


def run_id(checkpoint: str) -> str:
    """This checkpoint's run id, created on first use (local checkpoints; a URI
    checkpoint gets an id derived from its path)."""
    if "://" in checkpoint:
        return uuid.uuid5(uuid.NAMESPACE_URL, checkpoint).hex[:12]
    path = Path(checkpoint) / RUN_FILE
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    run = uuid.uuid4().hex[:12]
    path.write_text(run + "\n")
    return run


def redis_runs(url: str) -> set[str]:
    """The runs whose statistics a Redis holds (empty: none). Raises redis-py's errors
    when it cannot be reached."""
    from spark.stats_top import redis_client

    client = redis_client(url)
    try:
        runs = set(client.hkeys(RUNS_KEY))
        owner = client.get(RUN_KEY)
        if owner:
            runs.add(str(owner))
        elif client.exists(BATCH_KEY):
            runs.add(UNNAMED)  # written before run ids, or by a sink given no run id
        return runs
    finally:
        client.close()


def file_runs(out: str) -> set[str]:
    """Runs with batch files under ``<out>/batches``."""
    runs: set[str] = set()
    directory = Path(out) / BATCH_DIR
    if directory.is_dir():
        for path in directory.iterdir():
            m = _RUN_FILE_RE.match(path.name)
            if m:
                runs.add(m[1] or UNNAMED)
    return runs


def _clear_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = [k for p in (*_STAT_PATTERNS, "bloomcast:stats:*") for k in client.scan_iter(p)]
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def _clear_files(out: str, keep: str) -> None:
    for path in (Path(out) / BATCH_DIR).iterdir():
        m = _RUN_FILE_RE.match(path.name)
        if m and (m[1] or UNNAMED) != keep:
            path.unlink()


def open_sinks(
    config: SinkConfig, checkpoint: str, on_conflict: OnConflict = "refuse"
) -> tuple[list[Sink], RunCheck]:
    """The sinks for this checkpoint's run, after checking what they hold.

    Raises :class:`RunConflict` when a sink holds another run and ``on_conflict``
    is ``refuse``.
    """
    run = run_id(checkpoint)
    in_redis = redis_runs(config.redis_url) if config.redis_url else set()
    if run in in_redis:
        in_redis = set()  # this run already writes there (beside others): no conflict
    in_files = file_runs(config.out) - {run} if config.out else set()
    others = []
    if in_redis:
        others.append(f"Redis {config.redis_url} holds run {', '.join(sorted(in_redis))}")
    if in_files:
        others.append(f"{config.out} holds run {', '.join(sorted(in_files))}")
    if others and on_conflict == "refuse":
        raise RunConflict(
            f"{' and '.join(others)}, but checkpoint {checkpoint} is run {run}: "
            "pass --continue to add this run to those statistics, "
            "or --fresh to delete them and start over"
        )
    if others and on_conflict == "fresh":
        if config.redis_url and in_redis:
            _clear_redis(config.redis_url)
        if config.out and in_files:
            _clear_files(config.out, keep=run)
    return make_sinks(config, run), RunCheck(run, tuple(sorted(in_redis)), tuple(sorted(in_files)))
