"""Exactly once with the spool read over HTTP (``stats run --nodes``), on the shared
local[2] SparkSession, a real valkey-server, the node's spool server in a process
of its own and real node processes: a job killed between its sink and its
checkpoint, two jobs writing one Redis, a node killed with -9 mid-write."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import redis

from bloomcast.cli import main as cli_main
from spark.job import JobConfig, run_once, start_query
from spark.runs import open_sinks
from spark.sinks import EVENTS_KEY, MALFORMED_KEY
from spark.spool_client import release_committed
from tests.spark.events_data import make_events
from tests.spark.spool_nodes import SpoolNode as NodeProcess
from tests.spark.spool_nodes import chunks, spool_server, wait_until, write_spool_file
from tests.spark.test_job import assert_same_state, crash_at, redis_state

pytestmark = pytest.mark.spark

A, B = "a" * 40, "b" * 40


def db(valkey_url: str, n: int) -> str:
    url = valkey_url.rsplit("/", 1)[0] + f"/{n}"
    redis.Redis.from_url(url).flushdb()
    return url


def fill(spool: Path, files: list[list], t0: float) -> list[str]:  # type: ignore[type-arg]
    """File i -> writer A (even i) or B (odd i), numbered per writer; oldest first."""
    spool.mkdir(parents=True, exist_ok=True)
    names = []
    for i, chunk in enumerate(files):
        path = write_spool_file(spool, (A, B)[i % 2], i // 2, chunk, t0 + i)
        names.append(path.name)
    return names


def config(tmp_path: Path, name: str, url: str, **kwargs) -> JobConfig:  # type: ignore[no-untyped-def]
    kwargs.setdefault("max_files_per_trigger", 1)
    return JobConfig(
        spool=kwargs.pop("spool", ""),
        checkpoint=str(tmp_path / name / "checkpoint"),
        half_lives=(60.0,),
        redis_url=url,
        out=str(tmp_path / name / "out"),
        dedup_window="1 hour",
        **kwargs,
    )


def reference(spark, tmp_path: Path, url: str, seed: int, parts: int):  # type: ignore[no-untyped-def]
    """Seeded events in ``parts`` files (the last written 95 s ago), and the file source
    over them in one spool into ``url``: what every other run must equal.
    Returns (events, files, t0, url)."""
    events = make_events(seed, n=25 * parts)
    files = chunks(events, parts)
    t0 = time.time() - 100
    clean = config(tmp_path, "clean", url, spool=str(tmp_path / "all"))
    fill(tmp_path / "all", files, t0)
    run_once(spark, clean)
    return events, files, t0, url


@pytest.mark.long
def test_network_source_is_exact_across_a_job_killed_between_sink_and_checkpoint(
    spark, valkey_url, tmp_path
):
    events, files, t0, clean = reference(spark, tmp_path, db(valkey_url, 5), 41, 6)

    served = tmp_path / "served"
    names = fill(served, files, t0)
    with spool_server(served) as address:
        net = config(tmp_path, "net", db(valkey_url, 6), nodes=address)
        with pytest.raises(Exception, match="injected crash"):
            run_once(spark, net, fault=crash_at(1, "after"))  # in Redis, not in the checkpoint
        # batch 0 is committed: deleted on the node; batch 1 is not: still there
        left = sorted(p.name for p in served.glob("*.ndjson"))
        assert names[0] not in left and names[1] in left
        with pytest.raises(Exception, match="injected crash"):
            run_once(spark, net, fault=crash_at(2, "before"))
        seen: list[tuple[int, bool]] = []
        run_once(spark, net, on_batch=lambda b, r: seen.append((b, r.applied)))
        assert seen[0] == (2, True)  # batch 1 was replayed before and skipped
        release_committed(net.checkpoint, address)  # what --once does at the end
        assert list(served.glob("*.ndjson")) == []  # every file applied, then deleted
    got, want = redis_state(net.redis_url), redis_state(clean)
    assert_same_state(got, want)
    assert int(got[EVENTS_KEY]) == len({(e.event_id, e.node) for e in events})


def test_two_jobs_into_one_redis_count_each_file_once(spark, valkey_url, tmp_path):
    _, files, t0, clean = reference(spark, tmp_path, db(valkey_url, 7), 42, 3)

    # two spools that overlap in file 1 (a copy: same name, same mtime)
    url = db(valkey_url, 8)
    names = fill(tmp_path / "one", files[:2], t0)
    fill(tmp_path / "two", files, t0)
    (tmp_path / "two" / names[0]).unlink()
    first = config(tmp_path, "first", url, spool=str(tmp_path / "one"))
    run_once(spark, first)
    # one batch holding the applied file 1 and the new file 2: only file 2 is added
    second = config(tmp_path, "second", url, spool=str(tmp_path / "two"),
                    max_files_per_trigger=10, on_conflict="continue")  # fmt: skip
    added: list[int] = []
    run_once(spark, second, on_batch=lambda b, r: added.append(r.events))
    assert added == [len(files[2])]
    assert_same_state(redis_state(url), redis_state(clean))


@pytest.mark.long
def test_two_streaming_jobs_on_one_node_and_one_redis(spark, valkey_url, tmp_path):
    events, files, t0, clean = reference(spark, tmp_path, db(valkey_url, 9), 43, 8)

    url = db(valkey_url, 10)
    served = tmp_path / "served"
    served.mkdir()
    with spool_server(served) as address:
        queries = []
        for name in ("left", "right"):
            job = config(tmp_path, name, url, nodes=address, once=False,
                         trigger_interval="300 milliseconds", query_name=f"q_{name}")  # fmt: skip
            sinks, _ = open_sinks(job, job.checkpoint, "continue")
            queries.append(start_query(spark, job, sinks))
        try:
            for i, chunk in enumerate(files):  # files arrive while both jobs run
                write_spool_file(served, (A, B)[i % 2], i // 2, chunk, t0 + i)
                time.sleep(0.3)
            client = redis.Redis.from_url(url)
            wait_until(lambda: int(client.get(EVENTS_KEY) or 0) >= len(events), "every event", 120)
            wait_until(lambda: not list(served.glob("*.ndjson")), "the node's retention", 60)
            time.sleep(2)  # a few more triggers of both jobs: nothing more may be applied
            for q in queries:
                assert q.exception() is None
        finally:
            for q in queries:
                q.stop()
    assert_same_state(redis_state(url), redis_state(clean))


def test_kill_9_spooled_traffic_is_counted_once_by_the_next_node(valkey_url, tmp_path, spark):
    spool = tmp_path / "spool"

    def open_files(node_id: str) -> list[Path]:
        return list(spool.glob(f"{node_id}-*.ndjson.tmp"))

    first = NodeProcess(spool).start()
    neighbour = NodeProcess(spool).start()  # another node sharing the spool directory
    try:
        dead = first.publish(200)
        neighbour.publish(100)
        first.kill()  # its .tmp stays behind, under an id that never comes back
        assert open_files(dead)
        # the neighbour completes it (its lock is free now) within a rotation period
        wait_until(lambda: not open_files(dead), "the neighbour to complete it", 30)
        restarted = NodeProcess(spool).start()  # a new id on the same spool
        dead_again = restarted.publish(120)
        restarted.kill()
        again = NodeProcess(spool).start()  # completes it at its first tick
        wait_until(lambda: not open_files(dead_again), "the next node to complete it", 30)
        again.publish(30)
        again.stop()  # graceful: its file completes
        wait_until(lambda: not list(spool.glob("*.ndjson.tmp")), "the neighbour's rotation", 30)
        url = db(valkey_url, 13)
        assert cli_main(
            ["stats", "run", "--nodes", neighbour.address, "--once", "--redis", url,
             "--checkpoint", str(tmp_path / "ck"), "--master", "local[2]",
             "--shuffle-partitions", "2"]
        ) == 0  # fmt: skip
        client = redis.Redis.from_url(url)
        assert int(client.get(EVENTS_KEY)) == 200 + 100 + 120 + 30  # each event once
        assert int(client.get(MALFORMED_KEY)) == 0
        assert list(spool.glob("*.ndjson")) == []  # committed, so deleted
    finally:
        for node in (first, neighbour):
            node.kill()
        shutil.rmtree(spool, ignore_errors=True)


def test_a_streaming_job_loses_nothing_when_its_node_is_killed(valkey_url, tmp_path, spark):
    url = db(valkey_url, 14)
    node = NodeProcess(tmp_path / "spool").start()
    job = config(tmp_path, "job", url, nodes=node.address, once=False,
                 trigger_interval="300 milliseconds", query_name="q_node_crash")  # fmt: skip
    query = start_query(spark, job, open_sinks(job, job.checkpoint)[0])
    client = redis.Redis.from_url(url)
    try:
        node.publish(100)
        node.kill()  # mid-stream: its open file holds the 100 events
        time.sleep(1)  # the job finds it down (and carries on)
        node.start()  # a new id, the same spool and ports: completes the dead id's file
        node.publish(50)
        wait_until(lambda: int(client.get(EVENTS_KEY) or 0) >= 150, "every event", 90)
        time.sleep(2)  # more triggers: nothing is applied twice
        assert query.exception() is None
        assert int(client.get(EVENTS_KEY)) == 150
        assert list((tmp_path / "spool").glob("*.ndjson")) == []
    finally:
        query.stop()
        node.kill()
