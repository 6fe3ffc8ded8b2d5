"""bench/redis_cluster.py: a real Redis Cluster (valkey-server) on loopback, the
anchor of the broadcast claim: every PUBLISH crosses the bus to all N-1 peers."""

import itertools
import time

import pytest

from bench.procs import tcp_bytes_sent
from bench.redis_cluster import CLUSTER_SLOTS, RedisCluster, slot_ranges
from bloomcast.testing import parse_info, redis_server_path


def test_slot_ranges_cover_every_slot_once():
    for n in (1, 3, 6, 12):
        ranges = slot_ranges(n)
        assert len(ranges) == n
        assert ranges[0][0] == 0 and ranges[-1][1] == CLUSTER_SLOTS - 1
        for (_, hi), (lo, _) in itertools.pairwise(ranges):
            assert lo == hi + 1
        sizes = [hi - lo + 1 for lo, hi in ranges]
        assert max(sizes) - min(sizes) <= 1


def test_parse_info_skips_headers():
    assert parse_info("# Cluster\r\ncluster_state:ok\r\nx:1:2\r\n") == {
        "cluster_state": "ok",
        "x": "1:2",
    }


def _publish_and_count(rc: RedisCluster, publishes: int):
    """Subscribe on node 0, PUBLISH from node 1; return deltas and receipts."""
    sub = rc.client(0)
    pubsub = sub.pubsub()
    pubsub.subscribe("bench-ch")
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    before = rc.publish_counters()
    bytes_before = rc.bus_bytes_sent()
    info_before = rc.cluster_info(1)
    with rc.client(1) as pub:
        for _ in range(publishes):
            pub.publish("bench-ch", "hello")
    got = 0
    deadline = time.monotonic() + 10
    while got < publishes and time.monotonic() < deadline:
        if pubsub.get_message(timeout=1):
            got += 1
    after = rc.settled_counters()
    bytes_after = rc.bus_bytes_sent()
    info_after = rc.cluster_info(1)
    pubsub.close()
    sub.close()
    return before, after, bytes_after - bytes_before, info_before, info_after, got


def test_valkey_cluster_broadcasts_every_publish_to_all_peers():
    publishes = 50
    with RedisCluster(3) as rc:
        assert len(rc.ports) == 3
        for i in range(3):
            info = rc.cluster_info(i)
            assert info["cluster_state"] == "ok"
            assert info["cluster_known_nodes"] == "3"
        before, after, bus_bytes, ib, ia, got = _publish_and_count(rc, publishes)
        procs = [node.proc for node in rc.nodes]
        bus_ports = rc.bus_ports
    assert got == publishes
    # one subscriber, yet each PUBLISH goes to both other nodes
    assert after.sent - before.sent == publishes * (3 - 1)
    assert after.received - before.received == publishes * (3 - 1)
    # the kernel saw at least the pubsub bytes valkey says it sent on the bus
    key = "cluster_stats_pubsub_bytes_sent"
    assert key in ia, "valkey >= 8 reports pubsub bus bytes"
    counted = int(ia[key]) - int(ib.get(key, 0))
    assert counted > 0
    assert bus_bytes >= counted
    # the context manager stopped everything
    assert all(p.poll() is not None for p in procs)
    assert tcp_bytes_sent(bus_ports) == 0


@pytest.mark.skipif(
    redis_server_path() is None, reason="Debian's redis-server is not installed (optional anchor)"
)
def test_redis_server_cluster_sends_full_header_per_peer():
    publishes = 20
    with RedisCluster(3, binary=redis_server_path()) as rc:
        assert rc.version.startswith("Redis ")
        before, after, bus_bytes, _, _, got = _publish_and_count(rc, publishes)
    assert got == publishes
    assert after.sent - before.sent == publishes * 2
    # Redis 7.0 puts a 2256-byte header (clusterMsg) on every bus PUBLISH
    assert bus_bytes >= publishes * 2 * 2256
