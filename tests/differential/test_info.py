"""INFO against the oracle: Redis 7's default sections in Redis's order, the
field names dashboards and redis_exporter read, and exact byte counters."""

from __future__ import annotations

import re

import pytest

from tests.differential.oracle import redis_only
from tests.procs import connect, read_quiet

pytestmark = pytest.mark.timeout(120)

#: fields every Redis 7 dashboard reads that have a meaning on a pub/sub node
FIELDS = (  # noqa: SIM905 (a list of names that reads as one)
    "redis_version redis_mode os arch_bits process_id run_id tcp_port uptime_in_seconds "
    "uptime_in_days connected_clients cluster_connections maxclients blocked_clients "
    "used_memory used_memory_human used_memory_rss used_memory_peak maxmemory "
    "maxmemory_policy mem_allocator loading rdb_changes_since_last_save aof_enabled "
    "total_connections_received total_commands_processed total_net_input_bytes "
    "total_net_output_bytes rejected_connections expired_keys evicted_keys keyspace_hits "
    "keyspace_misses pubsub_channels pubsub_patterns pubsubshard_channels role "
    "connected_slaves master_replid master_repl_offset used_cpu_sys used_cpu_user "
    "used_cpu_sys_children used_cpu_user_children cluster_enabled total_error_replies"
).split()


def info(port: int, section: bytes = b"") -> tuple[list[str], dict[str, str]]:
    """(section names in order, fields) of one INFO reply."""
    with connect(port) as s:
        s.sendall(b"INFO " + section + b"\r\n" if section else b"INFO\r\n")
        raw, _ = read_quiet(s)
    body = raw.split(b"\r\n", 1)[1].decode()
    names = re.findall(r"^# (\w+)", body, re.M)
    fields = dict(line.split(":", 1) for line in body.split("\r\n") if ":" in line)
    return [n.lower() for n in names], fields


@redis_only
def test_default_sections_in_redis_order_and_the_known_fields(servers):
    oracle, node = servers
    theirs, their_fields = info(oracle)
    ours, our_fields = info(node)
    assert [n for n in ours if n in theirs] == theirs  # each of Redis's, same order
    missing_in_redis = [f for f in FIELDS if f not in their_fields]
    assert missing_in_redis == [], "the list names a field Redis 7.0.15 does not have"
    assert [f for f in FIELDS if f not in our_fields] == []
    assert our_fields["role"] == their_fields["role"] == "master"
    assert our_fields["cluster_enabled"] == their_fields["cluster_enabled"] == "0"  # no bus
    assert int(our_fields["used_memory_rss"]) > 1_000_000


def test_net_byte_counters_are_exact(servers):
    _, node = servers
    with connect(node) as a, connect(node) as b:
        a.sendall(b"INFO stats\r\n")
        first, _ = read_quiet(a)
        b.sendall(b"PING\r\n" * 10)
        assert read_quiet(b)[0] == b"+PONG\r\n" * 10
        a.sendall(b"INFO stats\r\n")
        second, _ = read_quiet(a)

    def counters(raw: bytes) -> tuple[int, int]:
        f = dict(line.split(b":", 1) for line in raw.split(b"\r\n") if b":" in line)
        return int(f[b"total_net_input_bytes"]), int(f[b"total_net_output_bytes"])

    (in1, out1), (in2, out2) = counters(first), counters(second)
    assert in2 - in1 == len(b"INFO stats\r\n") + 60  # the second INFO and ten PINGs
    assert out2 - out1 == len(first) + 70  # the first INFO's reply and ten PONGs


def test_error_replies_are_counted_by_prefix(servers):
    _, node = servers
    _, before = info(node, b"errorstats")
    with connect(node) as s:
        s.sendall(b"FOO\r\nPUBLISH a\r\nCLIENT LIST TYPE x\r\n")
        read_quiet(s)
    _, after = info(node, b"errorstats")

    def count(fields: dict[str, str]) -> int:
        return int(fields.get("errorstat_ERR", "count=0").split("=")[1])

    assert count(after) - count(before) == 3
