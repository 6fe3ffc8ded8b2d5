"""bench/hostile.py's section: one row per request, the ratio to redis-server
computed from the figures given, and a 'bench hostile' part in the command."""

from __future__ import annotations

from bench.bench_command import PARTS
from bench.hostile import hostile_markdown
from bench.servers import NODE
from bloomcast.testing import REDIS


def test_section_has_a_row_per_request_with_the_ratio():
    result = {
        "repeats": 3,
        "servers": {
            NODE: {"PUBSUB CHANNELS x": {"seconds": 0.004, "worst_ping": 0.002}},
            REDIS: {"PUBSUB CHANNELS x": {"seconds": 0.002, "worst_ping": 0.001}},
        },
    }
    text = hostile_markdown(result)
    row = next(line for line in text.splitlines() if line.startswith("| PUBSUB CHANNELS x"))
    assert row == "| PUBSUB CHANNELS x | 4.0 | 2.0 | 2.00x | 2.0 | 1.0 |"
    assert "best of 3" in text


def test_without_redis_the_anchor_columns_say_so():
    result = {"repeats": 1, "servers": {NODE: {"r": {"seconds": 0.001, "worst_ping": 0.0}}}}
    row = next(line for line in hostile_markdown(result).splitlines() if line.startswith("| r "))
    assert row.split(" | ")[2] == "-"


def test_hostile_is_a_part_of_bench_all():
    assert "hostile" in PARTS
