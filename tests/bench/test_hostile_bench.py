"""bench/hostile.py's section: one row per case with both servers' worst
probe wait, time and memory, whether the attacker got Redis's reply, and
issue 28's goal; a 'bench hostile' part in the command."""

from __future__ import annotations

from bench.bench_command import PARTS
from bench.hostile import cases, hostile_markdown
from bench.servers import NODE
from bloomcast.testing import REDIS


def figures(wait: float, seconds: float, idle: float, rss: float, reply: list[int]) -> dict:
    return {
        "seconds": seconds,
        "worst_ping": wait,
        "rss_idle_mb": idle,
        "rss_mb": rss,
        "peak_mb": rss + 1,
        "reply": reply,
        "collector": {"gc_pause_max_ms": "1.50", "gc_pauses_over_50ms": 0},
    }


def test_section_has_a_row_per_case_with_both_servers_and_the_goal():
    result = {
        "scale": 1.0,
        "servers": {
            NODE: {
                "UNSUBSCRIBE x": figures(0.004, 2.0, 28, 40, [10, 2]),
                "SUBSCRIBE y": figures(0.2, 1.0, 28, 30, [10, 2]),
            },
            REDIS: {
                "UNSUBSCRIBE x": figures(0.8, 1.0, 8, 18, [10, 2]),
                "SUBSCRIBE y": figures(0.1, 1.0, 8, 10, [12, 2]),
            },
        },
    }
    text = hostile_markdown(result)
    row = next(line for line in text.splitlines() if line.startswith("| UNSUBSCRIBE x"))
    assert row == "| UNSUBSCRIBE x | 4.0 | 800.0 | 2,000 | 1,000 | 40 | 18 | 41 | 19 | yes | yes |"
    row = next(line for line in text.splitlines() if line.startswith("| SUBSCRIBE y"))
    assert row.endswith("| no | no (wait) |")  # 200 ms; another reply
    assert "| UNSUBSCRIBE x | 1.50 | 0 |" in text  # the node's collector


def test_without_redis_the_anchor_columns_say_so():
    result = {"servers": {NODE: {"r": figures(0.001, 0.1, 28, 30, [1, 1])}}}
    row = next(line for line in hostile_markdown(result).splitlines() if line.startswith("| r "))
    assert row.split(" | ")[2] == "-" and row.endswith("| - | - |")


def test_every_case_of_issue_28_is_a_row():
    labels = " / ".join(case.label for case in cases())
    for words in (
        "SUBSCRIBE 1,000,000",
        "UNSUBSCRIBE (bare) of 1,000,000",
        "SUNSUBSCRIBE (bare)",
        "of 500,000",
        "PUNSUBSCRIBE 1,000,000 names given",
        "PUBSUB NUMSUB",
        "close at once",
        "PUNSUBSCRIBE 1,000 patterns each",
        "30,000 patterns",
        "100,000 patterns",
        "50,000",
        "slow subscribers",
        "pipelined SUBSCRIBE bursts",
        "PUBSUB CHANNELS",
    ):
        assert words in labels, words


def test_hostile_is_a_part_of_bench_all():
    assert "hostile" in PARTS
