"""CLIENT LIST TYPE / ID against redis-server 7.0.15: errors and empty
results byte for byte, RESP2 and RESP3; the lines listed by id (each
server's ids are its own)."""

from __future__ import annotations

import re

import pytest

from tests.differential.oracle import HELLO3, exchange, hello_masked, redis_only
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
