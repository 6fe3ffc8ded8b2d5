"""Differential conformance: the same raw RESP sent to the oracle (redis-server
7.0.15, else valkey-server: :mod:`tests.differential.oracle`) and to a
``bloomcast node`` must get the same bytes back.

Replies whose order is the server's hash order (bare UNSUBSCRIBE, PUBSUB
CHANNELS) are compared as multisets of frames. Replies that legitimately
differ (HELLO's server/version/mode/modules, CLIENT LIST/INFO values, INFO
bodies, commands the node does not have) are compared by structure in
:func:`test_structural_replies`.
"""

from __future__ import annotations

import re
import socket
import time
from collections import Counter

import pytest

from bloomcast.testing import REDIS
from tests.differential.oracle import (
    HELLO3,
    ORACLE,
    exchange,
    exchange_pair,
    hello_masked,
    redis_only,
    split_frames,
)
from tests.procs import connect, read_quiet

pytestmark = pytest.mark.timeout(120)


# name -> (payload, compare as multiset of frames)
SCENARIOS: dict[str, tuple[bytes, bool]] = {
    "unknown command": (b"FOO a b\r\nfoo\r\n", False),
    "arity errors": (
        b"SUBSCRIBE\r\nPSUBSCRIBE\r\nSSUBSCRIBE\r\nPUBLISH a\r\nSPUBLISH a\r\nECHO\r\n"
        b"PING a b\r\nPUBSUB\r\nCLIENT\r\nPUBSUB NUMPAT x\r\nCLIENT ID x\r\nCLIENT SETNAME\r\n",
        False,
    ),
    "unknown subcommand": (b"PUBSUB FOO\r\nCLIENT NOPE x\r\npubsub Foo\r\n", False),
    # printed with %s: raw bytes, cut at a NUL
    "unknown names, raw bytes": (
        b"*3\r\n$3\r\na\x00b\r\n$3\r\nc\x00d\r\n$2\r\n\xff\xfe\r\nECHO\x85a b\xc3\r\n"
        b"*2\r\n$6\r\nPUBSUB\r\n$3\r\n\x85\x00b\r\n*2\r\n$6\r\nCLIENT\r\n$2\r\n\xc3\xa9\r\n"
        b"*2\r\n$3\r\n\x00ab\r\n$200\r\n" + b"\xe9" * 200 + b"\r\n",
        False,
    ),
    "unknown names, raw bytes resp3": (HELLO3 + b"ECHO\x85a b\xc3\r\nPUBSUB \xff\r\n", False),
    "hello option, raw bytes": (
        b"HELLO 2 \xff\xfe\r\n*3\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$3\r\na\x00b\r\nHELLO 3 x\xe9\r\n",
        False,
    ),
    "ping echo": (b"PING\r\nPING hi\r\nECHO hello\r\nping\r\nEcHo x\r\n", False),
    "publish without subscribers": (b"PUBLISH a b\r\nSPUBLISH a b\r\n", False),
    "subscribe and counts": (
        b"SUBSCRIBE a b a\r\nPSUBSCRIBE p* q?\r\nSSUBSCRIBE s1 s2\r\n"
        b"UNSUBSCRIBE a zz\r\nPUNSUBSCRIBE p*\r\nSUNSUBSCRIBE s1\r\n",
        False,
    ),
    "bare unsubscribes": (
        b"SUBSCRIBE a b c\r\nUNSUBSCRIBE\r\nUNSUBSCRIBE\r\nPSUBSCRIBE x* y*\r\n"
        b"PUNSUBSCRIBE\r\nPUNSUBSCRIBE\r\nSSUBSCRIBE s t\r\nSUNSUBSCRIBE\r\nSUNSUBSCRIBE\r\n",
        True,
    ),
    "subscribed context resp2": (
        b"SUBSCRIBE a\r\nPUBLISH a b\r\nPING\r\nPING x\r\nPUBSUB NUMPAT\r\nECHO x\r\n"
        b"CLIENT ID\r\nFOO\r\nSSUBSCRIBE s\r\nRESET\r\nPUBLISH a b\r\n",
        False,
    ),
    "subscribed context, shard channels only": (
        b"SSUBSCRIBE s\r\nECHO x\r\nPING\r\nCLIENT ID\r\nSUNSUBSCRIBE s\r\nECHO y\r\n"
        b"SSUBSCRIBE s\r\nPUNSUBSCRIBE\r\nUNSUBSCRIBE\r\nECHO z\r\nSUNSUBSCRIBE\r\nECHO w\r\n",
        False,
    ),
    "shard channels only, resp3 (no subscribed context)": (
        HELLO3 + b"SSUBSCRIBE s\r\nECHO x\r\nPING\r\nPUBSUB NUMPAT\r\nSUNSUBSCRIBE s\r\nECHO y\r\n",
        False,
    ),
    "subscribed context, shard channel left": (
        b"SUBSCRIBE a\r\nSSUBSCRIBE s\r\nUNSUBSCRIBE a\r\nECHO x\r\nSSUBSCRIBE t\r\n"
        b"PSUBSCRIBE p*\r\nSUNSUBSCRIBE\r\nPUNSUBSCRIBE\r\nECHO y\r\n",
        True,
    ),
    "subscribed context resp3": (
        HELLO3 + b"SUBSCRIBE a\r\nPING\r\nPUBLISH zz b\r\nECHO x\r\nUNSUBSCRIBE\r\n"
        b"UNSUBSCRIBE\r\nPSUBSCRIBE p*\r\nPUNSUBSCRIBE p*\r\nSSUBSCRIBE s\r\nSUNSUBSCRIBE\r\n",
        False,
    ),
    "pubsub introspection": (
        b"PUBSUB NUMPAT\r\nPUBSUB NUMSUB\r\nPUBSUB NUMSUB a b\r\nPUBSUB SHARDNUMSUB\r\n"
        b"PUBSUB SHARDNUMSUB a\r\nPUBSUB CHANNELS\r\nPUBSUB CHANNELS a b\r\n"
        b"PUBSUB SHARDCHANNELS\r\n",
        False,
    ),
    "auth without password": (b"AUTH x\r\nAUTH a b\r\nAUTH default x\r\n", False),
    "hello errors": (b"HELLO 4\r\nHELLO x\r\nHELLO 2 FOO\r\nHELLO 2 SETNAME\r\n", False),
    # string2ll: no '+', no leading zero or space, within 64 bits; then 2 or 3
    "hello versions": (
        b"HELLO 0\r\nHELLO 1\r\nHELLO 4\r\nHELLO -1\r\nHELLO 99999999999999999999\r\n"
        b"HELLO abc\r\nHELLO 9223372036854775807\r\nHELLO 9223372036854775808\r\n"
        b"HELLO -9223372036854775808\r\nHELLO -9223372036854775809\r\nHELLO 3.0\r\n"
        b'HELLO " 3"\r\nHELLO ""\r\nHELLO 03\r\nHELLO +3\r\nHELLO -0\r\nHELLO 2x\r\n'
        b"HELLO 123456789012345678901\r\nHELLO 99999999999999999999 AUTH a b\r\n",
        False,
    ),
    "hello versions resp3": (
        HELLO3 + b"HELLO 99999999999999999999\r\nHELLO 4\r\nHELLO 03\r\nHELLO +2\r\nPING\r\n",
        False,
    ),
    "client names": (
        b'CLIENT SETNAME "a b"\r\nCLIENT GETNAME\r\nCLIENT SETNAME xx\r\nCLIENT GETNAME\r\n'
        b'CLIENT SETNAME ""\r\nCLIENT GETNAME\r\n',
        False,
    ),
    "client names resp3": (HELLO3 + b"CLIENT GETNAME\r\nCLIENT SETNAME n\r\n", False),
    "inline quoting": (
        b"ECHO \"a b\"\r\nECHO 'c d'\r\nECHO \"\\x41\\n\\t\"\r\nECHO 'it\\'s'\r\n"
        b"   \r\nECHO   spaced   \r\nPING\n",
        False,
    ),
    "pipelined multibulk": (
        b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$3\r\na\x00b\r\n*0\r\n*-1\r\n"
        b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n",
        False,
    ),
    "binary channel names": (
        b"*3\r\n$9\r\nSUBSCRIBE\r\n$4\r\n\x00\r\n\xff\r\n$0\r\n\r\n"
        b"*2\r\n$11\r\nUNSUBSCRIBE\r\n$4\r\n\x00\r\n\xff\r\n",
        False,
    ),
    "reset": (HELLO3 + b"SUBSCRIBE a\r\nRESET\r\nPING\r\nCLIENT GETNAME\r\n", False),
    "quit": (b"PING\r\nQUIT\r\nPING\r\n", False),
}

