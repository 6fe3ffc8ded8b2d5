"""Late and too-early events: per-file references, and the event-time watermark.

Nothing is dropped for being late. Forward decay is additive (see
:mod:`spark.decay`): an event older than the running landmark only adds the
smaller weight ``exp(a (t - L))``, so a late event is included in the sums and
counted in ``late``. Only an event stamped far in the future is left out of
the sums (counted in ``early``): it would move the landmark ahead of real
time, and every older count would be scaled by ``exp(-a (T_future - T))``.

Definitions (all times Unix seconds, floats):

- *too early*: ``t > min(file mtime, batch time) + max_clock_skew``: stamped
  further after its spool file was last written than any clock may be off.
  Fixed per file, so it does not depend on how files fall into batches.
- *skewed*: stamped after its file was written, but within the skew. Applied
  at ``t' = min(file mtime, batch time)`` instead of ``t``: under forward decay
  an event from the future weighs ``exp(a (t - T)) > 1`` at a read at ``T < t``
  (30 minutes ahead with a 1-minute half-life: 2^30), so one skewed clock would
  dominate every read until real time caught up. (The job does this clamp in
  its event stream; ``t`` below is the clamped time.)
- *late*: ``t < W_f - allowed_lateness``, where ``W_f`` is the event-time
  watermark before file ``f``: the largest *high-water* of every file
  processed before it. Files are taken in the file source's order (oldest
  modification time first, then path), within a batch as across batches, so
  ``W_f`` is the same whatever ``maxFilesPerTrigger`` is.
- a file's *high-water* is ``min(max t, median t + allowed_lateness, mtime)``
  over its included events: one clock-skewed event cannot push the watermark
  past the bulk of its file's traffic, nor past the time the file was written.

The watermark after each batch is kept in ``<checkpoint>/bloomcast-watermarks.json``
(batch id -> watermark), so a batch Spark replays after a crash sees the
watermark it saw the first time.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FileStats:
    """One spool file of a batch: its path, modification time (s), and its included
    events' largest and median time (s; None when it has none)."""

    path: str
    mtime: float
    max_time: float | None
    median_time: float | None

    def high_water(self, allowed_lateness: float) -> float | None:
        """``min(max t, median t + allowed_lateness, mtime)``, None without events."""
        if self.max_time is None or self.median_time is None:
            return None
        return min(self.max_time, self.median_time + allowed_lateness, self.mtime)


def late_thresholds(
    files: Iterable[FileStats], watermark: float | None, allowed_lateness: float
) -> tuple[dict[str, float], float | None]:
    """Per file the time below which its events are late, and the watermark after them.

    Files are walked oldest mtime first (then by path), the file source's order.
    """
    thresholds: dict[str, float] = {}
    w = watermark
    for f in sorted(files, key=lambda f: (f.mtime, f.path)):
        thresholds[f.path] = (w if w is not None else -math.inf) - allowed_lateness
        hw = f.high_water(allowed_lateness)
        if hw is not None:
            w = hw if w is None else max(w, hw)
    return thresholds, w


class WatermarkLog:
    """batch id -> event-time watermark after it, in a JSON file (local checkpoints);
    in memory only when the checkpoint is a URI (``hdfs://``, ``s3a://``)."""

    FILE = "bloomcast-watermarks.json"

    def __init__(self, checkpoint: str) -> None:
        self.path = None if "://" in checkpoint else Path(checkpoint) / self.FILE
        self.marks: dict[int, float | None] = {}
        if self.path is not None and self.path.exists():
            raw = json.loads(self.path.read_text())
            self.marks = {int(k): v for k, v in raw.items()}

    def before(self, batch_id: int) -> float | None:
        """The watermark after the latest batch before ``batch_id`` (None: no events yet)."""
        earlier = [b for b in self.marks if b < batch_id]
        return self.marks[max(earlier)] if earlier else None

    def record(self, batch_id: int, watermark: float | None) -> None:
        self.marks[batch_id] = watermark
        # keep the last few: a replay only ever needs the one before it
        for b in sorted(self.marks)[:-8]:
            del self.marks[b]
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({str(k): v for k, v in self.marks.items()}))
        os.replace(tmp, self.path)
