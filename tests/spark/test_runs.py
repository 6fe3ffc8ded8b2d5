"""Runs are identified: two checkpoints against one Redis and one --out, and the
run summary after a crash-restart (a real local[2] SparkSession, a real valkey-server)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

from bloomcast.cli import main as cli_main
from spark.decay import decay_rate, decayed_counts_by_key
from spark.events import TrafficEvent
from spark.job import JobConfig, run_once
from spark.runs import RUN_FILE
from spark.sinks import EVENTS_KEY, RUN_KEY, read_file_counters, read_file_distributions
from tests.spark.events_data import expected_rows, lines_of, make_events

pytestmark = pytest.mark.spark


def spool_of(root: Path, events: list[TrafficEvent], files: int) -> Path:
    spool = root / "spool"
    spool.mkdir(parents=True)
    for i in range(files):
        chunk = events[i * len(events) // files : (i + 1) * len(events) // files]
        path = spool / f"n-{i:08d}.ndjson"
        path.write_text("".join(lines_of(chunk)))
        mtime = max(e.time for e in chunk) + 1
        os.utime(path, (mtime, mtime))
    return spool


def redis_state(url: str) -> dict[str, object]:
    client = redis.Redis.from_url(url, decode_responses=True)
    state: dict[str, object] = {}
    for k in client.scan_iter():
        kind = client.type(k)
        if kind == "zset":
            state[k] = dict(client.zrange(k, 0, -1, withscores=True))
        else:
            state[k] = client.hgetall(k) if kind == "hash" else client.get(k)
    return state


def assert_channels(url: str, *runs: list[TrafficEvent]) -> None:
    """channels:1m in Redis equals a direct forward decay over every run's events."""
    client = redis.Redis.from_url(url, decode_responses=True)
    t = float(client.get("channels:1m._T"))
    rows = [r for events in runs for r in expected_rows(events)["channels"]]
    want = decayed_counts_by_key(rows, decay_rate(60.0), t)
    got = dict(client.zrange("channels:1m", 0, -1, withscores=True))
    assert got.keys() == want.keys()
    for b, w in want.items():
        assert abs(got[b] - w) <= 1e-9 * w, (b, got[b], w)


def stats_run(spool: Path, url: str, out: Path, checkpoint: Path, *flags: str) -> int:
    return cli_main(
        [
            "stats", "run", "--spool", str(spool), "--redis", url, "--out", str(out),
            "--checkpoint", str(checkpoint), "--half-life", "1m", "--master", "local[2]",
            "--shuffle-partitions", "2", "--dedup-window", "1 hour", *flags,
        ]
    )  # fmt: skip


def test_second_checkpoint_is_refused_then_continues_or_starts_fresh(
    spark, valkey_url, tmp_path, capsys
) -> None:
    url = valkey_url.rsplit("/", 1)[0] + "/11"
    redis.Redis.from_url(url).flushdb()
    out = tmp_path / "out"
    a_events, b_events = make_events(11, n=40), make_events(12, n=40)
    spool_a = spool_of(tmp_path / "a", a_events, 2)
    spool_b = spool_of(tmp_path / "b", b_events, 2)
    ck1, ck2, ck3 = tmp_path / "ck1", tmp_path / "ck2", tmp_path / "ck3"
    run_once(
        spark,
        JobConfig(spool=str(spool_a), checkpoint=str(ck1), half_lives=(60.0,), redis_url=url,
                  out=str(out), dedup_window="1 hour"),
    )  # fmt: skip
    run_a = (ck1 / RUN_FILE).read_text().strip()
    before, files_before = redis_state(url), sorted(os.listdir(out / "batches"))
    assert before[RUN_KEY] == run_a and all(f.startswith(run_a) for f in files_before)

    # a new checkpoint: refused before Spark starts, nothing written
    assert stats_run(spool_b, url, out, ck2) == 2
    err = capsys.readouterr().err
    run_b = (ck2 / RUN_FILE).read_text().strip()
    assert err == (
        f"bloomcast stats run: Redis {url} holds run {run_a} and {out} holds run {run_a}, "
        f"but checkpoint {ck2} is run {run_b}: pass --continue to add this run to those "
        "statistics, or --fresh to delete them and start over\n"
    )
    assert redis_state(url) == before and sorted(os.listdir(out / "batches")) == files_before

    # --continue: run B's events are added to run A's state; A's files are kept
    assert stats_run(spool_b, url, out, ck2, "--continue") == 0
    assert f"{len(b_events)} events applied" in capsys.readouterr().out
    assert redis.Redis.from_url(url, decode_responses=True).get(RUN_KEY) == run_b
    assert_channels(url, a_events, b_events)
    assert int(redis.Redis.from_url(url).get(EVENTS_KEY)) == len(a_events) + len(b_events)
    assert set(files_before) <= set(os.listdir(out / "batches"))
    assert read_file_counters(out)["events"] == len(a_events) + len(b_events)

    # --fresh: a third checkpoint deletes the other runs' statistics first
    assert stats_run(spool_b, url, out, ck3, "--fresh") == 0
    run_c = (ck3 / RUN_FILE).read_text().strip()
    assert_channels(url, b_events)
    assert int(redis.Redis.from_url(url).get(EVENTS_KEY)) == len(b_events)
    assert all(f.startswith(run_c) for f in os.listdir(out / "batches"))
    state = read_file_distributions(out)["channels:1m"]
    want = decayed_counts_by_key(expected_rows(b_events)["channels"], decay_rate(60.0), state[1])
    assert state[0].keys() == want.keys()


def test_summary_counts_applied_batches_not_replays(spark, valkey_url, tmp_path, capsys) -> None:
    url = valkey_url.rsplit("/", 1)[0] + "/12"
    redis.Redis.from_url(url).flushdb()
    events = make_events(13, n=30)
    spool = spool_of(tmp_path, events, 3)
    sizes = [len(events[i * len(events) // 3 : (i + 1) * len(events) // 3]) for i in range(3)]
    ck = tmp_path / "ck"

    def crash_after_1(batch_id: int, stage: str) -> None:
        if batch_id == 1 and stage == "after":
            raise RuntimeError("injected crash after batch 1 reached the sinks")

    config = JobConfig(
        spool=str(spool),
        checkpoint=str(ck),
        half_lives=(60.0,),
        redis_url=url,
        out=str(tmp_path / "out"),
        max_files_per_trigger=1,
        dedup_window="1 hour",
    )
    with pytest.raises(Exception, match="injected crash"):
        run_once(spark, config, fault=crash_after_1)
    capsys.readouterr()
    code = stats_run(spool, url, tmp_path / "out", ck, "--max-files-per-trigger", "1")
    assert code == 0
    out = capsys.readouterr().out
    # batch 1 is replayed (the sinks already hold it): only batch 2 is applied now
    assert f"1 batches, {sizes[2]} events applied (0 late, 0 clock-skewed), 0 too early" in out
    assert "1 replayed batches skipped" in out
    assert int(redis.Redis.from_url(url).get(EVENTS_KEY)) == len(events)