PROTOCOL_ERRORS = {
    "invalid multibulk length": b"*abc\r\n",
    "expected $": b"*1\r\n:1\r\n",
    "invalid bulk length": b"*1\r\n$-5\r\n",
    "bulk length not a number": b"*1\r\n$x\r\n",
    "unbalanced quotes": b'ECHO "abc\r\n',
    "after good commands": b"PING\r\nECHO x\r\n*1\r\n+x\r\nPING\r\n",
}


def _mask(frame: bytes) -> tuple[bytes, bytes]:
    """(frame with its second element masked, that element) for [kind, name, n]."""
    parts = frame.split(b"\r\n")
    if len(parts) >= 6 and parts[0] in (b"*3", b">3") and parts[3].startswith(b"$"):
        name = parts[4]
        parts[3:5] = [b"$?", b"?"]
        return b"\r\n".join(parts), name
    return frame, b""


def _compare(oracle: int, node: int, payload: bytes, unordered: bool, skip: int) -> None:
    (want, want_closed), (got, got_closed) = exchange_pair(oracle, node, payload)
    wf, gf = split_frames(want)[skip:], split_frames(got)[skip:]
    if unordered:
        # the order of names is the server's hash order; the counts still go
        # down one by one: compare the frames with names masked, and the names
        assert [_mask(f)[0] for f in gf] == [_mask(f)[0] for f in wf]
        assert Counter(_mask(f)[1] for f in gf) == Counter(_mask(f)[1] for f in wf)
    else:
        assert (
            got[len(b"".join(split_frames(got)[:skip])) :]
            == want[len(b"".join(split_frames(want)[:skip])) :]
        )
    assert got_closed == want_closed


