"""SHUTDOWN, ROLE, TIME, LASTSAVE, READONLY / READWRITE and CONFIG GET
cluster-enabled against the oracle (redis-server 7.0.15), standalone and
cluster-enabled, byte for byte (the clock's values masked); a SHUTDOWN that
stops both servers."""

from __future__ import annotations

import re
import time

import pytest

from tests.differential.oracle import (
    HELLO3,
    assert_same_as_oracle,
    exchange_pair,
    hello_masked,
    oracle_server,
    redis_only,
)
from tests.procs import bloomcast_node, connect, read_quiet

pytestmark = [pytest.mark.timeout(120), redis_only]

CASES = {
    "role": b"ROLE\r\nROLE x\r\n",
    "role resp3": HELLO3 + b"ROLE\r\n",
    "readonly readwrite standalone": b"READONLY\r\nREADWRITE\r\nREADONLY x\r\nREADWRITE x\r\n",
    "cluster-enabled": b"CONFIG GET cluster-enabled\r\n",
    "shutdown abort": b"SHUTDOWN ABORT\r\nshutdown abort\r\n",
    "shutdown syntax": b"SHUTDOWN FOO\r\nSHUTDOWN SAVE NOSAVE\r\nSHUTDOWN NOSAVE SAVE NOW\r\n"
    b"SHUTDOWN ABORT NOW\r\nSHUTDOWN FORCE ABORT\r\nSHUTDOWN ABORT ABORT\r\nSHUTDOWN NOW x\r\n",
    "shutdown in multi": b"MULTI\r\nSHUTDOWN\r\nSHUTDOWN ABORT\r\nEXEC\r\nMULTI\r\nPING\r\n"
    b"SHUTDOWN NOW\r\nDISCARD\r\n",
    "arity": b"TIME x\r\nLASTSAVE 1\r\n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_same_bytes_as_the_oracle(servers, name):
    assert_same_as_oracle(servers, CASES[name])


def _clock_masked(data: bytes) -> bytes:
    """TIME's two bulk strings and LASTSAVE's integer, each made 0."""
    data = re.sub(rb"\$\d+\r\n\d+\r\n", b"$1\r\n0\r\n", data)
    return re.sub(rb":\d+\r\n", b":0\r\n", data)


def test_time_and_lastsave_shapes(servers):
    oracle, node = servers
    payload = b"TIME\r\nLASTSAVE\r\n" + HELLO3 + b"TIME\r\nLASTSAVE\r\n"
    (want, _), (got, _) = exchange_pair(oracle, node, payload)
    assert hello_masked(_clock_masked(got)) == hello_masked(_clock_masked(want))
    with connect(node) as s:
        s.sendall(b"TIME\r\nLASTSAVE\r\n")
        reply, _ = read_quiet(s)
    secs, usecs, lastsave = (int(n) for n in re.findall(rb"(?:\$\d+\r\n|:)(\d+)\r\n", reply))
    now = time.time()
    assert abs(secs + usecs / 1e6 - now) < 5 and 0 <= usecs < 1_000_000
    # LASTSAVE: the node's start (it never saves an RDB), before now
    assert now - 600 < lastsave <= now


def test_cluster_node_answers_as_a_cluster_enabled_redis():
    payload = b"READONLY\r\nREADWRITE\r\nCONFIG GET cluster-enabled\r\nROLE\r\n"
    with (
        oracle_server("--cluster-enabled", "yes") as oracle,
        bloomcast_node(bus=True) as node,
    ):
        assert_same_as_oracle((oracle, node), payload)
        flagged = b"READONLY\r\nCLIENT INFO\r\nREADWRITE\r\nCLIENT INFO\r\n"
        (want, _), (got, _) = exchange_pair(oracle, node, flagged)
        assert want.startswith(b"+OK\r\n")
        flags = [re.findall(rb" flags=(\w+) ", d) for d in (want, got)]
        assert flags[0] == flags[1] == [b"r", b"N"]


def test_shutdown_closes_the_connection_without_a_reply_as_redis():
    """SHUTDOWN (a variant with every flag too): no reply, the connection
    closed, the server gone; the node's process exits 0."""
    for flags in (b"", b" NOSAVE NOW FORCE"):
        with oracle_server() as oracle, bloomcast_node() as node:
            (want, got) = exchange_pair(oracle, node, b"SHUTDOWN" + flags + b"\r\n")
            assert want == (b"", True)
            assert got == want
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    connect(node).close()
                except OSError:
                    break
                time.sleep(0.05)
            else:
                raise AssertionError("the node still accepts connections after SHUTDOWN")
