"""The dashboard's arithmetic, without sockets: CLUSTER NODES parsing, rates
between two INFO samples, the saving against broadcast, cluster totals."""

from __future__ import annotations

import json

import pytest

from bloomcast.dashboard import parse_join
from bloomcast.dashboard.model import (
    Sample,
    cluster_totals,
    counter_delta,
    hot_rows,
    parse_cluster_nodes,
    rates,
    rates_json,
    saving_percent,
)

NODES = (
    "a1 127.0.0.1:7000@17000 myself,master - 0 0 0 connected 0-5460\n"
    "b2 127.0.0.1:7001@17001 master - 0 1700000000000 0 connected 5461-10922\n"
    "c3 10.0.0.3:7002@17002,host-c master,fail - 0 0 0 disconnected\n"
    "garbage line\n"
)


def info(**fields: float | str) -> dict[str, float | str]:
    """INFO as redis-py parses it: every counter the dashboard reads, 0 unless given."""
    base: dict[str, float | str] = {
        "total_publish_received": 0,
        "cluster_stats_messages_publish_sent": 0,
        "cluster_stats_publish_replayed": 0,
        "cluster_stats_publish_held_no_link": 0,
        "cluster_stats_publish_suppressed": 0,
        "cluster_stats_false_positives_received": 0,
        "total_forwards_lost": 0,
        "client_output_buffer_limit_disconnections": 0,
    }
    base.update(fields)
    return base


def test_cluster_nodes_give_client_ports_flags_and_link_states():
    entries = parse_cluster_nodes(NODES.encode())
    assert [(e.node_id, e.address, e.bus_port) for e in entries] == [
        ("a1", "127.0.0.1:7000", 17000),
        ("b2", "127.0.0.1:7001", 17001),
        ("c3", "10.0.0.3:7002", 17002),  # Redis 7's ",hostname" after the bus port
    ]
    assert entries[0].myself and not entries[1].myself
    assert entries[2].flags == ("master", "fail") and entries[2].link_state == "disconnected"


def test_counter_delta_reads_a_decrease_as_a_reset():
    assert counter_delta(10, 25) == 15
    assert counter_delta(100, 7) == 7  # CONFIG RESETSTAT or a restart: the new value


def test_saving_is_the_share_of_broadcast_not_sent():
    assert saving_percent(3, 5) == 62.5
    assert saving_percent(8, 0) == 0.0
    assert saving_percent(0, 8) == 100.0
    assert saving_percent(0, 0) is None  # nothing to route: no saving to show


def test_rates_between_two_samples():
    before = Sample.from_info(10.0, info())
    after = Sample.from_info(
        12.0,
        info(
            total_publish_received=400,
            # 300 frames on the wire, 50 of them replays; 10 held for a peer without a link
            cluster_stats_messages_publish_sent=300,
            cluster_stats_publish_replayed=50,
            cluster_stats_publish_held_no_link=10,
            cluster_stats_publish_suppressed=540,
            cluster_stats_false_positives_received=4,
        ),
    )
    r = rates(before, after)
    assert r is not None
    assert r.publish == 200.0  # 400 in 2 s
    assert r.forwards == (300 - 50 + 10) / 2  # replays are not new forwards
    assert r.broadcast == (260 + 540) / 2
    assert r.false_positives == 2.0
    assert r.saving_percent == pytest.approx(100 * 540 / 800)
    assert rates_json(r)["saving_percent"] == 67.5
    assert rates(after, after) is None  # no time passed


def test_fill_ratio_and_fp_estimate_as_redis_py_parses_them():
    sample = Sample.from_info(
        0.0,
        info(
            channel_filter_fill_ratio=0.000427,
            channel_filter_estimated_fp_rate="2.6e-24",
            channel_filter_m=16384,
            connected_clients=3,
            cluster_state="ok",
        ),
    )
    assert sample.gauges["channel_filter_fill"] == 0.000427
    assert sample.gauges["channel_filter_fp"] == 2.6e-24
    assert sample.gauges["channel_filter_m"] == 16384
    assert sample.gauges["clients"] == 3 and sample.cluster_state == "ok"


def test_totals_add_rates_and_recompute_the_saving():
    quiet = Sample.from_info(0.0, info())
    busy_before = Sample.from_info(0.0, info())
    busy_after = Sample.from_info(
        1.0,
        info(
            total_publish_received=100,
            cluster_stats_messages_publish_sent=30,
            cluster_stats_publish_suppressed=170,
            total_forwards_lost=2,
            client_output_buffer_limit_disconnections=1,
        ),
    )
    other_after = Sample.from_info(
        1.0, info(cluster_stats_messages_publish_sent=10, cluster_stats_publish_suppressed=0)
    )
    totals = cluster_totals(
        [
            (busy_after, rates(busy_before, busy_after)),  # saving 85 %
            (other_after, rates(quiet, other_after)),  # saving 0 %
            (None, None),  # down
        ]
    )
    assert (totals["nodes"], totals["nodes_up"], totals["nodes_down"]) == (3, 2, 1)
    assert totals["publish_per_s"] == 100
    assert totals["forwards_per_s"] == 40 and totals["broadcast_per_s"] == 210
    # from the sums (170 of 210 not sent), not the mean of 85 % and 0 %
    assert totals["saving_percent"] == pytest.approx(100 * 170 / 210, abs=0.01)
    assert totals["forwards_lost"] == 2 and totals["slow_consumer_disconnections"] == 1


def test_totals_before_the_second_poll_have_no_rates():
    totals = cluster_totals([(Sample.from_info(0.0, info()), None)])
    assert totals["publish_per_s"] is None and totals["saving_percent"] is None
    assert totals["nodes_up"] == 1


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("127.0.0.1:7000", ("127.0.0.1", 7000)), ("[::1]:7000", ("::1", 7000))],
)
def test_join_address(text, parsed):
    assert parse_join(text) == parsed


@pytest.mark.parametrize("text", ["nonsense", "host:", ":7000", "host:70000", "host:x"])
def test_join_mistakes_name_the_flag(text):
    with pytest.raises(ValueError, match=r"^--join .*: expected HOST:PORT"):
        parse_join(text)


def test_hot_rows_read_resp2_and_resp3_and_carry_an_infinite_ratio_as_null():
    """BLOOMCAST.HOTCHANNELS as redis-py returns it: RESP2 flat arrays of bulk
    strings (doubles as text, "inf" for a channel new since the 10 m window),
    RESP3 maps; JSON has no infinity, so its ratio is None (the page shows "new")."""
    resp2 = [
        [b"name", b"news", b"publishes", b"1.5", b"error", b"0", b"nodes", 2],
        [b"name", b"fresh", b"share-10s", b"0.25", b"share-10m", b"0", b"ratio", b"inf"],
        [b"odd"],  # not field, value pairs: skipped
    ]
    assert hot_rows(resp2) == [
        {"name": "news", "publishes": 1.5, "error": 0.0, "nodes": 2.0},
        {"name": "fresh", "share-10s": 0.25, "share-10m": 0.0, "ratio": None},
    ]
    resp3 = [{b"name": b"news", b"publishes": 1.5, b"ratio": 2.0}]
    assert hot_rows(resp3) == [{"name": "news", "publishes": 1.5, "ratio": 2.0}]
    assert hot_rows(b"ERR not a list") == []
    json.dumps(hot_rows(resp2), allow_nan=False)  # what /api/cluster can serve
