"""BLOOMCAST.HOTCHANNELS CLUSTER on real node processes (issue 51): every
node's summary fetched over the bus (STATS_REQUEST / STATS_REPLY) and merged,
each PUBLISH counted once as a publish (at its origin), forwards and
receptions as such, errors summed with the floors of the nodes that did not
hold a name."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from bloomcast.testing import LocalCluster

pytestmark = pytest.mark.cluster

A1 = math.log(2.0) / 60.0
FLAGS = ["--node-timeout-ms", "3000", "--subscribe-visibility-timeout", "2000"]


def rows(reply: list[Any]) -> dict[str, dict[str, Any]]:
    """RESP3's maps (or RESP2's flat arrays) -> name -> fields (as floats)."""
    out = {}
    for item in reply:
        entry = (
            dict(item) if isinstance(item, dict) else dict(zip(item[::2], item[1::2], strict=True))
        )
        name = entry.pop(b"name").decode()
        out[name] = {k.decode(): float(v) for k, v in entry.items()}
    return out


def test_the_cluster_view_merges_every_node_and_counts_each_publish_once(tmp_path):
    cluster = LocalCluster(3, extra_args=FLAGS, log_dir=tmp_path)
    try:
        cluster.start()
        with cluster.client(1) as r1:
            ps = r1.pubsub()
            ps.subscribe("shared")
            assert ps.get_message(timeout=5)["type"] == "subscribe"
            plan = {0: {"shared": 40, "a0": 12}, 1: {"shared": 20, "b1": 6}, 2: {"shared": 10}}
            for i, counts in plan.items():
                with cluster.client(i) as c, c.pipeline(transaction=False) as pipe:
                    for channel, n in counts.items():
                        for _ in range(n):
                            pipe.publish(channel, "m")
                    pipe.execute()
            got = 0
            deadline = time.monotonic() + 10
            while got < 70 and time.monotonic() < deadline:
                if ps.get_message(timeout=1) is not None:
                    got += 1
            assert got == 70
            ps.close()
        with cluster.client(2) as c:
            merged = rows(c.execute_command("BLOOMCAST.HOTCHANNELS", "CLUSTER", "COUNT", "5"))
            alone = rows(c.execute_command("BLOOMCAST.HOTCHANNELS", "COUNT", "5"))
            by_received = c.execute_command("BLOOMCAST.HOTCHANNELS", "CLUSTER", "BY", "received")
        assert list(merged) == ["shared", "a0", "b1"]
        shared = merged["shared"]
        # 70 publishes in the cluster, counted at their origins only; decayed
        # a few seconds at most under 1 m
        assert 0.85 * 70 * A1 < shared["publishes"] <= 70 * A1
        assert shared["received"] == pytest.approx(50 / 70 * shared["publishes"], rel=0.05)
        assert shared["forwards"] == pytest.approx(shared["received"], rel=0.05)
        assert shared["deliveries"] == pytest.approx(shared["publishes"], rel=0.05)
        assert shared["nodes"] == 3 and shared["error"] == 0.0
        # a0 only node 0 held: the other two nodes' floors are its error
        assert merged["a0"]["nodes"] == 1 and merged["a0"]["error"] > 0
        assert 0.85 * 12 * A1 < merged["a0"]["publishes"] <= 12 * A1
        assert "nodes" not in alone["shared"]
        assert alone["shared"]["publishes"] < shared["publishes"] / 5  # node 2's 10 of 70
        assert rows(by_received)["shared"]["received"] == pytest.approx(
            shared["received"], rel=0.05
        )
        fields = cluster.cluster_info(2)
        assert fields["cluster_stats_messages_stats_request_sent"] == "4"  # 2 calls x 2 peers
        assert fields["cluster_stats_messages_stats_reply_received"] == "4"
        assert fields["cluster_stats_stats_unanswered"] == "0"
    finally:
        cluster.stop()
