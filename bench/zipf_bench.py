"""bloomcast cluster vs Redis Cluster on the Zipf workload (issue 18): popular
channels subscribed on many nodes, plus patterns — the honest range next to
the best case of :mod:`bench.cluster_bench`.

Workload and oracle: :mod:`bench.zipf_workload`. Per system and N:

* bus PUBLISH messages per client PUBLISH (``cluster_stats_messages_publish_sent``
  summed over the nodes), next to the oracle's exact minimum (other nodes
  with a receiver), the forwards the pattern prefix filter forces (other
  nodes whose pattern prefix starts the channel but whose glob does not
  match) and broadcast (N - 1); bloomcast's
  ``cluster_stats_false_positives_received`` (a PUBLISH that arrived with no
  receiver: prefix-only forwards plus Bloom false positives) is reported too;
* bus bytes per PUBLISH from the kernel (``tcp_info.bytes_sent``), idle
  PING/PONG rate subtracted, as the uniform workload does;
* delivery: every subscriber socket (one per node for its channels, one per
  node and pattern) must receive exactly the oracle's count, no more;
* aggregate PUBLISH/s at -P 1 and -P 16 with the seeded Zipf schedule, from
  :mod:`bench.zipf_load` (one generator process per node), since
  redis-benchmark's ``-r`` can only draw channels uniformly.

Nothing here asserts a speed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis

from bench.cluster_bench import (
    BusCluster,
    ClusterPlan,
    aggregate_throughput,
    idle_bus_rate,
    run_systems,
    settled_counters,
    wait_interest_known,
)
from bench.loadgen import PatternPool, SubscriberPool
from bench.procs import tcp_bytes_sent
from bench.zipf_load import run_zipf_load
from bench.zipf_workload import ZipfSpec, ZipfWorkload
from bloomcast.testing import LOOPBACK

MESSAGE = b"hello"
FP_RECEIVED = "cluster_stats_false_positives_received"


@dataclass
class ZipfPlan(ClusterPlan):
    """Sizes of the Zipf cluster benchmark: the uniform benchmark's (clients,
    pipelines, requests, ``quick()`` for tests) and the Zipf model's."""

    channels_per_node: int = 8
    zipf_s: float = 1.1
    seed: int = 18
    #: also run redis-benchmark (uniform, unsubscribed channels) as the generator's yardstick
    reference: bool = True

    def spec(self, n: int) -> ZipfSpec:
        return ZipfSpec(n, self.channels_per_node, self.zipf_s, self.publishes_per_node, self.seed)


@contextlib.contextmanager
def subscribed(
    cluster: BusCluster, workload: ZipfWorkload
) -> Iterator[list[tuple[SubscriberPool, int]]]:
    """The workload's subscribers on ``cluster``: ``[(pool, expected messages)]``."""
    channel_len = len(workload.channels[0])
    with contextlib.ExitStack() as stack:
        pools: list[tuple[SubscriberPool, int]] = []
        for i, port in enumerate(cluster.ports):
            mine = [ch.encode() for ch in workload.node_channels[i]]
            if mine:
                pool = SubscriberPool(port, mine, 1, MESSAGE)
                pools.append((stack.enter_context(pool), workload.expected_channel_messages(i)))
            for pattern in workload.node_patterns[i]:
                ppool = PatternPool(port, pattern.encode(), channel_len, 1, MESSAGE)
                expected = workload.expected_pattern_messages(pattern)
                pools.append((stack.enter_context(ppool), expected))
        yield pools


def false_positives_received(cluster: BusCluster) -> int:
    """bloomcast's PUBLISH received with no local receiver, summed (0 for Redis)."""
    return sum(int(cluster.cluster_info(i).get(FP_RECEIVED, 0)) for i in range(len(cluster.ports)))


def publish_schedule(cluster: BusCluster, workload: ZipfWorkload) -> None:
    """Every node publishes its seeded schedule (one pipelined batch per node)."""
    for i, port in enumerate(cluster.ports):
        with redis.Redis(host=LOOPBACK, port=port, socket_timeout=30) as r:
            pipe = r.pipeline(transaction=False)
            for ch in workload.schedule(i):
                pipe.publish(ch, MESSAGE)
            pipe.execute()


