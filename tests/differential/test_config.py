"""CONFIG GET / SET / RESETSTAT / HELP against the oracle: the parameters a
node has, byte for byte (RESP2 and RESP3), Redis's errors, several patterns
(compared as sets: Redis lists them in its hash order), and RESETSTAT
resetting what INFO shows. Every SET here is undone at its end (the servers
are shared by the module); none changes port or bind."""

from __future__ import annotations

import pytest

from tests.differential.oracle import (
    HELLO3,
    assert_same_as_oracle,
    exchange,
    redis_only,
    split_frames,
)
from tests.procs import connect, read_quiet

pytestmark = pytest.mark.timeout(120)

_DEFAULT_LIMITS = b'"normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"'

CASES = {
    "get one": b"CONFIG GET maxclients\r\nCONFIG GET client-output-buffer-limit\r\n"
    b"CONFIG GET notify-keyspace-events\r\nCONFIG GET requirepass\r\nCONFIG GET databases\r\n"
    b"CONFIG GET proto-max-bulk-len\r\nCONFIG GET cluster-node-timeout\r\nCONFIG GET bind\r\n",
    "get as typed": b"CONFIG GET MAXCLIENTS\r\nCONFIG GET maxClients maxclients\r\n",
    "get nothing": b"CONFIG GET foo\r\nCONFIG GET nosuch*\r\nCONFIG GET\r\nCONFIG\r\n",
    "errors": b"CONFIG SET foo bar\r\nCONFIG SET maxclients abc\r\n"
    b"CONFIG SET maxclients 10 maxclients 11\r\nCONFIG SET maxclients\r\n"
    b"CONFIG SET maxclients 1 port\r\nCONFIG SET databases 5\r\n"
    b"CONFIG SET maxclients 0\r\nCONFIG SET maxclients -1\r\nCONFIG SET maxclients 4294967296\r\n"
    b"CONFIG SET maxclients 1e3\r\nCONFIG SET maxclients 10000 foo 1\r\n"
    b"CONFIG RESETSTAT x\r\nCONFIG FOO\r\nCONFIG GET maxclients\r\n",
    "maxclients": b"CONFIG SET maxclients 5000\r\nCONFIG GET maxclients\r\n"
    b"CONFIG SET maxclients 10000\r\nCONFIG GET maxclients\r\n",
    "keyspace events": b"CONFIG SET notify-keyspace-events KEA\r\n"
    b"CONFIG GET notify-keyspace-events\r\n"
    b"CONFIG SET notify-keyspace-events Ex$\r\nCONFIG GET notify-keyspace-events\r\n"
    b"CONFIG SET notify-keyspace-events An\r\nCONFIG GET notify-keyspace-events\r\n"
    b"CONFIG SET notify-keyspace-events nKEm\r\nCONFIG GET notify-keyspace-events\r\n"
    b"CONFIG SET notify-keyspace-events g$lshzxetd\r\nCONFIG GET notify-keyspace-events\r\n"
    b"CONFIG SET notify-keyspace-events dn\r\nCONFIG GET notify-keyspace-events\r\n"
    b"CONFIG SET notify-keyspace-events Q\r\nCONFIG GET notify-keyspace-events\r\n"
    b"CONFIG SET notify-keyspace-events ''\r\nCONFIG GET notify-keyspace-events\r\n",
    "output buffer limits": b"CONFIG SET client-output-buffer-limit 'pubsub 1mb 512kb 10'\r\n"
    b"CONFIG GET client-output-buffer-limit\r\n"
    b"CONFIG SET client-output-buffer-limit 'pubsub 1k 2K 3 replica 5 6 7'\r\n"
    b"CONFIG GET client-output-buffer-limit\r\n"
    b"CONFIG SET client-output-buffer-limit 'pubsub 1 2'\r\n"
    b"CONFIG SET client-output-buffer-limit 'foo 1 2 3'\r\n"
    b"CONFIG SET client-output-buffer-limit 'pubsub x 2 3'\r\n"
    b"CONFIG SET client-output-buffer-limit 'pubsub 5 6 -1'\r\n"
    b"CONFIG SET client-output-buffer-limit ''\r\nCONFIG GET client-output-buffer-limit\r\n"
    b"CONFIG SET client-output-buffer-limit " + _DEFAULT_LIMITS + b"\r\n"
    b"CONFIG GET client-output-buffer-limit\r\n",
    "a bad pair sets nothing": b"CONFIG SET maxclients 5000 client-output-buffer-limit x\r\n"
    b"CONFIG GET maxclients\r\n",
    "requirepass": b"CONFIG SET requirepass ''\r\nCONFIG GET requirepass\r\n"
    b"CONFIG SET requirepass x requirepass y\r\n",
}


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
@pytest.mark.parametrize("name", list(CASES))
def test_config_same_bytes_as_the_oracle(servers, name, resp3):
    assert_same_as_oracle(servers, (HELLO3 if resp3 else b"") + CASES[name])


