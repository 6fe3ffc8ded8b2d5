"""Benchmark: events/s through ``bloomcast stats run --once`` on local[2].

    uv run python -m bench.spark_stats [--events 1000000] [--files 20] [--master local[2]]
                                       [--repeat 1]

Generates N traffic events (origin events plus the receiver events of their
forwards, 3 nodes, 64 channels) as NDJSON spool files, then times, each in a
fresh process on the same master:

1. ``stats run --once`` on an empty spool: JVM + SparkSession + query start (startup);
2. ``stats run --once`` on the spool (the job: parse, dedup, 5 distributions x 2 half-lives);
3. the anchor: a plain Spark batch ``spark.read.json(spool).count()`` over the same files
   (what merely parsing the events costs on this master).

``--repeat N`` runs the three steps N times, interleaved, and keeps each
step's fastest run (the machine is shared: the fastest run is the least
disturbed one). Prints wall times, events/s including and excluding startup,
and the ratio to the anchor. Numbers go to docs/benchmarks.md, section "spark".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spark.events import TrafficEvent
from spark.tap import event_line

NODES = [f"{i:040x}" for i in (0xA1, 0xB2, 0xC3)]

ANCHOR = """
import sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
t = time.perf_counter()
n = spark.read.json(sys.argv[2] + "/*.ndjson").count()
print(n, time.perf_counter() - t)
spark.stop()
"""


def generate(spool: Path, events: int, files: int, seed: int = 1) -> int:
    """Write about ``events`` events into ``files`` files; return the exact count."""
    rnd = random.Random(seed)
    start = time.time() - 600
    per_file = events // files
    written = 0
    for f in range(files):
        lines: list[bytes] = []
        seq = f * per_file
        while len(lines) < per_file:
            seq += 1
            origin = NODES[seq % 3]
            t = start + 600 * (f * per_file + len(lines)) / events
            forwarded = rnd.choice((0, 1, 1, 2))
            ch = f"ch.{rnd.randrange(64)}"
            eid = f"{origin}-{seq}"
            lines.append(
                event_line(TrafficEvent(eid, t, origin, "origin", ch, 100, 1, forwarded, 2, False))
            )
            for p in [n for n in NODES if n != origin][:forwarded]:
                rec = rnd.random() < 0.7
                lines.append(
                    event_line(
                        TrafficEvent(eid, t, p, "receiver", ch, 100, int(rec), 0, 2, not rec)
                    )
                )
        (spool / f"bench-{f:08d}.ndjson").write_bytes(b"".join(lines))
        written += len(lines)
    return written


def timed(cmd: list[str]) -> tuple[float, str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    elapsed = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return elapsed, done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=1, help="runs per step; the fastest counts")
    parser.add_argument("--conf", action="append", default=[], help="passed to stats run")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bloomcast-bench-spark-"))
    try:
        spool, empty = root / "spool", root / "empty"
        spool.mkdir()
        empty.mkdir()
        t = time.perf_counter()
        n = generate(spool, args.events, args.files)
        print(f"generated {n} events in {args.files} files in {time.perf_counter() - t:.1f}s")
        stats = [
            sys.executable,
            "-m",
            "bloomcast.cli",
            "stats",
            "run",
            "--master",
            args.master,
            "--once",
            "--shuffle-partitions",
            "2",
            "--half-life",
            "1m,1h",
            *(f"--conf={c}" for c in args.conf),
        ]
        startups, jobs, anchors = [], [], []
        for r in range(max(1, args.repeat)):
            for o in ("o0", "o1"):  # every job run starts from no checkpoint, no output
                shutil.rmtree(root / o, ignore_errors=True)
            startups.append(timed([*stats, "--spool", str(empty), "--out", str(root / "o0")])[0])
            jobs.append(timed([*stats, "--spool", str(spool), "--out", str(root / "o1")]))
            _, anchor_out = timed([sys.executable, "-c", ANCHOR, args.master, str(spool)])
            counted, anchor_s = anchor_out.split()
            assert int(counted) == n, (counted, n)
            anchors.append(float(anchor_s))
            print(
                f"run {r + 1}: startup {startups[-1]:.1f}s, job {jobs[-1][0]:.1f}s, "
                f"anchor {anchors[-1]:.1f}s"
            )
        startup = min(startups)
        job, out = min(jobs)
        anchor_read = min(anchors)
        net = job - startup
        result = {
            "events": n,
            "master": args.master,
            "startup_s": round(startup, 2),
            "job_wall_s": round(job, 2),
            "events_per_s_wall": round(n / job),
            "events_per_s_excl_startup": round(n / net),
            "anchor_read_json_count_s": round(float(anchor_read), 2),
            "anchor_events_per_s": round(n / float(anchor_read)),
            "job_over_anchor_time": round(net / float(anchor_read), 2),
        }
        print(out.strip().splitlines()[-1])
        print(json.dumps(result, indent=2))
        print(
            f"| {n} | {args.master} | {job:.1f} s | {n / job:,.0f} | {n / net:,.0f} "
            f"| {float(anchor_read):.1f} s ({n / float(anchor_read):,.0f}/s) "
            f"| {net / float(anchor_read):.2f}x |"
        )
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
