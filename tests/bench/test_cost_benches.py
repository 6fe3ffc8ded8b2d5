"""bench.memory and bench.cpu_cost at tiny sizes, against real servers: the
readings they report come from the processes they name."""

from __future__ import annotations

import os

import pytest

from bench import cpu_cost, memory
from bench.servers import NODE
from bloomcast.testing.servers import REDIS, redis_server_path

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        redis_server_path() is None, reason="needs redis-server (apt-get install redis-server)"
    ),
]


def test_footprint_reads_this_process() -> None:
    mine = memory.footprint(os.getpid())
    assert 0 < mine["anon_mb"] <= mine["rss_mb"]
    assert 0 < mine["uss_mb"] <= mine["rss_mb"]
    hog = bytearray(50_000_000)  # 50 MB, touched by the zero fill
    grown = memory.footprint(os.getpid())
    assert grown["anon_mb"] - mine["anon_mb"] > 40
    del hog


def test_memory_bench_grows_with_subscriptions_and_connections() -> None:
    # (10,000 names: a node's growth per pattern is small, 2,000 of them were
    # within the RSS drift of a node just started)
    result = memory.run_memory(channels=10_000, clients=4, idle_clients=300)
    table = memory.markdown(result)
    for name, row in result["systems"].items():
        assert row["idle"]["rss_mb"] > 1
        assert row["per_1000_channels_mb"] > 0, name
        assert row["per_1000_patterns_mb"] > 0, name
        assert row["per_1000_clients_mb"] > 0, name
        assert f"| {name} |" in table
    assert result["python_floor"]["rss_mb"] > 5


def test_cpu_cost_counts_the_server_cpu_per_publish() -> None:
    result = cpu_cost.run_cpu_cost({1: 4_000, 16: 40_000})
    assert [(r["pipeline"], r["subscribers"]) for r in result["rows"]] == [
        (1, 0), (1, 1), (1, 10), (16, 0), (16, 1), (16, 10)
    ]  # fmt: skip
    for row in result["rows"]:
        # a PUBLISH costs some CPU on every server; with clock ticks of 10 ms and
        # thousands of requests, a zero would mean the wrong process was read
        assert row[NODE] > 0 and row[REDIS] > 0
        assert (cpu_cost.FLOOR in row) == (row["subscribers"] == 0)
    assert "| 16 | 10 |" in cpu_cost.markdown(result)


@pytest.mark.parametrize("case", ["FWD1", "FWD16"])
def test_hot_path_cg_forwarded_case_replies_and_forwards_every_publish(case: str) -> None:
    """bench.hot_path_cg's forwarded cases (what valgrind runs, here without
    it): every PUBLISH replied to and forwarded on the peer's link, or the
    case raises (a count of the bytes each transport took)."""
    from bench import hot_path_cg

    hot_path_cg.one(case, 20)