# where Valkey 9, the fallback oracle, differs from Redis 7.0.15
REDIS_ONLY = {"unknown names, raw bytes resp3", "hello option, raw bytes"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=redis_only) if n in REDIS_ONLY else n for n in SCENARIOS]
)
def test_same_bytes_as_the_oracle(servers, name):
    oracle, node = servers
    payload, unordered = SCENARIOS[name]
    skip = 1 if payload.startswith(HELLO3) else 0  # HELLO's server fields differ
    _compare(oracle, node, payload, unordered, skip)


@pytest.mark.parametrize("name", list(PROTOCOL_ERRORS))
def test_protocol_errors_reply_and_close(servers, name):
    oracle, node = servers
    (want, want_closed), (got, got_closed) = exchange_pair(oracle, node, PROTOCOL_ERRORS[name])
    assert got == want
    assert want_closed and got_closed


def _pubsub(port: int, sub_payload: bytes, pub_payload: bytes, resp3: bool = False):
    with connect(port) as sub, connect(port) as pub:
        if resp3:
            sub.sendall(HELLO3)
            read_quiet(sub)
        sub.sendall(sub_payload)
        confirmations, _ = read_quiet(sub)
        pub.sendall(pub_payload)
        replies, _ = read_quiet(pub)
        messages, _ = read_quiet(sub)
    return confirmations, replies, messages


