"""HELP replies against redis-server 7.0.15 (Valkey words them differently),
byte for byte in RESP2 and RESP3."""

from __future__ import annotations

import pytest

from tests.differential.oracle import HELLO3, exchange, hello_masked, redis_only

pytestmark = [pytest.mark.timeout(120), redis_only]


@pytest.mark.parametrize("prefix", [b"", HELLO3], ids=["resp2", "resp3"])
def test_pubsub_help_same_bytes_as_redis(servers, prefix):
    oracle, node = servers
    payload = prefix + b"PUBSUB HELP\r\npubsub help\r\n"
    assert hello_masked(exchange(node, payload)[0]) == hello_masked(exchange(oracle, payload)[0])


#: CLIENT SETINFO is Redis 7.2's, kept beside the declared 7.0.15, which has no such line
SETINFO_LINES = [
    b"+SETINFO <option> <value>",
    b"+    Set client meta attr. Options are:",
    b"+    * LIB-NAME: the client lib name.",
    b"+    * LIB-VER: the client lib version.",
]


@pytest.mark.parametrize("prefix", [b"", HELLO3], ids=["resp2", "resp3"])
def test_client_help_is_redis_wording(servers, prefix):
    """Redis lists subcommands the node does not have (KILL, PAUSE, TRACKING
    ...); the node's lines are Redis's lines for the ones it has, in order."""
    oracle, node = servers
    want = exchange(oracle, prefix + b"CLIENT HELP\r\n")[0].split(b"\r\n")
    got = exchange(node, prefix + b"CLIENT HELP\r\n")[0].split(b"\r\n")
    if prefix:
        want, got = want[want.index(b"*0") + 1 :], got[got.index(b"*0") + 1 :]
    assert got[0] == b"*%d" % (len(got) - 2)
    lines = got[1:-1]
    assert lines[:1] == want[1:2] and lines[-2:] == want[-3:-1]
    assert lines[lines.index(SETINFO_LINES[0]) :][: len(SETINFO_LINES)] == SETINFO_LINES
    redis_lines = iter(want[1:-1])
    for line in (x for x in lines if x not in SETINFO_LINES):
        assert line in redis_lines, line  # a subsequence of Redis's lines
    for sub in (b"+GETNAME", b"+ID", b"+INFO", b"+LIST [options ...]", b"+SETNAME <name>"):
        assert sub in lines
