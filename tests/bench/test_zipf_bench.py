"""The Zipf cluster workload (bench/zipf_workload.py, bench/zipf_bench.py): the
oracle is right by construction on small cases, and on a real 3-node bloomcast
cluster the bus carries exactly the oracle's messages (exact minimum plus the
forwards the pattern prefix filter forces), every subscriber gets exactly its
messages; a real valkey cluster broadcasts."""

import pytest

from bench.loadgen import pmessage_frame
from bench.servers import NODE
from bench.zipf_bench import ZipfPlan, measure_bus_zipf, measure_throughput_zipf
from bench.zipf_load import batches, encode_publish
from bench.zipf_workload import BROAD_PATTERN, EVEN_PATTERN, ZipfSpec, ZipfWorkload, channel_of
from bloomcast.testing import VALKEY

PLAN = ZipfPlan.quick()


def test_workload_shape():
    w = ZipfWorkload(ZipfSpec(nodes=4, channels_per_node=8, publishes_per_node=500))
    assert channel_of(1) == "news.000001" and channel_of(4) == "feed.000004"
    assert len({len(ch) for ch in w.channels}) == 1
    # the most popular channel is on every node, feed.* on none, the tail on one
    assert all("news.000001" in chans for chans in w.node_channels)
    assert not any(ch.startswith("feed.") for chans in w.node_channels for ch in chans)
    assert sum(channel_of(31) in chans for chans in w.node_channels) == 1
    assert w.node_patterns == [[EVEN_PATTERN], [], [EVEN_PATTERN], [BROAD_PATTERN]]
    # seeded: same schedule twice, Zipf-skewed
    assert w.schedule(2) == ZipfWorkload(w.spec).schedule(2)
    counts = w.publish_counts()
    assert counts["news.000001"] > counts["chat.000002"] > counts[channel_of(32)]


def test_oracle_counts_one_publish_by_hand():
    w = ZipfWorkload(ZipfSpec(nodes=4, channels_per_node=8, publishes_per_node=1))
    # feed.000004 has no receiver anywhere: exact 0, no prefix match
    # cart.000003 from node 0: nodes subscribed to it, plus node 3's c*9 prefix
    state = w.state
    from bloomcast.demo.workload import Publish, interested_nodes, prefix_only_nodes

    pub = Publish("x", 0, "feed.000004")
    assert interested_nodes(state, pub) == set() and prefix_only_nodes(state, pub) == set()
    pub = Publish("x", 0, "cart.000003")
    holders = {i for i, chans in enumerate(w.node_channels) if "cart.000003" in chans}
    assert interested_nodes(state, pub) == holders
    assert prefix_only_nodes(state, pub) == {3} - holders
    pub = Publish("x", 1, "chat.000009")  # c*9 matches: node 3 is interested
    assert 3 in interested_nodes(state, pub)


def test_load_generator_encoding():
    assert encode_publish(b"a", b"hi") == b"*3\r\n$7\r\nPUBLISH\r\n$1\r\na\r\n$2\r\nhi\r\n"
    got = batches(["a", "b", "c"], b"hi", 2)
    assert [n for _, n in got] == [2, 1]
    assert pmessage_frame(b"c*", b"ca", b"x").startswith(b"*4\r\n$8\r\npmessage\r\n$2\r\nc*")


@pytest.mark.parametrize("system", [NODE, VALKEY])
def test_bus_messages_match_the_oracle(system):
    from bench.cluster_bench import start_cluster

    with start_cluster(system, 3) as cluster:
        bus = measure_bus_zipf(cluster, system, PLAN)
        tp, ref = measure_throughput_zipf(cluster, system, PLAN) if system == VALKEY else ({}, {})
    assert bus["publishes"] == 3 * PLAN.publishes_per_node
    assert bus["delivered_all"], bus
    assert bus["delivered"] == bus["expected_deliveries"] > 0
    assert bus["bus_publish_received_settled"]
    assert bus["bus_bytes_per_publish"] > 0
    assert 0 < bus["exact_minimum"] < bus["publishes"] * 2
    if system == NODE:
        # exact routing: every forward has a receiver, or is one the pattern
        # prefix filter forces; anything more is a Bloom false positive, which
        # the receiving node counts (none expected with so few channels)
        assert bus["prefix_forwards"] > 0
        assert bus["false_positives_received"] == bus["prefix_forwards"]
        assert bus["bus_publish_messages"] == bus["exact_minimum"] + bus["prefix_forwards"]
    else:
        assert bus["msgs_per_publish"] == 2 == bus["broadcast_per_publish"]
        assert set(tp) == {"P1", "P16"}
        for key, row in tp.items():
            assert row["rps"] > 0 and row["pipeline"] == int(key[1:])
            assert row["requests"] == PLAN.throughput_requests[row["pipeline"]] // 3 * 3
            assert ref[key]["rps"] > 0


def test_bench_command_writes_the_zipf_section_only(tmp_path):
    import json

    from bloomcast.cli import main

    code = main(["bench", "cluster", "--quick", "--workload", "zipf", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    assert "cluster" not in data
    (size,) = data["cluster_zipf"]["sizes"]
    assert size["nodes"] == 3 and size["workload"]["channels_on_every_node"] == 1
    assert size["results"][NODE]["bus"]["delivered_all"]
    text = (tmp_path / "benchmarks.md").read_text()
    assert "## cluster: Zipf-popular channels" in text and "\n## cluster\n" not in text
    assert "--workload zipf" in text


def test_findings_fill_in_the_largest_size():
    from bench.zipf_report import findings

    bus = {
        "msgs_per_publish": 2.5,
        "exact_min_per_publish": 2.3,
        "prefix_forwards_per_publish": 0.2,
        "prefix_forwards": 20,
        "false_positives_received": 21,
    }
    ratios = {"msgs_per_publish": 0.5, "bus_bytes_per_publish": 0.6}
    ratios |= {"throughput_P1": 0.7, "throughput_P16": 1.3}
    result = {
        "sizes": [
            {
                "nodes": 6,
                "workload": {
                    "publish_share_on_every_node": 0.26,
                    "publish_share_unsubscribed": 0.16,
                },
                "results": {NODE: {"bus": bus}},
                "ratios": {"exact_min": {}, VALKEY: ratios},
            }
        ]
    }
    text = findings(result)
    assert "N - 1 = 5 forwards" in text and "26% of PUBLISH" in text
    assert "so 1 Bloom false positives" in text and "0.50x valkey-server's" in text
    assert findings({"sizes": []}) == ""
