"""router/latency.py's own rules (LATENCY GRAPH's sparkline, DOCTOR's advice)
and the events recorded outside commands, beside the differential tests
(tests/differential/test_latency.py) that compare LATENCY with redis-server
7.0.15 and see each event of a real node."""

from __future__ import annotations

import asyncio
import gc
import os
import time

import redis
from redis.client import PubSub

from bloomcast.testing.local_cluster import LocalCluster
from bloomcast.testing.slow_disk import command
from cluster_bus.nodes_file import NodesFile
from router.collector import Pauses
from router.config import NodeConfig
from router.latency import GRAPH_COLS, LatencyMonitor, Series, graph
from router.node import Node
from tests.cluster_bus.test_nodes_file import membership
from tests.integration.conftest import wait_for


def _series(samples: list[tuple[int, int]]) -> Series:
    series = Series()
    for when, ms in samples:
        series.add(ms, when)
    return series


def test_graph_scales_each_sample_into_twelve_steps_and_labels_it_vertically():
    """Low 1, high 9: 5 is step int(4 * 12 / 8) = 6 (``_`` of the second row
    from the bottom, filled ``|`` below), 9 is the top step 11 (``#``)."""
    now = 1_000_000
    text = graph("e", _series([(now - 2, 1), (now - 1, 5), (now, 9)]), now)
    assert text == (
        "e - high 9 ms, low 1 ms (all time high 9 ms)\n"
        + "-" * GRAPH_COLS
        + "\n  #\n _|\n ||\n_||\n   \n210\nsss\n"
    )


def test_graph_of_equal_samples_and_labels_in_minutes_hours_days():
    now = 10_000_000
    samples = [(now - 59, 3), (now - 60, 3), (now - 3 * 3600, 3), (now - 2 * 86400, 3)]
    text = graph("x", _series(sorted(samples)), now)
    rows = text.split("\n")[2:-1]
    assert rows[:4] == ["    ", "    ", "    ", "____"]  # all at step 0
    assert rows[4] == "    " and rows[5:] == ["2315", "dhm9", "   s"]


def test_graph_wraps_past_eighty_samples_into_another_block():
    now = 5000
    text = graph("w", _series([(now - 100 + i, 1 + i % 7) for i in range(100)]), now)
    blocks = text.split("\n\n")
    assert len(blocks) == 2
    first, second = (b.strip("\n").split("\n") for b in blocks)
    assert all(len(row) == GRAPH_COLS for row in first[2:])
    assert all(len(row) == 20 for row in second)


def test_doctor_advises_for_this_nodes_events_and_huge_pages():
    monitor = LatencyMonitor()
    assert "no latency spike" in monitor.report(5, 10000, huge_pages=False)
    assert "anonymous huge pages" in monitor.report(5, 10000, huge_pages=True)
    for event, words in [
        ("fanout-turn", "writing its clients' output"),
        ("bus-forward-run", "a peer forwarded took long"),
        ("collector-pause", "garbage collector stopped the node"),
        ("nodes-file-fsync", "use local disks for persistence"),
    ]:
        monitor.reset(None)
        monitor.add_if_needed(event, 7, 5)
        report = monitor.report(5, 10000, huge_pages=False)
        assert f"1. {event}: 1 latency spikes (average 7ms" in report
        assert "I have a few advices for you" in report and words in report
    monitor.reset(None)
    monitor.add_if_needed("something-else", 7, 5)
    assert "not able to suggest any easy fix" in monitor.report(5, 10000, huge_pages=False)