@redis_only
def test_config_help_is_redis_wording_but_rewrite(servers):
    """A node has no config file: Redis's lines without REWRITE's two."""
    oracle, node = servers
    want = exchange(oracle, b"CONFIG HELP\r\n")[0].split(b"\r\n")[1:-1]
    got = exchange(node, b"CONFIG HELP\r\n")[0].split(b"\r\n")
    assert got[0] == b"*%d" % (len(want) - 2)
    rewrite = want.index(b"+REWRITE")
    assert got[1:-1] == want[:rewrite] + want[rewrite + 2 :]


def _pairs(port: int, command: bytes) -> set[tuple[bytes, bytes]]:
    frames = split_frames(exchange(port, command)[0])[0]
    items = split_frames(frames.split(b"\r\n", 1)[1])
    return set(zip(items[::2], items[1::2], strict=True))


@pytest.mark.parametrize(
    "command",
    [b"CONFIG GET maxclients bind databases\r\n", b"CONFIG GET *max*len*\r\n",
     b"CONFIG GET maxclients maxclients max*clients\r\n", b"CONFIG GET notify-* *-buffer-*\r\n",
     b"CONFIG GET cluster-node-timeout MAXCLIENTS\r\n"],
)  # fmt: skip
def test_several_patterns_give_what_redis_gives_for_the_node_parameters(servers, command):
    """Each pair the node lists is one Redis lists; the node has fewer parameters."""
    oracle, node = servers
    ours, theirs = _pairs(node, command), _pairs(oracle, command)
    assert ours and ours <= theirs
    assert len(ours) == len({name.lower() for name, _ in ours})  # each listed once


def _stats(port: int) -> dict[str, str]:
    with connect(port) as s:
        s.sendall(b"INFO everything\r\n")
        raw, _ = read_quiet(s)
    return dict(line.split(":", 1) for line in raw.decode().split("\r\n") if ":" in line)


@pytest.mark.parametrize("port_of", [0, 1], ids=["oracle", "node"])
def test_resetstat_resets_the_counters_info_shows(servers, port_of):
    port = servers[port_of]
    exchange(port, b"PING\r\nFOO\r\nPUBLISH a\r\nECHO x\r\n")
    before = _stats(port)
    assert int(before["total_commands_processed"]) > 0
    assert "cmdstat_echo" in before and "errorstat_ERR" in before
    reply, _ = exchange(port, b"CONFIG RESETSTAT\r\n")
    assert reply == b"+OK\r\n"
    after = _stats(port)
    # what this connection did since the reset: one CONFIG RESETSTAT, one INFO
    assert int(after["total_commands_processed"]) <= 2
    assert int(after["total_error_replies"]) == 0
    assert not [k for k in after if k.startswith(("errorstat_", "cmdstat_echo"))]
    assert int(after["total_connections_received"]) <= 2
    assert int(after["total_net_input_bytes"]) < int(before["total_net_input_bytes"])
