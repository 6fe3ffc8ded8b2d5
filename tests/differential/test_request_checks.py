"""Redis 7.0.15's ``processCommand`` checks against redis-server 7.0.15, byte
for byte (router/command_checks.py): the subscribed context for every
command Redis has, the node's or not (name, arity, ACL first), the rejected
calls it counts, EXEC refused outside MULTI, an HTTP request, and no
CROSSSLOT on a standalone server (a node without a bus)."""

from __future__ import annotations

import re

import pytest

from tests.differential.oracle import assert_same_as_oracle, exchange, redis_only

pytestmark = [pytest.mark.timeout(120), redis_only]

CASES = {
    "redis commands the node lacks": b"SUBSCRIBE c\r\nGET a\r\nSET a b\r\nGET\r\nset a\r\n"
    b"OBJECT ENCODING x\r\nOBJECT\r\nOBJECT FOO\r\nMEMORY USAGE k\r\nSWAPDB 0 1\r\nFOO\r\n"
    b"*2\r\n$3\r\nG\x00T\r\n$1\r\na\r\nPING\r\n",
    "subcommands the node lacks": b"PSUBSCRIBE p*\r\nCONFIG REWRITE\r\nCONFIG REWRITE x\r\n"
    b"CONFIG FOO\r\nCONFIG\r\nCLIENT UNBLOCK 1\r\nCLIENT NO-TOUCH on\r\nCLUSTER ADDSLOTS 1\r\n"
    b"COMMAND GETKEYS get a\r\nACL FOO\r\nCLIENT \xff\r\n",
    # (not CLIENT SETINFO, CLUSTER MYSHARDID: Redis 7.2's, unknown subcommands to 7.0.15)
    "the node's own commands": b"SSUBSCRIBE s\r\nPUBLISH a b\r\nSPUBLISH s m\r\nINFO\r\n"
    b"CLUSTER INFO\r\nCLIENT LIST\r\nECHO\r\nPING\r\n",
    "in MULTI": b"SUBSCRIBE c\r\nMULTI\r\nGET a\r\nEXEC\r\nGET\r\nUNSUBSCRIBE\r\n",
    "exec refused outside MULTI": b"EXEC x\r\nMULTI\r\nEXEC x\r\nEXEC\r\nSUBSCRIBE c\r\nEXEC\r\n"
    b"MULTI\r\nEXEC\r\n",
    "no CROSSSLOT standalone": b"SSUBSCRIBE a{x} b{y}\r\nSUNSUBSCRIBE a{x} b{y}\r\n"
    b"MULTI\r\nSPUBLISH a{x} m\r\nSPUBLISH b{y} m\r\nEXEC\r\n",
    "an HTTP request": b"PING\r\nPOST / HTTP/1.1\r\nPING\r\n",
    "an HTTP header": b"Host: example.com\r\n",
    "an HTTP header, multibulk": b"*1\r\n$5\r\nhOsT:\r\nPING\r\n",
    "not quite HTTP": b"POSTX\r\nHost\r\n",
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_bytes_as_redis(servers, case):
    assert_same_as_oracle(servers, CASES[case])


def _stats(port: int) -> dict[str, tuple[int, int]]:
    raw = exchange(port, b"INFO commandstats\r\n")[0].decode()
    found = re.findall(r"cmdstat_([\w|-]+):calls=(\d+),.*rejected_calls=(\d+)", raw)
    return {name: (int(calls), int(rejected)) for name, calls, rejected in found}


def test_refusals_are_counted_as_redis_counts_them(servers):
    payload = (
        b"SUBSCRIBE c\r\nGET a\r\nGET a\r\nGET\r\nCONFIG REWRITE\r\nOBJECT FOO\r\nNOPE\r\n"
        b"CLIENT LIST\r\n"
    )
    deltas = []
    for port in servers:
        before = _stats(port)
        exchange(port, payload)
        after = _stats(port)
        deltas.append(
            {
                k: (v[0] - before.get(k, (0, 0))[0], v[1] - before.get(k, (0, 0))[1])
                for k, v in after.items()
                if v != before.get(k)
            }
        )
    theirs, ours = deltas
    assert theirs["get"] == (0, 3) and theirs["config|rewrite"] == (0, 1)
    theirs.pop("info", None), ours.pop("info", None)
    assert ours == theirs


def test_a_subscribers_last_command_is_the_refused_one(servers):
    """CLIENT LIST cmd= of a subscriber that sent GET: Redis's lastcmd is get."""

    def cmd_of(port: int) -> bytes:
        from tests.procs import connect, read_quiet

        with connect(port) as sub, connect(port) as other:
            sub.sendall(b"CLIENT ID\r\nSUBSCRIBE c\r\nGET a\r\n")
            cid = int(read_quiet(sub)[0].split(b"\r\n")[0][1:])
            other.sendall(b"CLIENT LIST ID %d\r\n" % cid)
            listed = read_quiet(other)[0]
            sub.sendall(b"NOPE\r\n")
            read_quiet(sub)
            other.sendall(b"CLIENT LIST ID %d\r\n" % cid)
            listed += read_quiet(other)[0]
        return b" ".join(re.findall(rb"cmd=\S+", listed))

    oracle, node = servers
    assert cmd_of(oracle) == b"cmd=get cmd=NULL"
    assert cmd_of(node) == cmd_of(oracle)


def test_acl_comes_before_the_subscribed_context(servers):
    """A user without GET gets NOPERM for it while subscribed, logged. (With
    all keys: key patterns are not checked for commands the node lacks.)"""
    payload = (
        b"ACL SETUSER ctx on nopass +@all -get &* ~*\r\nAUTH ctx x\r\nSUBSCRIBE c\r\nGET a\r\n"
        b"SET a b\r\nRESET\r\nACL LOG 1\r\nACL DELUSER ctx\r\nACL LOG RESET\r\n"
    )
    oracle, node = servers
    want, got = exchange(oracle, payload)[0], exchange(node, payload)[0]
    assert b"NOPERM this user has no permissions to run the 'get' command" in want

    def masked(data: bytes) -> bytes:  # ACL LOG's age and client line are the process's
        data = re.sub(rb"(age-seconds\r\n)\$\d+\r\n[\d.]+\r\n", rb"\1?", data)
        return re.sub(rb"(client-info\r\n)\$\d+\r\n[^\r]*\r\n", rb"\1?", data)

    assert masked(got) == masked(want)