PATTERN_CASES = [
    b"news.*",
    b"h?llo",
    b"h[ae]llo",
    b"h[^e]llo",
    b"h[a-b]llo",
    b"h[z-a]llo",
    b"h\\*llo",
    b"h[\\]]llo",
    b"h[abc",
    b"*",
    b"*a*b*",
    b"a\\",
    b"[",
    b"?",
]
CHANNELS = [b"news.1", b"hello", b"hallo", b"hxllo", b"h*llo", b"h]llo", b"hb", b"ab", b"a\\"]
CHANNELS += [b"habc", b"x", b"", b"aXbY", b"h[abc"]


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_delivery_same_as_the_oracle(servers, resp3):
    """Channels, patterns (escapes, classes, negation, ranges, reversed and
    unclosed classes) and shard channels: same frames, same receiver counts."""
    oracle, node = servers
    sub = b"SUBSCRIBE hello news.1\r\n" + b"".join(
        b"*2\r\n$10\r\nPSUBSCRIBE\r\n$%d\r\n%b\r\n" % (len(p), p) for p in PATTERN_CASES
    )
    sub += b"SSUBSCRIBE shard1\r\n"
    pub = b"".join(
        b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%b\r\n$3\r\nmsg\r\n" % (len(c), c) for c in CHANNELS
    )
    pub += b"SPUBLISH shard1 m\r\nSPUBLISH hello m\r\n"
    want = _pubsub(oracle, sub, pub, resp3)
    got = _pubsub(node, sub, pub, resp3)
    assert got[0] == want[0]  # confirmations
    assert got[1] == want[1]  # PUBLISH replies: receiver counts
    # within one PUBLISH Redis writes channel subscribers first, then patterns in
    # its own dict order: compare the multiset of message frames
    assert Counter(split_frames(got[2])) == Counter(split_frames(want[2]))
    assert len(split_frames(got[2])) > len(CHANNELS)


def test_large_payload_same_as_the_oracle(servers):
    oracle, node = servers
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    pub = b"*3\r\n$7\r\nPUBLISH\r\n$3\r\nbig\r\n$%d\r\n%b\r\n" % (len(payload), payload)
    for port in (oracle, node):
        _confirm, replies, messages = _pubsub(port, b"SUBSCRIBE big\r\n", pub)
        assert replies == b":1\r\n"
        assert messages == b"*3\r\n$7\r\nmessage\r\n$3\r\nbig\r\n$%d\r\n%b\r\n" % (
            len(payload),
            payload,
        )


def test_disconnect_cleans_up_like_the_oracle(servers):
    results = []
    for port in servers:
        s = connect(port)
        s.sendall(b"SUBSCRIBE gone\r\nPSUBSCRIBE gone.*\r\nSSUBSCRIBE sgone\r\n")
        read_quiet(s)
        s.close()
        time.sleep(0.2)
        out, _ = exchange(
            port, b"PUBSUB NUMSUB gone\r\nPUBSUB NUMPAT\r\nPUBSUB SHARDNUMSUB sgone\r\n"
        )
        results.append(out)
    assert results[1] == results[0]
    assert results[0] == (b"*2\r\n$4\r\ngone\r\n:0\r\n:0\r\n*2\r\n$5\r\nsgone\r\n:0\r\n")


# a connection publishing to itself in one pipeline: Redis writes every reply
# and every push in command order (one output buffer per client). RESP3 only:
# a subscribed RESP2 connection cannot PUBLISH.
SELF_PUBLISH = {
    "resp3": HELLO3 + b"SUBSCRIBE self\r\nPUBLISH self m1\r\nPSUBSCRIBE s*\r\n"
    b"PUBLISH self m2\r\nSSUBSCRIBE sh\r\nSPUBLISH sh m3\r\nPING\r\nECHO e\r\n",
    "resp3 after reset": HELLO3
    + b"SUBSCRIBE self\r\nRESET\r\n"
    + HELLO3
    + b"SUBSCRIBE self\r\nPUBLISH self m1\r\nPING\r\nRESET\r\nPUBLISH self m2\r\n",
}


