"""The demo's Spark part: the statistics job over the nodes' traffic spool and
the views the summary shows from its output.

The job runs as ``bloomcast stats run --once`` in a child process of its own
session, exactly as a user would run it, so the demo exercises the real
command; on Ctrl-C or a timeout the whole process group (the JVM included) is
stopped. The views are decayed to the end of the workload, not to when the
job finished, so Spark's own run time does not decay the picture away.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: half-lives for the Spark job: the live summary's (router.hotchannels.HALF_LIFE_LABELS,
#: held equal by tests/demo/test_spark_hot_check.py), so ``channels:1m`` and trending
#: 10 s over 10 m mean the same on both sides; a demo lasts seconds to minutes
HALF_LIVES = ("10s", "1m", "10m")
SHORT_HALF_LIFE, _, LONG_HALF_LIFE = HALF_LIVES
#: the Spark distribution the live cluster-wide top 10 (HALFLIFE 1m) is held to
LIVE_DIST = f"channels:{HALF_LIVES[1]}"
#: trending lists only channels with at least this share of the short-half-life traffic
TRENDING_MIN_SHARE = 0.01


def run_stats_job(spool: Path, out: Path, master: str, log: Path) -> tuple[int, float, str]:
    """``bloomcast stats run --once`` over ``spool`` as a child process (killed on
    Ctrl-C); returns (exit code, seconds, last output line)."""
    cmd = [
        sys.executable, "-m", "bloomcast.cli", "stats", "run",
        "--spool", str(spool), "--out", str(out), "--once", "--master", master,
        "--half-life", ",".join(HALF_LIVES),
        "--shuffle-partitions", "2", "--max-files-per-trigger", "10000",
    ]  # fmt: skip
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    started = time.perf_counter()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
        try:
            code = proc.wait(timeout=600)
        except BaseException:
            # Ctrl-C or timeout: the whole process group (JVM included)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            raise
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
    return code, time.perf_counter() - started, lines[-1] if lines else ""


def stats_views(out: Path, node_names: dict[str, str], now: float) -> dict[str, Any]:
    """The Spark job's distributions (file sink under ``out``) decayed to ``now``
    (Unix seconds: the end of the workload, so the job's own run time does not
    decay the picture away)."""
    from spark.sinks import read_file_counters
    from spark.stats_command import Source, top_rows

    source = Source(None, str(out))
    views: dict[str, Any] = {"hot_dist": f"channels:{SHORT_HALF_LIFE}", "decayed_to": now}
    for key, dist, n in (
        ("hot_channels", f"channels:{SHORT_HALF_LIFE}", 10),
        ("trending", f"trending:{SHORT_HALF_LIFE}/{LONG_HALF_LIFE}", 10_000),
        ("false_positive_rate", f"false_positive_rate:{LONG_HALF_LIFE}", 20),
        ("forwards", f"forwards:{LONG_HALF_LIFE}", 2),
    ):
        try:
            columns, rows = top_rows(source, dist, n, now)
        except ValueError as exc:
            views[key] = []
            views[f"{key}_error"] = str(exc)
            continue
        out_rows: list[dict[str, Any]] = []
        for row in rows:
            d = dict(zip(columns, row, strict=True))
            if key == "trending" and float(row[1]) < TRENDING_MIN_SHARE:
                continue  # one recent PUBLISH on a quiet channel is not a trend
            if key == "trending" and len(out_rows) == 8:
                break
            if key == "false_positive_rate":
                d["node"] = node_names.get(str(d["node"]), str(d["node"]))
            out_rows.append(d)
        views[key] = out_rows
        views[f"{key}_dist"] = dist
    views["counters"] = read_file_counters(out)
    return views


def spark_rates(
    out: Path, at: float, dist: str = LIVE_DIST
) -> tuple[dict[str, float], float | None]:
    """The Spark job's ``dist`` (file sink under ``out``) decayed to ``at`` (Unix
    seconds) as rates per second (decayed count x ln 2 / half-life, ``stats top``'s
    steady-state rate and the live summary's), and the distribution's time ``T``
    (its window end: the last batch's landmark, its latest event time rounded
    up); ``({}, None)`` when the job wrote none."""
    from spark.decay import decay_rate, decay_to
    from spark.stats_command import Source, split_dist

    counts, t = Source(None, str(out)).load(dist)
    if t is None:
        return {}, None
    a = decay_rate(split_dist(dist)[1])
    return {c: v * a for c, v in decay_to(counts, t, a, at).items()}, t
