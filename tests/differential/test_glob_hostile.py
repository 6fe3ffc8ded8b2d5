"""PUBSUB CHANNELS with hostile and random patterns against redis-server
7.0.15: the same channels subscribed on both, the same answer for every
pattern (as sets: Redis lists its dict in hash order). Includes the nesting
limit (1000 ``*`` groups), unclosed and huge classes, ranges ending in ``]``,
and hypothesis-generated patterns."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.differential.oracle import oracle_server, redis_only
from tests.procs import bloomcast_node, connect

pytestmark = [pytest.mark.timeout(600), redis_only]

CHANNELS = [
    b"a" * 1100,
    b"a" * 1100 + b"b",
    b"[",
    b"]",
    b"-",
    b"\\",
    b"^",
    b"\x00",
    b"\xe9",
    b"\xff",
    b"ab",
    b"a-b",
    b"a]b",
    b"news.sport",
    b"news.tech",
    b"x" * 60_000,
]
HOSTILE = [
    b"[" * 50_000,
    b"*a" * 1000,
    b"*a" * 1001,
    b"*a" * 1001 + b"*",
    b"*a" * 1000 + b"*",
    b"a*" * 1000 + b"b",
    b"a*" * 1001 + b"b",
    b"?" * 1100,
    b"?" * 1101,
    b"*" * 100_000,
    b"*?" * 5000,
    b"[a-" * 10_000,
    b"[a-]",
    b"[]]",
    b"[^]",
    b"[^",
    b"[\\",
    b"\\",
    b"[\x00-\xff]",
    b"[\xff-a]",
    b"[a-\\]]",
    b"news.[st]*",
    b"*x" * 999 + b"x",
    b"x" * 60_000,
    b"x" * 59_999 + b"?",
    b"[x]" * 60_000,
]


def _bulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def _read_array(sock) -> set[bytes]:
    buf = b""
    while b"\r\n" not in buf:
        buf += sock.recv(1 << 20)
    head, _, rest = buf.partition(b"\r\n")
    n = int(head[1:])
    names: set[bytes] = set()
    for _ in range(n):
        while b"\r\n" not in rest:
            rest += sock.recv(1 << 20)
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line[1:])
        while len(rest) < size + 2:
            rest += sock.recv(1 << 20)
        names.add(rest[:size])
        rest = rest[size + 2 :]
    return names


@pytest.fixture(scope="module")
def pair():
    """(oracle connection, node connection), the same channels subscribed on each."""
    with oracle_server() as oracle, bloomcast_node() as node:
        socks = []
        for port in (oracle, node):
            sub, ask = connect(port), connect(port)
            sub.sendall(_bulk(b"SUBSCRIBE", *CHANNELS))
            sub.settimeout(60)
            confirmed = b""
            while confirmed.count(b"$9\r\nsubscribe\r\n") < len(CHANNELS):
                confirmed += sub.recv(1 << 20)
            ask.settimeout(60)
            socks += [sub, ask]
        for ask in socks[1::2]:
            ask.sendall(_bulk(b"PUBSUB", b"CHANNELS"))
            assert _read_array(ask) == set(CHANNELS)
        yield socks[1], socks[3]
        for s in socks:
            s.close()


def _channels(sock, pattern: bytes) -> set[bytes]:
    sock.sendall(_bulk(b"PUBSUB", b"CHANNELS", pattern))
    return _read_array(sock)


@pytest.mark.parametrize("pattern", HOSTILE, ids=lambda p: repr(p[:12]) + f"x{len(p)}")
def test_hostile_pattern_lists_what_redis_lists(pair, pattern):
    oracle, node = pair
    assert _channels(node, pattern) == _channels(oracle, pattern)


PIECES = st.sampled_from(
    [b"*", b"?", b"[", b"]", b"^", b"-", b"\\", b"a", b"b", b"x", b"[a-", b"*a", b"\xff", b"\x00"]
)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(PIECES, max_size=16).map(b"".join))
def test_random_patterns_list_what_redis_lists(pair, pattern):
    oracle, node = pair
    assert _channels(node, pattern) == _channels(oracle, pattern)
