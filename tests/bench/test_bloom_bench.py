"""bench/bloom.py measures (small sizes; no speed is asserted)."""

from bench.bloom import build_peers, markdown, route_times, run


def test_run_forms_rates_times_and_ratios():
    res = run(peer_counts=(3, 20), channels=50, keys=2000)
    ops = res["ops_per_s"]
    assert set(ops) == {
        "key_positions",
        "add",
        "contains_member",
        "contains_non_member",
        "contains_positions_member",
        "counting_add_or_remove",
    }
    assert all(v > 0 for v in ops.values())
    for t in res["routing"].values():
        assert t["index_us"] > 0 and t["naive_us"] > 0 and t["hash_and_index_us"] > 0
        assert t["naive_over_index"] == t["naive_us"] / t["index_us"]
    r3, r20 = res["routing"]["3"], res["routing"]["20"]
    assert res["index_growth"] == r20["index_us"] / r3["index_us"]
    assert res["naive_growth"] == r20["naive_us"] / r3["naive_us"]
    text = markdown(res, "cmd")
    assert "| 20 |" in text and "cmd" in text


def test_route_times_refuses_an_index_that_disagrees():
    import random

    import pytest

    filters, index, queries = build_peers(4, 30, random.Random(2))
    index.remove(0)  # the index no longer answers as the filters do
    members = [q for q in queries if q in filters[0]]
    assert members  # 30 of 300 channels per filter: ~10% of the queries
    with pytest.raises(AssertionError, match="disagree"):
        route_times(filters, index, members)
