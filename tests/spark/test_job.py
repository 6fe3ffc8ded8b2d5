"""The Spark job on a real local[2] SparkSession, real spool files, a real valkey-server."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import redis

from bloomcast.cli import main as cli_main
from spark.decay import decay_rate, decayed_counts_by_key
from spark.events import TrafficEvent
from spark.job import STATS, JobConfig, dist_name, run_once, start_query
from spark.nodes import write_sidecar
from spark.sinks import (
    BATCH_KEY,
    EARLY_KEY,
    EVENTS_KEY,
    FILES_KEY,
    MALFORMED_KEY,
    RUN_KEY,
    RUNS_KEY,
    make_sinks,
    read_file_counters,
    read_file_distributions,
    read_file_nodes,
)
from spark.tap import TrafficTap
from tests.spark.events_data import BASE, NODES, expected_rows, lines_of, make_events

pytestmark = pytest.mark.spark

HALF_LIVES = (60.0, 3600.0)


def write_file(path: Path, lines: list[str], mtime: float) -> None:
    path.write_text("".join(lines))
    os.utime(path, (mtime, mtime))


def assert_close(got: dict[str, float], want: dict[str, float], what: str) -> None:
    assert set(got) == set(want), what
    for k, w in want.items():
        assert abs(got[k] - w) <= 1e-9 * abs(w), (what, k, got[k], w)


@pytest.fixture(scope="module")
def batch_run(spark, valkey_url, tmp_path_factory):
    """One --once run over a spool with duplicates, malformed lines and a .tmp file."""
    root = tmp_path_factory.mktemp("job")
    spool = root / "spool"
    spool.mkdir()
    events = make_events(1)
    chunks = [events[i * len(events) // 5 : (i + 1) * len(events) // 5] for i in range(5)]
    mtime = time.time() - 100
    for i, chunk in enumerate(chunks):
        lines = lines_of(chunk)
        if i == 2:
            lines[3:3] = [
                "not json\n",
                '{"event_id": "x-1"}\n',  # required fields missing
                '{"event_id":"y-1","time":"soon","node":"n","role":"origin","channel":"c"}\n',
                '{"event_id":"z-1","time":1.0,"node":"n","role":"sender","channel":"c"}\n',
                # stamped in the year 5138: too early (counted, not applied)
                '{"event_id":"f-1","time":1e11,"node":"n","role":"origin","channel":"c"}\n',
            ]
        write_file(spool / f"{NODES[0]}-{i:08d}.ndjson", lines, mtime + i)
    # the same events delivered again (a replayed spool): must not be counted twice
    write_file(spool / "replayed-00000000.ndjson", lines_of(chunks[1][:40]), mtime + 5)
    # a truncated last line (a crash mid-write of a file someone renamed anyway)
    write_file(spool / "truncated-00000000.ndjson", [lines_of(chunks[4][:1])[0][:30]], mtime + 6)
    # a partial file of the tap: never read
    tmp_event = TrafficEvent("t-1", BASE, NODES[0], "origin", "tmp-only", 1, 0, 0, 2, False)
    write_file(spool / "x-00000009.ndjson.tmp", lines_of([tmp_event]), mtime + 7)

    url = valkey_url.rsplit("/", 1)[0] + "/3"
    redis.Redis.from_url(url).flushdb()
    config = JobConfig(
        spool=str(spool),
        checkpoint=str(root / "checkpoint"),
        half_lives=HALF_LIVES,
        redis_url=url,
        out=str(root / "out"),
        max_files_per_trigger=2,
        dedup_window="1 hour",
    )
    batches = []
    run_once(spark, config, on_batch=lambda b, r: batches.append((b, r)))
    return {"events": events, "url": url, "out": root / "out", "batches": batches}


def test_decayed_counts_equal_numpy_in_redis(batch_run):
    client = redis.Redis.from_url(batch_run["url"], decode_responses=True)
    rows = expected_rows(batch_run["events"])
    assert len([b for b, r in batch_run["batches"] if r.events]) >= 3  # several micro-batches
    for stat in STATS:
        for h in HALF_LIVES:
            d = dist_name(stat, h)
            got = {b: s for b, s in client.zrange(d, 0, -1, withscores=True)}
            t = float(client.get(f"{d}._T"))
            want = decayed_counts_by_key(rows[stat], decay_rate(h), t)
            assert_close(got, want, d)
            assert float(client.get(f"{d}._Z")) == pytest.approx(sum(want.values()), rel=1e-12)
    assert "tmp-only" not in client.zrange("channels:1m", 0, -1)
    unique = len({(e.event_id, e.node) for e in batch_run["events"]})
    assert int(client.get(EVENTS_KEY)) == unique
    assert int(client.get(MALFORMED_KEY)) == 5  # 4 bad lines + 1 truncated line
    assert int(client.get(EARLY_KEY)) == 1  # the year-5138 event
    assert int(client.get(BATCH_KEY)) == batch_run["batches"][-1][0]


def test_decayed_counts_equal_numpy_in_files(batch_run):
    rows = expected_rows(batch_run["events"])
    state = read_file_distributions(batch_run["out"])
    for stat in STATS:
        for h in HALF_LIVES:
            scores, t, half = state[dist_name(stat, h)]
            assert half == h
            assert_close(scores, decayed_counts_by_key(rows[stat], decay_rate(h), t), stat)
    counters = read_file_counters(batch_run["out"])
    assert counters["malformed"] == 5
    assert counters["early"] == 1
    assert counters["events"] == len({(e.event_id, e.node) for e in batch_run["events"]})
    parquet = sorted((batch_run["out"] / "batches").glob("*.parquet"))
    assert parquet and not list((batch_run["out"] / "batches").glob("*.tmp"))


def test_stats_top_cli_decays_to_now(batch_run, capsys):
    rows = expected_rows(batch_run["events"])
    now = BASE + 2000.0
    a = decay_rate(60.0)
    want = decayed_counts_by_key(rows["channels"], a, now)
    z = sum(want.values())
    for source in (["--redis", batch_run["url"]], ["--out", str(batch_run["out"])]):
        code = cli_main(
            ["stats", "top", "channels:1m", "-n", "3", "--json", "--now", str(now), *source]
        )
        assert code == 0
        got = json.loads(capsys.readouterr().out)
        best = sorted(want.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        assert [r["bin"] for r in got] == [b for b, _ in best]
        for r, (_, c) in zip(got, best, strict=True):
            assert r["decayed count"] == pytest.approx(c, rel=1e-9)
            assert r["probability"] == pytest.approx(c / z, rel=1e-9)
            assert r["steady-state rate/s"] == pytest.approx(c * a, rel=1e-9)
    # derived views
    assert (
        cli_main(
            [
                "stats",
                "top",
                "false_positive_rate:1h",
                "--json",
                "--now",
                str(now),
                "--out",
                str(batch_run["out"]),
            ]
        )
        == 0
    )
    fp = json.loads(capsys.readouterr().out)
    recv = decayed_counts_by_key(rows["receiver"], decay_rate(3600.0), now)
    fps = decayed_counts_by_key(rows["false_positive"], decay_rate(3600.0), now)
    for r in fp:
        assert r["false-positive rate"] == pytest.approx(fps.get(r["node"], 0) / recv[r["node"]])
    assert (
        cli_main(
            [
                "stats",
                "top",
                "trending",
                "--json",
                "--now",
                str(now),
                "--out",
                str(batch_run["out"]),
            ]
        )
        == 0
    )
    trending = json.loads(capsys.readouterr().out)
    assert {r["channel"] for r in trending} <= {c for c, _, _ in rows["channels"]}
    assert trending == sorted(trending, key=lambda r: -r["ratio"])
    # Table output for a human, and a clear error for a bad name
    assert (
        cli_main(["stats", "top", "forwards:1m", "--now", str(now), "--out", str(batch_run["out"])])
        == 0
    )
    assert "saved" in capsys.readouterr().out
    assert cli_main(["stats", "top", "channels", "--out", str(batch_run["out"])]) == 2
    assert "half-life" in capsys.readouterr().err


# -- exactly once ---------------------------------------------------------------------


class Crash(RuntimeError):
    pass


def crash_at(batch_id: int, stage: str):
    def fault(b: int, s: str) -> None:
        if b == batch_id and s == stage:
            raise Crash(f"injected crash at batch {b} {stage} the sink writes")

    return fault


def redis_state(url: str) -> dict[str, object]:
    client = redis.Redis.from_url(url, decode_responses=True)
    state: dict[str, object] = {}
    for key in client.scan_iter():
        if key in (BATCH_KEY, RUN_KEY, RUNS_KEY):
            continue  # batch ids may differ (Spark's no-data batches), run ids do: the data may not
        if key == FILES_KEY:  # the files applied, without the times they were
            state[key] = sorted(client.zrange(key, 0, -1))
            continue
        if client.type(key) == "zset":
            state[key] = dict(client.zrange(key, 0, -1, withscores=True))
        else:
            state[key] = client.get(key)
    return state


def assert_same_state(got: dict[str, object], want: dict[str, object]) -> None:
    """Two :func:`redis_state` hold the same statistics (floats to 1e-12)."""
    assert set(got) == set(want)
    for key, value in want.items():
        if isinstance(value, dict):
            assert isinstance(got[key], dict) and got[key].keys() == value.keys(), key
            for b, s in value.items():
                assert got[key][b] == pytest.approx(s, rel=1e-12), (key, b)  # type: ignore[index]
        elif key.endswith("._Z"):
            assert float(got[key]) == pytest.approx(float(value), rel=1e-12)  # type: ignore[arg-type]
        else:
            assert got[key] == value, key


def test_exactly_once_across_crashes_restarts_and_duplicates(spark, valkey_url, tmp_path):
    events = make_events(2, n=150)
    files = [events[i * len(events) // 5 : (i + 1) * len(events) // 5] for i in range(5)]
    files.append(files[1][:20] + files[3][5:25])  # duplicates of earlier files
    mtime = time.time() - 100

    def place(spool: Path, indexes) -> None:
        for i in indexes:
            write_file(spool / f"n-{i:08d}.ndjson", lines_of(files[i]), mtime + i)

    def config(name: str, db: int) -> JobConfig:
        url = valkey_url.rsplit("/", 1)[0] + f"/{db}"
        redis.Redis.from_url(url).flushdb()
        return JobConfig(
            spool=str(tmp_path / name / "spool"),
            checkpoint=str(tmp_path / name / "checkpoint"),
            half_lives=(60.0,),
            redis_url=url,
            out=str(tmp_path / name / "out"),
            max_files_per_trigger=1,
            dedup_window="1 hour",
        )

    clean = config("clean", 1)
    os.makedirs(clean.spool)
    place(Path(clean.spool), range(6))
    run_once(spark, clean)

    crashed = config("crashed", 2)
    spool = Path(crashed.spool)
    os.makedirs(spool)
    place(spool, range(3))
    with pytest.raises(Exception, match="injected crash"):
        run_once(spark, crashed, fault=crash_at(1, "after"))  # committed to Redis, not to Spark
    with pytest.raises(Exception, match="injected crash"):
        run_once(spark, crashed, fault=crash_at(2, "before"))  # mid-batch, nothing written
    replayed: list[int] = []
    run_once(spark, crashed, on_batch=lambda b, r: replayed.append(b))  # stops between batches
    assert replayed[0] == 2  # the checkpoint resumed at the batch that crashed
    place(spool, range(3, 6))  # more files, one of them all duplicates
    run_once(spark, crashed)

    got, want = redis_state(crashed.redis_url), redis_state(clean.redis_url)
    assert_same_state(got, want)
    unique = len({(e.event_id, e.node) for e in events})
    assert int(got[EVENTS_KEY]) == unique
    # the file sink folds to the same distributions
    a, b = read_file_distributions(clean.out), read_file_distributions(crashed.out)
    assert a.keys() == b.keys()
    for d in a:
        assert b[d][1] == a[d][1]
        for k, v in a[d][0].items():
            assert b[d][0][k] == pytest.approx(v, rel=1e-12)


def test_streaming_job_skips_bad_input_and_keeps_running(spark, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    config = JobConfig(
        spool=str(spool),
        checkpoint=str(tmp_path / "checkpoint"),
        half_lives=(60.0,),
        out=str(tmp_path / "out"),
        once=False,
        trigger_interval="300 milliseconds",
        dedup_window="1 hour",
    )
    seen = {"events": 0, "malformed": 0}

    def on_batch(_b, r):
        seen["events"] += r.events
        seen["malformed"] += r.malformed

    def wait_for(cond, what):
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if cond():
                return
            assert query.exception() is None, query.exception()
            time.sleep(0.1)
        pytest.fail(f"timed out waiting for {what}")

    query = start_query(spark, config, make_sinks(config), on_batch=on_batch)
    try:
        write_file(spool / "bad.ndjson", ["\x00\x01 garbage\n", "{]\n", "[1,2]\n"], time.time())
        (spool / "half.ndjson.tmp").write_text('{"event_id": "a-1", "ti')
        wait_for(lambda: seen["malformed"] == 3, "the malformed lines to be counted")
        assert query.isActive
        # the node's own writer: the tap's files are what the job reads
        good = make_events(3, n=20)
        tap = TrafficTap(spool, node="tapnode")
        for e in good:
            tap.record(e)
        tap.close()
        assert tap.written == len(good) and tap.files == 1
        wait_for(lambda: seen["events"] == len(good), "the good file after the bad one")
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
    assert seen["malformed"] == 3
    assert "a-1" not in json.dumps(read_file_distributions(config.out))


def test_stats_run_cli_once(spark, tmp_path, capsys):
    spool = tmp_path / "spool"
    spool.mkdir()
    events = make_events(4, n=30)
    write_file(spool / "a.ndjson", lines_of(events), time.time())
    write_sidecar(spool, NODES[0], "10.0.0.5:7001")  # what a tap given its address writes
    out = tmp_path / "out"
    code = cli_main(
        [
            "stats",
            "run",
            "--spool",
            str(spool),
            "--master",
            "local[2]",
            "--half-life",
            "30s,10m",
            "--out",
            str(out),
            "--once",
            "--shuffle-partitions",
            "2",
        ]
    )
    assert code == 0
    printed = capsys.readouterr()
    assert f"{len({(e.event_id, e.node) for e in events})} events" in printed.out
    # progress while Spark starts (one line per phase: stderr is not a terminal here)
    assert "bloomcast stats run: starting Spark (master local[2]) ...\n" in printed.err
    assert "bloomcast stats run: reading the spool ...\n" in printed.err
    state = read_file_distributions(out)
    assert {"channels:30s", "channels:10m", "forwards:30s"} <= set(state)
    assert read_file_nodes(out) == {NODES[0]: "10.0.0.5:7001"}
    assert (out / "_checkpoint").is_dir()
    assert spark.sparkContext._jsc is not None  # the shared session was not stopped
    shutil.rmtree(out)