@redis_only  # Valkey 9 writes PUBLISH's reply before the message to the publisher itself
@pytest.mark.parametrize("name", list(SELF_PUBLISH))
def test_self_publish_in_command_order(servers, name):
    oracle, node = servers
    (want, _), (got, _) = exchange_pair(oracle, node, SELF_PUBLISH[name])
    assert hello_masked(got) == hello_masked(want)
    assert b"message" in got


def test_rejected_commands_are_not_processed_commands(servers):
    # INFO's total_commands_processed counts what ran, not what was rejected
    # (unknown command, wrong arity, subscribed context)
    deltas = []
    for port in servers:
        out, _ = exchange(
            port,
            b"INFO stats\r\nNOSUCH x\r\nPUBLISH a\r\nPING\r\nECHO x\r\nPUBLISH a b\r\n"
            b"SUBSCRIBE c\r\nECHO y\r\nUNSUBSCRIBE c\r\nINFO stats\r\n",
        )
        counts = [int(v) for v in re.findall(rb"total_commands_processed:(\d+)", out)]
        assert len(counts) == 2, out
        deltas.append(counts[1] - counts[0])
    assert deltas[1] == deltas[0] == 6


def test_structural_replies(servers):
    """Replies that differ in content by nature have the same shape."""
    oracle, node = servers
    for payload in (HELLO3, b"HELLO 2\r\n"):
        want = split_frames(exchange(oracle, payload)[0])
        got = split_frames(exchange(node, payload)[0])
        assert len(got) == len(want) == 1
        assert got[0][:3] == want[0][:3]  # map/array of 7 pairs
        for key in (b"server", b"version", b"proto", b"id", b"mode", b"role", b"modules"):
            assert key in got[0]
    for payload in (b"CLIENT INFO\r\n", b"CLIENT LIST\r\n"):
        want = exchange(oracle, payload)[0].decode()
        got = exchange(node, payload)[0].decode()
        want_keys = [kv.split("=")[0] for kv in want.split("\r\n")[1].split()]
        got_keys = [kv.split("=")[0] for kv in got.split("\r\n")[1].split()]
        for key in ("id", "addr", "laddr", "name", "age", "idle", "flags", "db", "sub", "psub"):
            assert key in want_keys and key in got_keys
    got = exchange(node, b"INFO\r\n")[0]
    assert got.startswith(b"$") and b"# Server\r\n" in got and b"# Filters\r\n" in got
    assert exchange(node, b"COMMAND COUNT\r\n")[0].startswith(b":")


def test_closing_quote_rule_is_redis_7s(servers):
    """Redis 7's sdssplitargs requires a closing quote to be followed by a
    space; the node keeps that rule. (A known difference of Valkey 9, the
    fallback oracle: it glues ``'a'b`` into ``ab``.)"""
    oracle, node = servers
    out, closed = exchange(node, b"ECHO 'a'b\r\n")
    assert out == b"-ERR Protocol error: unbalanced quotes in request\r\n" and closed
    if ORACLE == REDIS:
        assert exchange(oracle, b"ECHO 'a'b\r\n") == (out, closed)
    else:
        assert exchange(oracle, b"ECHO 'a'b\r\n")[0] == b"$2\r\nab\r\n"


def test_node_keeps_serving_after_protocol_errors(servers):
    _, node = servers
    for payload in PROTOCOL_ERRORS.values():
        exchange(node, payload)
    assert exchange(node, b"PING\r\n")[0] == b"+PONG\r\n"
    with socket.create_connection(("127.0.0.1", node), 5) as s:
        s.sendall(b"*1\r\n$999999999999\r\n")
        out, closed = read_quiet(s)
    assert out == b"-ERR Protocol error: invalid bulk length\r\n" and closed
