"""bench/simulate.py measures: routes cover the exact interest, counters are
consistent, memory figures are formed (tiny N; no speed asserted)."""

import pytest

from bench.simulate import (
    ClusterRouting,
    ExactInterest,
    SimConfig,
    _Node,
    build_nodes,
    markdown,
    run_simulation,
)
from bloom import CountingBloomFilter, PatternFilter


def _node(channels, patterns):
    cf = CountingBloomFilter.for_capacity(max(1, len(channels)), 0.001)
    for ch in channels:
        cf.add(ch)
    pf = PatternFilter.for_capacity(16, 0.0001)
    for p in patterns:
        pf.add(p)
    return _Node(list(channels), list(patterns), cf, pf)


def test_route_and_exact_on_a_hand_built_cluster():
    nodes = [
        _node([b"news.1", b"orders.9"], []),
        _node([b"news.1"], [b"topic3.*"]),
        _node([], [b"*"]),
        _node([b"x"], [b"orders.e*"]),
    ]
    routing, exact = ClusterRouting(nodes), ExactInterest(nodes)
    cases = {
        (b"news.1", 0): 0b0110,
        (b"news.1", 2): 0b0011,
        (b"topic3.77", 0): 0b0110,
        (b"orders.eu", 1): 0b1100,
        (b"orders.9", 3): 0b0101,
        (b"nothing", 2): 0b0000,
    }
    for (channel, origin), want in cases.items():
        assert exact.route(channel, origin) == want
        got = routing.route(channel, origin)
        assert got & want == want  # never misses a subscriber
        assert not got >> origin & 1  # never forwards to itself


def test_run_simulation_counters_consistent():
    res = run_simulation(12, quick=True, publishes=500, match_all_nodes=1)
    assert res["missed_routes"] == 0
    assert 0 < res["exact_per_publish"] <= res["forwards_per_publish"]
    assert res["forwards_per_publish"] <= res["broadcast_per_publish"] == 11
    assert res["false_forwards_per_publish"] == pytest.approx(
        res["forwards_per_publish"] - res["exact_per_publish"]
    )
    assert res["forwards_over_exact"] == pytest.approx(
        res["forwards_per_publish"] / res["exact_per_publish"]
    )
    assert res["memory_per_node_filters_bytes"] > 0
    assert res["memory_per_node_exact_subjects_bytes"] > 0
    assert res["memory_per_node_index_bytes"] > res["memory_per_node_filters_bytes"] / 2
    assert res["memory_per_node_exact_dict_bytes"] > res["memory_per_node_exact_subjects_bytes"]
    assert res["index_over_exact_dict_memory"] == pytest.approx(
        res["memory_per_node_index_bytes"] / res["memory_per_node_exact_dict_bytes"]
    )
    # the node's own routing code (cluster_bus PeerTable) routes every PUBLISH alike
    assert res["peer_table_mismatches"] == 0 and res["peer_table_us_per_publish"] > 0
    assert res["routing_us_per_publish"] > 0 and res["routing_cached_us_per_publish"] > 0
    assert 0 <= res["route_cache_hit_ratio"] < 1
    assert res["p_per_peer"] == pytest.approx(0.1 / 11)
    assert res["subscriptions_total"] > 0 and res["pattern_prefix_lengths"]
    text = markdown({"tail": {"12": res}}, "cmd")
    assert "| 12 |" in text and "cmd" in text and "`tail` N=12: forwards" in text


def test_build_nodes_sizes_filters_for_the_per_peer_rate():
    cfg = SimConfig(nodes=5, channels=2000, topics=50, subs_per_node=40, publishes=10)
    for node in build_nodes(cfg):
        n = len(node.channels)
        assert n == len(set(node.channels))
        want = CountingBloomFilter.for_capacity(max(1, n), cfg.p_per_peer).m
        assert node.chan_filter.m == want
        for ch in node.channels:
            assert ch in node.chan_filter


def test_unknown_parameter_rejected():
    with pytest.raises(TypeError):
        run_simulation(4, quick=True, no_such_field=1)
