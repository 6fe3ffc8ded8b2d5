"""Late, too-early and malformed input: nothing dropped without a counter.

A real local[2] SparkSession and a real valkey-server; the decayed sums are
compared with a direct forward-decay computation (:mod:`spark.decay`'s NumPy
reference) over exactly the events the job must apply.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import redis

from spark.decay import decay_rate, decayed_counts_by_key
from spark.events import TrafficEvent
from spark.job import STATS, JobConfig, dist_name, run_once
from spark.lateness import FileStats, WatermarkLog, late_thresholds
from spark.sinks import (
    EARLY_KEY,
    EVENTS_KEY,
    LATE_KEY,
    MALFORMED_KEY,
    SKEWED_KEY,
    read_file_counters,
    read_file_distributions,
)
from tests.spark.events_data import BASE, NODES, expected_rows, lines_of

HALF_LIVES = (60.0, 3600.0)


def origin(seq: int, t: float, channel: str = "news.a") -> TrafficEvent:
    return TrafficEvent(f"{NODES[0]}-{seq}", t, NODES[0], "origin", channel, 10, 1, 1, 2, False)


def write_file(path: Path, lines: list[str], mtime: float) -> None:
    path.write_text("".join(lines))
    os.utime(path, (mtime, mtime))


def test_late_thresholds_ignore_a_skewed_event_and_file_grouping() -> None:
    f1 = FileStats("a", mtime=BASE + 301, max_time=BASE + 2100, median_time=BASE + 150)
    f2 = FileStats("b", mtime=BASE + 700, max_time=BASE + 700, median_time=BASE + 550)
    f3 = FileStats("c", mtime=BASE + 800, max_time=BASE - 2900, median_time=BASE - 2950)
    one, w1 = late_thresholds([f1], None, 600.0)
    two, w2 = late_thresholds([f3, f2], w1, 600.0)  # any order in: walked by mtime
    together, w = late_thresholds([f2, f3, f1], None, 600.0)
    assert w1 == BASE + 301  # the skewed +30 min event is clamped to the file's mtime
    assert together == {**one, **two} and w == w2 == BASE + 700
    assert together["b"] == BASE + 301 - 600  # real traffic after the skewed event: on time
    assert together["c"] == BASE + 700 - 600


def test_a_replayed_batch_sees_the_watermark_it_saw_before_a_restart(tmp_path: Path) -> None:
    log = WatermarkLog(str(tmp_path / "ck"))
    log.record(0, None)
    log.record(1, BASE + 10)
    log.record(2, BASE + 20)  # batch 2 reached the sinks, then the driver died
    again = WatermarkLog(str(tmp_path / "ck"))
    assert again.before(2) == BASE + 10 and again.before(3) == BASE + 20
    assert again.before(0) is None


@pytest.fixture
def skewed_spool(tmp_path: Path) -> dict[str, object]:
    """Four files, mtimes as the tap writes them (just after their last event)."""
    spool = tmp_path / "spool"
    spool.mkdir()
    bulk1 = [origin(i, BASE + 3 * i, f"news.{'abc'[i % 3]}") for i in range(100)]
    skewed = origin(100, BASE + 2100)  # 30 min after its file was written: inside the skew
    bulk2 = [origin(200 + i, BASE + 400 + 3 * i, f"news.{'abd'[i % 3]}") for i in range(100)]
    late = [origin(300 + i, BASE + 700 - 3600 + i, "sport") for i in range(50)]  # 1 h behind
    early = [origin(400 + i, BASE + 900 + 7200 + i, "future") for i in range(2)]  # 2 h ahead
    bad = ["not json\n", "not json\n", '{"event_id": "x"}\n']  # the same bad line twice
    write_file(spool / "n-00000001.ndjson", lines_of([*bulk1, skewed]), BASE + 301)
    write_file(spool / "n-00000002.ndjson", lines_of(bulk2), BASE + 700)
    write_file(spool / "n-00000003.ndjson", lines_of(late), BASE + 800)
    write_file(spool / "n-00000004.ndjson", lines_of(early) + bad, BASE + 900)
    # the skewed event is applied at its file's write time
    clamped = dataclasses.replace(skewed, time=BASE + 301)
    return {"spool": spool, "applied": [*bulk1, clamped, *bulk2, *late]}


@pytest.mark.spark
@pytest.mark.parametrize("files_per_batch", [1, 4])
def test_late_skewed_and_repeated_malformed_lines_are_counted_exactly(
    spark, valkey_url, tmp_path, skewed_spool, files_per_batch
) -> None:
    url = valkey_url.rsplit("/", 1)[0] + f"/{5 + files_per_batch}"
    redis.Redis.from_url(url).flushdb()
    config = JobConfig(
        spool=str(skewed_spool["spool"]),
        checkpoint=str(tmp_path / "checkpoint"),
        half_lives=HALF_LIVES,
        redis_url=url,
        out=str(tmp_path / "out"),
        max_files_per_trigger=files_per_batch,
        dedup_window="1 hour",
        max_clock_skew=3600.0,
        allowed_lateness=600.0,
    )
    results = []
    run_once(spark, config, on_batch=lambda b, r: results.append(r))
    applied = skewed_spool["applied"]
    assert isinstance(applied, list)
    want_counts = {"events": len(applied), "late": 50, "skewed": 1, "early": 2, "malformed": 3}
    assert {k: sum(getattr(r, k) for r in results) for k in want_counts} == want_counts
    assert all(r.applied for r in results)
    client = redis.Redis.from_url(url, decode_responses=True)
    keys = {
        "events": EVENTS_KEY,
        "late": LATE_KEY,
        "skewed": SKEWED_KEY,
        "early": EARLY_KEY,
        "malformed": MALFORMED_KEY,
    }
    assert {k: int(client.get(key)) for k, key in keys.items()} == want_counts
    counters = read_file_counters(config.out)
    assert {k: counters[k] for k in want_counts} == want_counts
    rows = expected_rows(applied)
    files = read_file_distributions(config.out)
    for stat in STATS:
        for h in HALF_LIVES:
            d = dist_name(stat, h)
            if not rows[stat]:
                assert not client.exists(d)  # origin events only: no receiver stats
                continue
            got = {b: s for b, s in client.zrange(d, 0, -1, withscores=True)}
            t = float(client.get(f"{d}._T"))
            assert t == BASE + 697  # the landmark: the latest applied event (skewed: clamped)
            want = decayed_counts_by_key(rows[stat], decay_rate(h), t)
            assert got.keys() == want.keys(), d
            for b, w in want.items():
                assert abs(got[b] - w) <= 1e-9 * w, (d, b, got[b], w)
                assert abs(files[d][0][b] - w) <= 1e-9 * w, (d, b)
    assert "sport" in client.zrange("channels:1h", 0, -1)  # late: applied
    assert "future" not in client.zrange("channels:1h", 0, -1)  # too early: counted only
