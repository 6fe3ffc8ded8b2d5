"""CLIENT LIST / INFO against redis-server 7.0.15: TYPE / ID errors and empty
results byte for byte, RESP2 and RESP3; the lines listed by id (each
server's ids are its own); and every field of a line, Redis 7.0.15's in its
order, with the same values where they are not the process's own (a socket,
times, buffer sizes), for the caller and for a client seen by another."""

from __future__ import annotations

import re

import pytest

from tests.differential.oracle import (
    HELLO3,
    client_info_masked,
    exchange,
    hello_identity_masked,
    hello_masked,
    redis_only,
)
from tests.procs import connect, read_quiet

pytestmark = [pytest.mark.timeout(120), redis_only]

ERRORS_AND_EMPTY = (
    b"CLIENT LIST TYPE master\r\nCLIENT LIST TYPE replica\r\nCLIENT LIST TYPE slave\r\n"
    b"CLIENT LIST TYPE Master\r\nCLIENT LIST TYPE foo\r\nCLIENT LIST TYPE\r\nCLIENT LIST ID\r\n"
    b"CLIENT LIST ID abc\r\nCLIENT LIST ID 0\r\nCLIENT LIST ID -1\r\n"
    b"CLIENT LIST ID 99999\r\nCLIENT LIST FOO\r\nCLIENT LIST FOO bar\r\n"
    b"CLIENT LIST TYPE normal x\r\nCLIENT LIST ID 99999 abc\r\nCLIENT LIST id 99999 99998\r\n"
    b"CLIENT LIST TYPE pubsub ID 1\r\nCLIENT LIST ID 1.5\r\nCLIENT LIST ID +1\r\n"
    b"CLIENT LIST ID 99999999999999999999\r\nCLIENT LIST TYPE \xff\x85\r\n"
    b'CLIENT LIST TYPE "a\\x00b"\r\nCLIENT LIST TYPE "a\\r\\nb"\r\n'
)


@pytest.mark.parametrize("prefix", [b"", HELLO3], ids=["resp2", "resp3"])
def test_client_list_errors_same_bytes_as_redis(servers, prefix):
    oracle, node = servers
    payload = prefix + ERRORS_AND_EMPTY
    assert hello_masked(exchange(node, payload)[0]) == hello_masked(exchange(oracle, payload)[0])


def _ids(reply: bytes) -> list[int]:
    return [int(m) for m in re.findall(rb"(?:^|\n|txt:)id=(\d+) ", reply)]


def _listing(port: int, resp3: bool) -> dict[str, list[int]]:
    """CLIENT LIST TYPE normal / pubsub and ID lists, seen from a normal
    connection, with one subscriber (shard channel only) connected."""
    with connect(port) as sub, connect(port) as me:
        if resp3:
            me.sendall(HELLO3)
            read_quiet(me)
        sub.sendall(b"CLIENT ID\r\nSSUBSCRIBE s\r\n")
        sub_id = int(read_quiet(sub)[0].split(b"\r\n")[0][1:])
        me.sendall(b"CLIENT ID\r\n")
        my_id = int(read_quiet(me)[0][1:-2])
        out = {}
        for name, cmd in {
            "pubsub": b"CLIENT LIST TYPE pubsub\r\n",
            "normal": b"CLIENT LIST TYPE NORMAL\r\n",
            "ids": b"CLIENT LIST ID %d 0 %d %d\r\n" % (sub_id, my_id, sub_id),
        }.items():
            me.sendall(cmd)
            ids = _ids(read_quiet(me)[0])
            out[name] = [{sub_id: -1, my_id: -2}.get(i, i) for i in ids]
        # other tests' connections may still be closing: only ours count here
        out["normal"] = [i for i in out["normal"] if i < 0]
        return out


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_client_list_type_and_id_like_redis(servers, resp3):
    oracle, node = servers
    want = _listing(oracle, resp3)
    assert want["pubsub"] == [-1] and want["normal"] == [-2] and want["ids"] == [-1, -2, -1]
    assert _listing(node, resp3) == want


