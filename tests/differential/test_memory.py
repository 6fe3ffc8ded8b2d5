"""MEMORY STATS | USAGE | DOCTOR | HELP against the oracle (redis-server
7.0.15): USAGE of a channel name answers as a key Redis does not have, with
Redis's option checks; STATS has Redis's fields in Redis's order and reply
types (then the node's own); HELP, PURGE and the errors byte for byte;
MALLOC-STATS as a Redis without jemalloc; DOCTOR of a fresh node says what
Redis says of an empty instance."""

from __future__ import annotations

import pytest

from tests.differential.oracle import (
    HELLO3,
    assert_same_as_oracle,
    exchange_pair,
    redis_only,
    split_frames,
)
from tests.procs import connect, read_quiet

pytestmark = [pytest.mark.timeout(120), redis_only]

CASES = {
    "usage": b"MEMORY USAGE news\r\nMEMORY USAGE news SAMPLES 0\r\nMEMORY USAGE news SAMPLES 5\r\n"
    b"MEMORY USAGE news SAMPLES -1\r\nMEMORY USAGE news SAMPLES x\r\nMEMORY USAGE news FOO\r\n"
    b"MEMORY USAGE news SAMPLES\r\nMEMORY USAGE\r\n",
    "usage resp3": HELLO3 + b"MEMORY USAGE news\r\n",
    "subscribed channel": b"MEMORY USAGE chan\r\n",
    "help and errors": b"MEMORY HELP\r\nMEMORY\r\nMEMORY FOO\r\nMEMORY STATS x\r\n"
    b"MEMORY DOCTOR x\r\nMEMORY HELP x\r\n",
    "purge": b"MEMORY PURGE\r\nMEMORY PURGE x\r\nMEMORY MALLOC-STATS x\r\n",
    "doctor of a fresh node": b"MEMORY DOCTOR\r\n" + HELLO3 + b"MEMORY DOCTOR\r\n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_memory_same_bytes_as_the_oracle(servers, name):
    oracle, node = servers
    with connect(oracle) as a, connect(node) as b:  # a subscriber somewhere
        for s in (a, b):
            s.sendall(b"SUBSCRIBE chan\r\n")
            read_quiet(s)
        assert_same_as_oracle(servers, CASES[name])


def _map(frame: bytes) -> list[tuple[bytes, bytes]]:
    """A flat RESP2 array (or RESP3 map) of name / value frames."""
    body = frame.partition(b"\r\n")[2]
    items = split_frames(body)
    return list(zip(items[::2], items[1::2], strict=True))


@pytest.mark.parametrize("hello", [b"", HELLO3])
def test_memory_stats_fields_and_types_as_redis(servers, hello):
    oracle, node = servers
    (want, _), (got, _) = exchange_pair(oracle, node, hello + b"MEMORY STATS\r\n")
    theirs, ours = _map(split_frames(want)[-1]), _map(split_frames(got)[-1])
    # Redis's fields first, in its order, each of its reply type (integer, double)
    assert [k for k, _ in ours[: len(theirs)]] == [k for k, _ in theirs]
    for (name, mine), (_, redis_value) in zip(ours, theirs, strict=False):
        assert mine[:1] == redis_value[:1], name
    fields = {k.split(b"\r\n")[1]: v for k, v in ours}
    assert set(fields) - {k.split(b"\r\n")[1] for k, _ in theirs} == {
        b"pubsub.channels",
        b"pubsub.shard-channels",
        b"pubsub.patterns",
        b"pubsub.tables.bytes",
        b"cluster.replay-buffers",
        b"filters.bytes",
    }
    total = int(fields[b"total.allocated"][1:-2])
    assert 5 << 20 < total <= int(fields[b"peak.allocated"][1:-2])


def test_memory_stats_counts_what_the_node_holds(servers):
    _, node = servers
    with connect(node) as sub, connect(node) as q:
        sub.sendall(b"SUBSCRIBE m1 m2 m3\r\nPSUBSCRIBE p*\r\n")
        read_quiet(sub)
        q.sendall(b"MEMORY STATS\r\n")
        reply, _ = read_quiet(q)
    fields = {k.split(b"\r\n")[1]: v for k, v in _map(reply)}
    assert fields[b"pubsub.channels"] == b":3\r\n" and fields[b"pubsub.patterns"] == b":1\r\n"
    assert int(fields[b"filters.bytes"][1:-2]) > 0


def test_malloc_stats_as_a_redis_without_jemalloc(servers):
    _, node = servers
    with connect(node) as s:
        s.sendall(b"MEMORY MALLOC-STATS\r\n")
        reply, _ = read_quiet(s)
    assert reply == b"$45\r\nStats not supported for the current allocator\r\n"
