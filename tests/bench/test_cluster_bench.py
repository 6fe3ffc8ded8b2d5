"""bench/cluster_bench.py and bench/convergence.py measure what they say, on a
real valkey Redis Cluster and a real bloomcast cluster (quick sizes)."""

import pytest

from bench.cluster_bench import (
    ClusterPlan,
    channel_name,
    cluster_ratios,
    measure_bus,
    measure_throughput,
    start_cluster,
)
from bench.convergence import measure_delays, percentile
from bench.servers import NODE
from bloomcast.testing import VALKEY

PLAN = ClusterPlan.quick()


def test_channel_name_matches_redis_benchmark_rand_int():
    # redis-benchmark replaces __rand_int__ with 12 zero-padded digits
    assert channel_name(7) == b"ch:000000000007"


def test_percentile():
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([1.0, 2.0], 0.99) == pytest.approx(1.99)
    with pytest.raises(ValueError):
        percentile([], 0.5)


@pytest.fixture(scope="module")
def valkey_cluster():
    with start_cluster(VALKEY, 3) as cluster:
        yield cluster


def test_bus_counts_on_redis_cluster_are_broadcast(valkey_cluster):
    bus = measure_bus(valkey_cluster, VALKEY, PLAN)
    n = 3
    assert bus["publishes"] == n * PLAN.publishes_per_node
    assert bus["delivered_all"]
    assert bus["bus_publish_received_settled"]
    # Redis Cluster sends every PUBLISH to every other node: the oracle
    assert bus["msgs_per_publish"] == n - 1 == bus["broadcast_per_publish"]
    # each channel has its subscriber on one node, publishers on all nodes
    assert bus["exact_min_per_publish"] == pytest.approx((n - 1) / n, abs=0.02)
    assert bus["bus_bytes_per_publish"] > 0


def test_throughput_is_measured_on_every_pipeline(valkey_cluster):
    tp = measure_throughput(valkey_cluster, VALKEY, PLAN)
    assert set(tp) == {"P1", "P16"}
    for key, row in tp.items():
        assert row["rps"] > 0
        assert row["pipeline"] == int(key[1:])
        assert row["requests"] >= PLAN.throughput_requests[row["pipeline"]] - 3


def test_convergence_on_redis_cluster(valkey_cluster):
    res = measure_delays(valkey_cluster, trials=6, timeout=5, tag="t")
    assert res["timeouts"] == 0
    assert 0 < res["p50_ms"] <= res["p99_ms"] <= res["max_ms"]


def test_ratios_formed_from_results():
    def res(msgs, exact, nbytes, rps):
        return {
            "bus": {
                "msgs_per_publish": msgs,
                "exact_min_per_publish": exact,
                "bus_bytes_per_publish": nbytes,
            },
            "throughput": {"P1": {"rps": rps}, "P16": {"rps": 4 * rps}},
        }

    ratios = cluster_ratios({NODE: res(0.8, 0.8, 40.0, 90.0), VALKEY: res(5, 0.8, 200.0, 100.0)})
    assert ratios["exact_min"]["msgs_per_publish"] == pytest.approx(1.0)
    assert ratios[VALKEY]["msgs_per_publish"] == pytest.approx(0.16)
    assert ratios[VALKEY]["bus_bytes_per_publish"] == pytest.approx(0.2)
    assert ratios[VALKEY]["throughput_P1"] == pytest.approx(0.9)
    assert ratios[VALKEY]["throughput_P16"] == pytest.approx(0.9)