#: the line's values that are each server's own: its client id too
_OWN = ("id",)

CLIENT_INFO_CASES = {
    "lone": b"CLIENT INFO\r\n",
    "named, db, resp3": b"CLIENT SETNAME me\r\nSELECT 3\r\nHELLO 3\r\nCLIENT INFO\r\n",
    "pipelined after a reply": b"PING\r\nECHO abc\r\nCLIENT INFO\r\n",
    "inside EXEC, subscribed": HELLO3 + b"SUBSCRIBE a b\r\nPSUBSCRIBE p*\r\nSSUBSCRIBE s\r\n"
    b"MULTI\r\nPUBLISH x y\r\nPING\r\nCLIENT INFO\r\nEXEC\r\n",
    "a refused command in MULTI queues nothing more": b"MULTI\r\nPING\r\nNOPE\r\nPING\r\n"
    b"EXEC\r\nMULTI\r\nPING\r\nCLIENT INFO\r\nEXEC\r\n",
    "unknown command before": b"NOPE\r\nCLIENT INFO\r\n",
}


@pytest.mark.parametrize("case", list(CLIENT_INFO_CASES))
def test_client_info_fields_like_redis(servers, case):
    """Every field of Redis 7.0.15 in its order; the values compared but the
    process's own (a socket, times, buffer sizes) and, in RESP3, the HELLO
    reply's length in obl (its server name differs)."""
    oracle, node = servers
    payload = CLIENT_INFO_CASES[case]
    extra = ("obl",) if b"HELLO" in payload else ()
    want, got = exchange(oracle, payload)[0], exchange(node, payload)[0]
    assert b"argv-mem=" in want
    assert client_info_masked(hello_identity_masked(got), *_OWN, *extra) == client_info_masked(
        hello_identity_masked(want), *_OWN, *extra
    )


def _seen_by_another(port: int, setup: bytes) -> bytes:
    """CLIENT LIST ID of a connection that sent ``setup`` (not waiting for
    all of its replies), as another connection sees it, and its CLIENT KILL."""
    with connect(port) as subject, connect(port) as observer:
        subject.sendall(b"CLIENT ID\r\n")
        cid = int(read_quiet(subject)[0][1:-2])
        subject.sendall(setup)
        read_quiet(subject)
        observer.sendall(b"CLIENT LIST ID %d\r\nCLIENT KILL ID %d\r\n" % (cid, cid))
        return read_quiet(observer)[0]


SEEN_CASES = {
    "idle": b"PING\r\n",
    "queueing in MULTI": b"MULTI\r\nPUBLISH chan msg\r\nPING\r\n",
    "subscribed": b"SUBSCRIBE a b\r\nPSUBSCRIBE p*\r\n",
    "half a request": b"*3\r\n$7\r\nPUBLISH\r\n$1\r\na\r\n",
    "half a bulk": b"*3\r\n$7\r\nPUBLISH\r\n$1\r\na\r\n$5\r\nhel",
    "half an inline request": b"PING\r\nECHO ab",
    "tracking bcast": b"CLIENT TRACKING on BCAST PREFIX x\r\n",
    "reply off": b"CLIENT REPLY OFF\r\n",
    "no-evict, named": b"CLIENT NO-EVICT on\r\nCLIENT SETNAME n1\r\n",
}


@pytest.mark.parametrize("case", list(SEEN_CASES))
def test_another_clients_fields_like_redis(servers, case):
    oracle, node = servers
    want, got = _seen_by_another(oracle, SEEN_CASES[case]), _seen_by_another(node, SEEN_CASES[case])
    assert want.endswith(b":1\r\n")  # CLIENT KILL ID found it
    # half a bulk: Redis has read its $ line and keeps the length, the node
    # keeps the line in its buffer (qbuf 3 vs 7) and reads it again
    own = (*_OWN, "qbuf") if case == "half a bulk" else _OWN
    assert client_info_masked(got, *own) == client_info_masked(want, *own)
