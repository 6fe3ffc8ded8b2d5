"""A hundred node processes (issue 40), under ``--long`` (about 3 GB and two
minutes on 2 cores; ``flock /work/heavy.lock`` on a shared machine): started
at once they form (every node knows every other, holds every filter, has
verified every peer), the start-up work per node stays O(N), and PUBLISH is
routed to the exact minimum of bus messages, each delivered once. The
numbers beside Redis Cluster are ``bloomcast bench scale``'s."""

from __future__ import annotations

import time

import pytest

from bloomcast.testing.ledger import Subscriber
from bloomcast.testing.local_cluster import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.long]

N = 100


def _sum(cluster: LocalCluster, key: str) -> int:
    return sum(int(cluster.cluster_info(i).get(key, 0)) for i in range(cluster.size))


@pytest.mark.timeout(900)
def test_a_hundred_nodes_started_at_once_form_and_route_to_the_minimum():
    cluster = LocalCluster(N, extra_args=["--node-timeout-ms", "15000"])
    subs: list[Subscriber] = []
    try:
        t0 = time.monotonic()
        for i in range(N):
            cluster.start_node(i)
        cluster.wait_ready(300)
        print(f"{N} nodes ready in {time.monotonic() - t0:.1f} s")
        infos = [cluster.cluster_info(i) for i in range(N)]
        assert all(info["cluster_known_nodes"] == str(N) for info in infos)
        # O(N) per node: a MEET per link dialled, two filters per peer (a few
        # more when a request crossed a change), and no storm
        meets = [int(info["cluster_stats_messages_meet_sent"]) for info in infos]
        fulls = [int(info["cluster_stats_messages_filter_full_sent"]) for info in infos]
        assert max(meets) <= 2 * (N - 1), meets
        assert sum(fulls) / N <= 3 * (N - 1), fulls
        assert sum(int(info["cluster_stats_suspicions"]) for info in infos) <= N // 10
        # one subscriber on each of 10 nodes, each its own channel
        nodes = [1 + j * (N - 1) // 10 for j in range(10)]
        for j, i in enumerate(nodes):
            addr = (cluster.host, cluster.ports[i])
            subs.append(Subscriber(f"s{j}", addr, channels=(f"scale:{j}",)).start(30))
        sent0 = _sum(cluster, "cluster_stats_messages_publish_sent")
        each = 100
        with cluster.client(0) as c:
            pipe = c.pipeline(transaction=False)
            for n in range(1, each + 1):
                for j in range(10):
                    pipe.publish(f"scale:{j}", f"p{j}:{n}")
            pipe.execute()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(len(s.received) < each for s in subs):
            time.sleep(0.1)
        time.sleep(1.0)  # a duplicate would come now
        for j, sub in enumerate(subs):
            assert sub.numbers(f"p{j}") == list(range(1, each + 1)), sub.name  # once, in order
        # the exact minimum: one bus message per PUBLISH (one remote subscriber node)
        assert _sum(cluster, "cluster_stats_messages_publish_sent") - sent0 == 10 * each
    finally:
        for sub in subs:
            sub.stop()
        cluster.stop()
