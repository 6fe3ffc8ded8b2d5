"""Membership that scales, with real node processes: one probe per period,
suspicion refuted by a node that comes back, a missed filter delta healed by
gossip (cluster_bus/membership.py; issue "Membership and heartbeats that scale").

Node timeout 2000 ms, so the protocol period is 200 ms.
"""

from __future__ import annotations

import time

import pytest

from bloomcast.testing import LocalCluster
from bloomcast.testing.faults import ProxiedCluster, info, pause, resume
from cluster_bus.frames import MsgType

pytestmark = [pytest.mark.cluster]

TIMEOUT_MS = 2000
PERIOD_S = 0.2
ARGS = ["--node-timeout-ms", str(TIMEOUT_MS), "--subscribe-visibility-timeout", "3000"]


def counter(cluster, i: int, name: str) -> int:
    return int(info(cluster, i).get(name, 0))


def wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def flags_seen_by(cluster, i: int) -> dict[int, str]:
    """CLUSTER NODES of node ``i``: client port -> flags."""
    with cluster.client(i) as r:
        lines = r.execute_command("CLUSTER", "NODES").decode().splitlines()
    out = {}
    for line in lines:
        fields = line.split()
        out[int(fields[1].split("@")[0].rsplit(":", 1)[1])] = fields[2]
    return out


def test_quiet_cluster_sends_one_probe_per_period_and_suspects_nobody(tmp_path):
    n = 6
    with LocalCluster(n, extra_args=ARGS, log_dir=tmp_path) as cluster:
        time.sleep(3 * PERIOD_S)
        before = [counter(cluster, i, "cluster_stats_messages_ping_sent") for i in range(n)]
        t0 = time.monotonic()
        time.sleep(3.0)
        after = [counter(cluster, i, "cluster_stats_messages_ping_sent") for i in range(n)]
        elapsed = time.monotonic() - t0
        for i in range(n):
            pings = after[i] - before[i]
            # one PING per period, plus the PINGs made for others' indirect
            # probes (none in a quiet cluster); all-pairs would be (n - 1) x
            assert 0 < pings <= elapsed / PERIOD_S + 2, (i, pings, elapsed)
            assert counter(cluster, i, "cluster_stats_suspicions") == 0
            assert counter(cluster, i, "cluster_stats_indirect_probes") == 0


@pytest.mark.slow
def test_stopped_node_is_failed_then_refutes_when_it_comes_back(tmp_path):
    n, victim = 4, 3
    with LocalCluster(n, extra_args=ARGS, log_dir=tmp_path) as cluster:
        port = cluster.ports[victim]
        pause(cluster, victim)
        try:
            wait_for(
                lambda: all("fail" in flags_seen_by(cluster, i)[port].split(",") for i in range(3)),
                timeout=6 * TIMEOUT_MS / 1000,
                what="every live node marking the stopped node FAIL",
            )
        finally:
            resume(cluster, victim)
        wait_for(
            lambda: all(flags_seen_by(cluster, i)[port] == "master" for i in range(3)),
            timeout=6 * TIMEOUT_MS / 1000,
            what="the FAIL flag cleared everywhere",
        )
        assert counter(cluster, victim, "cluster_stats_refutations") >= 1
        assert counter(cluster, victim, "cluster_my_incarnation") >= 1
        assert sum(counter(cluster, i, "cluster_stats_suspicions") for i in range(3)) >= 1
        # and it is routed to again
        with cluster.client(victim) as r:
            ps = r.pubsub()
            ps.subscribe("back")
            assert ps.get_message(timeout=5)["type"] == "subscribe"
            with cluster.client(0) as pub:
                pub.publish("back", "hi")
                got = ps.get_message(timeout=5)
                assert got is not None and got["data"] == b"hi"
            ps.close()


def test_missed_filter_delta_heals_without_all_pairs_heartbeats(tmp_path):
    n = 4
    with (
        ProxiedCluster(n, extra_args=ARGS, log_dir=tmp_path) as cluster,
        cluster.client(1) as r1,
        cluster.client(0) as r0,
    ):
        ps = r1.pubsub()
        ps.subscribe("primed")
        ps.get_message(timeout=5)
        r0.publish("primed", "x")
        assert ps.get_message(timeout=5)["data"] == b"x"
        requests = counter(cluster, 0, "cluster_stats_filter_requests_sent")
        # the next FILTER_DELTA towards node 0 is lost inside its TCP stream
        cluster.proxies[0].drop_frames(1, int(MsgType.FILTER_DELTA))
        ps.subscribe("after.the.loss")
        ps.get_message(timeout=10)
        wait_for(
            lambda: cluster.proxies[0].counts["frames_dropped"] == 1,
            5,
            "the delta to be dropped",
        )
        # node 0 notices from a fingerprint (gossip or node 1's heartbeat) and
        # fetches the filter (until then it fails open towards node 1)
        wait_for(
            lambda: counter(cluster, 0, "cluster_stats_filter_requests_sent") > requests,
            10,
            "node 0 asking node 1 for its filter",
        )
        wait_for(lambda: info(cluster, 0).get("cluster_filters_converged") == "1", 10, "converged")
        r0.publish("after.the.loss", "found")
        got = ps.get_message(timeout=5)
        assert got is not None and got["data"] == b"found"
        ps.close()