def measure_bus_zipf(cluster: BusCluster, system: str, plan: ZipfPlan) -> dict[str, Any]:
    """Bus PUBLISH messages and bytes per PUBLISH on the Zipf workload, and the
    delivery check against the oracle (see module doc)."""
    n = len(cluster.ports)
    workload = ZipfWorkload(plan.spec(n))
    expect = workload.expectation()
    with subscribed(cluster, workload) as pools:
        wait_interest_known(cluster, system)
        idle_rate = idle_bus_rate(cluster, plan.idle_window_s)  # subtracted below

        sent0, _ = settled_counters(cluster)
        fp0 = false_positives_received(cluster)
        bytes0 = tcp_bytes_sent(cluster.bus_ports)
        t0 = time.monotonic()
        publish_schedule(cluster, workload)
        reached = all(pool.wait_for(want, timeout=60) for pool, want in pools)
        sent1, received1 = settled_counters(cluster)
        bytes1 = tcp_bytes_sent(cluster.bus_ports)
        elapsed = time.monotonic() - t0
        fp1 = false_positives_received(cluster)
        time.sleep(0.2)  # a duplicate would arrive by now: count exactly
        got = [(pool.messages(), want) for pool, want in pools]
    total = expect.publishes
    bus_msgs = sent1 - sent0
    gross = bytes1 - bytes0
    return {
        "publishes": total,
        "bus_publish_messages": bus_msgs,
        "bus_publish_received_settled": sent1 == received1,
        "msgs_per_publish": bus_msgs / total,
        "exact_min_per_publish": expect.exact_minimum / total,
        "exact_minimum": expect.exact_minimum,
        "prefix_forwards": expect.prefix_forwards,
        "prefix_forwards_per_publish": expect.prefix_forwards / total,
        "false_positives_received": fp1 - fp0,
        "broadcast_per_publish": n - 1,
        "bus_bytes_per_publish_gross": gross / total,
        "bus_bytes_per_publish": max(0.0, gross - idle_rate * elapsed) / total,
        "idle_bus_bytes_per_s": idle_rate,
        "subscribers": len(pools),
        "delivered": sum(g for g, _ in got),
        "expected_deliveries": sum(w for _, w in got),
        "delivered_all": reached and all(g == w for g, w in got),
    }


def spec_channels(spec: ZipfSpec) -> range:
    """As many ``ch:__rand_int__`` channels for the yardstick as the workload has."""
    return range(spec.nodes * spec.channels_per_node)


def measure_throughput_zipf(
    cluster: BusCluster, system: str, plan: ZipfPlan
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Aggregate PUBLISH/s of the Zipf schedule at every pipeline depth, with the
    workload's subscribers draining; and, as the generator's yardstick,
    redis-benchmark's rate on the same cluster with the same requests, clients
    and pipeline over ``ch:__rand_int__`` channels nobody subscribes (what the
    C tool reaches where the Python generator reaches the first figure)."""
    spec = plan.spec(len(cluster.ports))
    out: dict[str, Any] = {}
    reference: dict[str, Any] = {}
    with subscribed(cluster, ZipfWorkload(spec)):
        wait_interest_known(cluster, system)
        for pipeline in plan.pipelines:
            requests = plan.throughput_requests[pipeline]
            out[f"P{pipeline}"] = run_zipf_load(
                cluster.ports, spec, requests, plan.clients, pipeline
            )
            if plan.reference:
                reference[f"P{pipeline}"] = aggregate_throughput(
                    cluster, pipeline, requests, plan.clients, len(spec_channels(spec))
                )
    return out, reference


def run_cluster_zipf(plan: ZipfPlan) -> dict[str, Any]:
    """Every system at every size; JSON-ready, ratios as :func:`cluster_ratios`."""

    def measure(cluster: BusCluster, system: str) -> dict[str, Any]:
        bus = measure_bus_zipf(cluster, system, plan)
        throughput, reference = measure_throughput_zipf(cluster, system, plan)
        return {"bus": bus, "throughput": throughput, "redis_benchmark_uniform": reference}

    return run_systems(plan, measure, lambda n: {"workload": ZipfWorkload(plan.spec(n)).describe()})


__all__ = ["ZipfPlan", "measure_bus_zipf", "measure_throughput_zipf", "run_cluster_zipf"]
