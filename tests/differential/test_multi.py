"""MULTI / EXEC / DISCARD / WATCH / UNWATCH against the oracle, byte for byte,
RESP2 and RESP3: QUEUED, EXEC's array (a SUBSCRIBE's confirmations and a
message to itself inside it, where Redis writes them), EXECABORT after a
command refused while queueing, the nesting / without-MULTI errors, the
commands that run at once inside MULTI, CLIENT REPLY inside a transaction."""

from __future__ import annotations

import pytest

from tests.differential.oracle import HELLO3, assert_same_as_oracle, exchange, redis_only
from tests.procs import connect, read_quiet

pytestmark = pytest.mark.timeout(120)

CASES = {
    "queued and exec": b"MULTI\r\nPING\r\nECHO a\r\nPUBSUB NUMSUB x\r\nEXEC\r\nPING\r\n",
    "empty": b"MULTI\r\nEXEC\r\nMULTI\r\nDISCARD\r\nPING\r\n",
    "subscribe and self-publish inside": b"MULTI\r\nPING\r\nSUBSCRIBE a b\r\n"
    b"PUBLISH a x\r\nECHO hi\r\nEXEC\r\nPING\r\n",
    "pattern and shard inside": b"MULTI\r\nPSUBSCRIBE a*\r\nSSUBSCRIBE s\r\nPUBLISH ab m\r\n"
    b"SPUBLISH s n\r\nPUNSUBSCRIBE\r\nEXEC\r\nPING\r\n",
    "errors": b"MULTI\r\nMULTI\r\nFOO\r\nPING a b c\r\nEXEC\r\nEXEC\r\nDISCARD\r\n",
    "arity error aborts": b"MULTI\r\nPUBLISH\r\nPING\r\nEXEC\r\nPING\r\n",
    "unknown subcommand aborts": b"MULTI\r\nCLIENT FOO\r\nEXEC\r\n",
    "runtime error does not abort": b"MULTI\r\nSELECT 100\r\nPING\r\nCLIENT LIST TYPE x\r\n"
    b"EXEC\r\n",
    "watch": b"MULTI\r\nWATCH x\r\nPING\r\nDISCARD\r\nWATCH x y\r\nUNWATCH\r\nWATCH\r\n"
    b"WATCH k\r\nMULTI\r\nPING\r\nEXEC\r\nUNWATCH x\r\n",
    "subscribed resp2 cannot multi": b"SUBSCRIBE a\r\nMULTI\r\nPING\r\n",
    "reset ends it": b"MULTI\r\nPING\r\nRESET\r\nEXEC\r\n",
    "quit inside": b"MULTI\r\nPING\r\nQUIT\r\nPING\r\n",
    "exec arity": b"MULTI\r\nEXEC x\r\nEXEC\r\nDISCARD x\r\nMULTI x\r\n",
    "resp3 subscribe inside": HELLO3 + b"MULTI\r\nPING\r\nSUBSCRIBE a b\r\nPUBLISH a x\r\n"
    b"ECHO hi\r\nEXEC\r\nPING\r\n",
    "resp3 subscribed then multi": HELLO3 + b"SUBSCRIBE a\r\nMULTI\r\nPUBLISH a m\r\n"
    b"UNSUBSCRIBE\r\nEXEC\r\n",
}


#: where Valkey 9 (the fallback oracle) answers otherwise than Redis 7.0.15:
#: its own pub/sub order and wording inside EXEC
VALKEY_DIFFERS = {
    "resp3 subscribe inside",
    "watch",
    "pattern and shard inside",
    "errors",
    "resp3 subscribed then multi",
    "subscribe and self-publish inside",
}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=redis_only) if n in VALKEY_DIFFERS else n for n in CASES],
)
def test_multi_same_bytes_as_the_oracle(servers, name):
    assert_same_as_oracle(servers, CASES[name])


@redis_only
def test_reply_off_inside_silences_the_rest_of_exec_like_redis(servers):
    """Redis writes EXEC's header, then nothing: raw bytes (not whole frames)."""
    oracle, node = servers
    payload = b"MULTI\r\nCLIENT REPLY OFF\r\nPING\r\nEXEC\r\nPING\r\nCLIENT REPLY ON\r\n"
    assert exchange(node, payload) == exchange(oracle, payload)


def _flags_and_multi(port: int) -> list[str]:
    """flags= and multi= of a connection with two commands queued, as another
    connection's CLIENT LIST ID sees them."""
    with connect(port) as a, connect(port) as b:
        a.sendall(b"CLIENT ID\r\nMULTI\r\nPING\r\nPING\r\n")
        replies, _ = read_quiet(a)
        client_id = replies.split(b"\r\n", 1)[0][1:]
        b.sendall(b"CLIENT LIST ID " + client_id + b"\r\n")
        line, _ = read_quiet(b)
    fields = dict(f.split("=", 1) for f in line.decode().split("\r\n")[1].split())
    return [fields["flags"], fields["multi"]]


def test_client_list_shows_the_transaction_like_redis(servers):
    oracle, node = servers
    assert _flags_and_multi(node) == _flags_and_multi(oracle)


def test_a_subscribe_of_more_than_a_slice_inside_exec_like_redis(servers):
    """Over SLICE_NAMES names a SUBSCRIBE runs over several loop turns
    (issue 14), except inside EXEC, whose commands never wait: all at once,
    its confirmations inside EXEC's reply, as Redis writes them."""
    names = b" ".join(b"big:%d" % i for i in range(3000))
    payload = b"MULTI\r\nSUBSCRIBE " + names + b"\r\nPUBLISH big:7 m\r\nEXEC\r\nPING\r\n"
    assert_same_as_oracle(servers, payload)
