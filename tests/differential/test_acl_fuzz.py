"""A short run of the ACL rule fuzzer (tests/fuzz/fuzz_acl.py) against
redis-server 7.0.15: random ACL SETUSER rule lists give the same reply bytes,
ACL GETUSER and ACL LIST on the node as on Redis. The long run:
``uv run python -m tests.fuzz.fuzz_acl --count 20000 --seed N``."""

from __future__ import annotations

import pytest

from tests.differential.oracle import oracle_server, redis_only
from tests.fuzz.fuzz_acl import normalized, run
from tests.procs import bloomcast_node

pytestmark = [redis_only, pytest.mark.timeout(120)]


def test_random_rule_lists_answer_as_redis():
    with oracle_server() as redis_port, bloomcast_node() as node_port:
        assert run(redis_port, node_port, count=400, seed=7) == []


def test_normalizing_sorts_only_runs_of_single_command_rules():
    line = b"-@all +@read +subscribe +config|get ~x"
    assert normalized(line) == b"-@all +@read +config|get +subscribe ~x"
    assert normalized(b"$5\r\n+@all\r\n") == b"$5\r\n+@all\r\n"
