"""Redis Cluster clients against a 3-node bloomcast cluster: the slot map they
need (CLUSTER SLOTS / SHARDS / NODES), redis-py ``RedisCluster`` pub/sub,
sharded pub/sub and patterns, ``redis-cli --cluster check``, and the map
recomputed when a node fails."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import time

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from bloomcast.testing import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(3, extra_args=["--node-timeout-ms", "2000"]) as c:
        c.wait_ready(60)
        yield c


def drain(get, want: int, seconds: float = 5.0) -> list[tuple]:
    out: list[tuple] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(out) < want:
        m = get(timeout=0.2)
        if m:
            out.append((m["type"], m["channel"], m["data"]))
    return out


def test_every_node_shows_the_same_full_slot_map(cluster):
    maps = [redis.Redis(port=p).execute_command("CLUSTER", "SLOTS") for p in cluster.ports]
    assert maps[0] == maps[1] == maps[2]
    ranges = sorted((int(r[0]), int(r[1])) for r in maps[0])
    assert ranges[0][0] == 0 and ranges[-1][1] == 16383
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))
    ports = sorted(int(r[2][1]) for r in maps[0])
    assert ports == sorted(cluster.ports)
    info = redis.Redis(port=cluster.ports[0]).cluster("info")
    assert info["cluster_slots_assigned"] == "16384" and info["cluster_size"] == "3"
    nodes = redis.Redis(port=cluster.ports[1]).execute_command("CLUSTER", "NODES")
    text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
    assert sum(1 for line in text.splitlines() if line.split()[-1][0].isdigit()) == 3


def test_redis_py_cluster_client_pubsub_patterns_and_sharded(cluster):
    rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", cluster.ports[0])])
    try:
        assert sorted(n.port for n in rc.get_nodes()) == sorted(cluster.ports)
        p = rc.pubsub()
        p.subscribe("news")
        p.psubscribe("n*")
        assert drain(p.get_message, 2) == [
            ("subscribe", b"news", 1),
            ("psubscribe", b"n*", 2),
        ]
        deadline = time.monotonic() + 10  # until every node's filter copy has it
        while time.monotonic() < deadline:
            receivers = sum(
                redis.Redis(port=port).publish("news", "probe") for port in cluster.ports
            )
            if receivers == 2:
                break
            time.sleep(0.1)
        drain(p.get_message, 100, seconds=1.0)
        for port in cluster.ports:  # published on every node, received once each
            redis.Redis(port=port).publish("news", f"from {port}")
        got = drain(p.get_message, 6)
        assert sorted(m for m in got if m[0] == "message") == sorted(
            ("message", b"news", f"from {port}".encode()) for port in cluster.ports
        )
        assert len([m for m in got if m[0] == "pmessage"]) == 3
        sp = rc.pubsub()
        sp.ssubscribe("orders{7}")
        assert drain(sp.get_sharded_message, 1) == [("ssubscribe", b"orders{7}", 1)]
        time.sleep(0.5)
        rc.spublish("orders{7}", "o1")
        assert drain(sp.get_sharded_message, 1) == [("smessage", b"orders{7}", b"o1")]
        p.close()
        sp.close()
    finally:
        rc.close()


@pytest.mark.skipif(
    shutil.which("redis-cli") is None, reason="redis-cli (Debian redis-tools) not installed"
)
def test_redis_cli_cluster_check_passes(cluster):
    out = subprocess.run(
        ["redis-cli", "--cluster", "check", f"127.0.0.1:{cluster.ports[0]}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "All nodes agree about slots configuration" in out.stdout
    assert "All 16384 slots covered" in out.stdout


def test_a_failed_node_slots_move_to_the_live_ones(cluster):
    """Killed with SIGKILL, marked FAIL: the survivors' map covers all 16384
    slots over the two of them, identically; the restart brings a third again."""
    cluster.kill(2)
    live = cluster.ports[:2]
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            maps = [redis.Redis(port=p).execute_command("CLUSTER", "SLOTS") for p in live]
            if all(len(m) == 2 for m in maps) and maps[0] == maps[1]:
                break
            time.sleep(0.2)
        assert len(maps[0]) == 2 and maps[0] == maps[1]
        assert {int(r[2][1]) for r in maps[0]} == set(live)
        info = redis.Redis(port=live[0]).cluster("info")
        assert info["cluster_state"] == "ok" and info["cluster_slots_ok"] == "16384"
    finally:
        cluster.restart(2)
        cluster.wait_ready(60)