def test_a_collection_and_a_save_off_the_loop_are_events_on_the_loop(plane, tmp_path, monkeypatch):
    """A real collection long enough for a 1 ms threshold, and a save of a
    real nodes file on a disk whose fsync takes 20 ms, in its writer
    thread: both reach the monitor through the loop, as ``bloomcast node``
    wires them (Node.time_off_loop_events)."""
    fsync = os.fsync

    def slow(fd: int) -> None:
        time.sleep(0.02)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", slow)

    async def main() -> dict[str, Series]:
        node = Node(NodeConfig(port=0, latency_monitor_threshold=1), plane=plane)
        nodes_file = NodesFile(tmp_path / "nodes.conf")
        nodes_file.open()
        node.time_off_loop_events(asyncio.get_running_loop(), nodes_file)
        gc.callbacks.append(node.gc_pauses)
        try:
            junk = [[i, []] for i in range(300_000)]
            for pair in junk:
                pair[1].append(pair)  # cycles: the collection walks them all
            del junk
            gc.collect()
        finally:
            gc.callbacks.remove(node.gc_pauses)
            gc.unfreeze()  # (Pauses freezes after a full collection: not this process's)
        assert nodes_file.save(membership(), 1)
        await asyncio.get_running_loop().run_in_executor(None, nodes_file.flush, 10)
        for _ in range(10):
            await asyncio.sleep(0)
        nodes_file.close()
        return node.hooks.latency.events

    events = asyncio.run(main())
    assert events["collector-pause"].max >= 1
    assert events["nodes-file-fsync"].latest()[1] >= 40  # two fsyncs of 20 ms


def test_pauses_give_each_collection_to_the_sink():
    pauses = Pauses()
    seen: list[float] = []
    pauses.sink = seen.append
    pauses("start", {"generation": 0})
    pauses("stop", {"generation": 0, "collected": 0, "uncollectable": 0})
    assert len(seen) == 1 and seen[0] >= 0 and pauses.collections == 1


def _latest(port: int) -> dict[str, tuple[int, int, int]]:
    """LATENCY LATEST: event -> (unix seconds, ms, all-time worst ms)."""
    r = redis.Redis(port=port)
    try:
        return {
            e.decode(): (t, ms, worst) for e, t, ms, worst in r.execute_command("LATENCY LATEST")
        }
    finally:
        r.close()


def test_a_nodes_fan_out_its_forwarded_runs_and_its_nodes_file_are_latency_events(tmp_path):
    """Two real nodes started with ``--latency-monitor-threshold 1``; node 1
    on a disk whose file calls take 50 ms (its nodes file's save: two fsyncs,
    >= 100 ms) and with one client on 20 patterns that
    match ``big``. A 1 MB PUBLISH on node 0 reaches node 1 as a forwarded
    run that copies it into 20 pmessages (``bus-forward-run``) and a turn
    that writes those 20 MB (``fanout-turn``)."""
    patterns = [b"*" * (k + 1) for k in range(20)]
    payload = os.urandom(1 << 19).hex().encode()  # 1 MB
    cluster = LocalCluster(2, extra_args=["--latency-monitor-threshold", "1"], log_dir=tmp_path)
    try:
        cluster.start_node(0)
        slow = [*cluster.node_args(1)[4:], "--cluster-config-file", str(tmp_path / "n1.conf")]
        cluster.start_node(1, command(0.05, slow))
        cluster.wait_ready()
        with cluster.client(1) as subscriber, cluster.client(0) as publisher:
            pubsub = subscriber.pubsub()
            pubsub.psubscribe(*patterns)
            for _ in patterns:
                assert pubsub.get_message(timeout=10)["type"] == "psubscribe"
            wait_for(lambda: _probe(publisher, pubsub), 30, "node 0 routes 'big' to node 1")
            publisher.publish("big", payload)
            got = [pubsub.get_message(timeout=10) for _ in patterns]
            assert [m["data"] if m else None for m in got] == [payload] * len(patterns)
            events = _latest(cluster.ports[1])
            pubsub.close()
    finally:
        cluster.stop()
    assert events["bus-forward-run"][2] >= 1 and events["fanout-turn"][2] >= 1
    assert events["nodes-file-fsync"][2] >= 100


def _probe(publisher: redis.Redis, pubsub: PubSub) -> bool:
    """Publish a small probe; True once it arrived (every copy read)."""
    publisher.publish("big", b"probe")
    arrived = False
    while pubsub.get_message(timeout=0.3) is not None:
        arrived = True
    return arrived
