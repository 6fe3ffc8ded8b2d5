"""The declared identity against redis-server 7.0.15 (router/identity.py):
HELLO's map byte for byte but its ``server`` value and client id, HELLO's
texts before AUTH, INFO's server section (7.0.15's fields in its order, the
values that do not depend on the process the same), and what a node without
a bus says to cluster commands: a standalone Redis's words. The cluster
node's side (``mode cluster``) is in test_cluster_commands.py."""

from __future__ import annotations

import re

import pytest

from tests.differential.oracle import (
    HELLO3,
    exchange,
    hello_identity_masked,
    oracle_server,
    redis_only,
)
from tests.procs import bloomcast_node, connect, read_quiet

pytestmark = [pytest.mark.timeout(120), redis_only]

HELLOS = (
    b"HELLO\r\nHELLO 2\r\nHELLO 3\r\nHELLO 3 SETNAME a\r\nHELLO 2 SETNAME b\r\n"
    b"CLIENT GETNAME\r\nHELLO 3 SETNAME x SETNAME y\r\nCLIENT GETNAME\r\n"
)


@pytest.mark.parametrize("prefix", [b"", HELLO3], ids=["resp2", "resp3"])
def test_hello_declares_the_oracle_version_and_mode(servers, prefix):
    oracle, node = servers
    want, got = exchange(oracle, prefix + HELLOS)[0], exchange(node, prefix + HELLOS)[0]
    assert b"7.0.15" in want and b"standalone" in want
    assert hello_identity_masked(got) == hello_identity_masked(want)


def test_hello_before_auth_same_bytes():
    """NOAUTH's text, and options applied as they are read: a name set by a
    HELLO that then fails NOAUTH stays set."""
    payload = (
        b"HELLO 3\r\nHELLO 2 SETNAME early\r\nHELLO 3 AUTH default wrong SETNAME x\r\n"
        b"HELLO 3 SETNAME bad\xff\r\nPING\r\nAUTH pw\r\nCLIENT GETNAME\r\n"
        b"HELLO 3 AUTH default pw SETNAME late\r\nCLIENT GETNAME\r\n"
    )
    # the oracle is ready when it answers PING: its password is set after
    with oracle_server() as oracle, bloomcast_node("--requirepass", "pw") as node:
        assert exchange(oracle, b"CONFIG SET requirepass pw\r\n")[0] == b"+OK\r\n"
        want, got = exchange(oracle, payload), exchange(node, payload)
    assert b"HELLO AUTH <user> <pass>" in want[0] and b"$5\r\nearly\r\n" in want[0]
    assert (hello_identity_masked(got[0]), got[1]) == (hello_identity_masked(want[0]), want[1])


def _server_section(port: int) -> dict[str, str]:
    with connect(port) as s:
        s.sendall(b"INFO server\r\n")
        raw, _ = read_quiet(s)
    body = raw.split(b"\r\n", 1)[1].decode()
    return dict(line.split(":", 1) for line in body.split("\r\n") if ":" in line)


#: server fields whose values do not depend on the process or the build
SAME_VALUES = (
    "redis_version", "redis_git_sha1", "redis_mode", "os", "arch_bits", "monotonic_clock",
    "multiplexing_api", "process_supervised", "hz", "configured_hz", "config_file",
    "io_threads_active",
)  # fmt: skip


def test_info_server_has_7_0_15s_fields_in_its_order(servers):
    oracle, node = servers
    theirs, ours = _server_section(oracle), _server_section(node)
    assert [f for f in ours if f in theirs] == list(theirs)
    assert {f: ours[f] for f in SAME_VALUES} == {f: theirs[f] for f in SAME_VALUES}
    assert ours["run_id"] != theirs["run_id"] and re.fullmatch(r"[0-9a-f]{40}", ours["run_id"])
    assert abs(int(ours["lru_clock"]) - int(theirs["lru_clock"])) <= 2
    assert int(ours["tcp_port"]) == node


@pytest.mark.parametrize("prefix", [b"", HELLO3], ids=["resp2", "resp3"])
def test_a_node_without_a_bus_is_standalone(servers, prefix):
    """INFO's cluster section and every CLUSTER subcommand as a Redis whose
    cluster support is disabled (existence and arity checked first)."""
    oracle, node = servers
    payload = prefix + (
        b"INFO cluster\r\nCLUSTER INFO\r\nCLUSTER MYID\r\nCLUSTER NODES\r\nCLUSTER SLOTS\r\n"
        b"CLUSTER SHARDS\r\nCLUSTER KEYSLOT a\r\nCLUSTER HELP\r\nCLUSTER LINKS\r\n"
        b"CLUSTER FORGET x\r\nCLUSTER MEET 127.0.0.1 1\r\nCLUSTER COUNTKEYSINSLOT 1\r\n"
        b"CLUSTER GETKEYSINSLOT 1 1\r\nCLUSTER\r\nCLUSTER FOO\r\nCLUSTER KEYSLOT\r\n"
        b"cluster info\r\n"
    )
    want, got = exchange(oracle, payload), exchange(node, payload)
    assert want[0].count(b"cluster support disabled") == 13
    assert (hello_identity_masked(got[0]), got[1]) == (hello_identity_masked(want[0]), want[1])
