"""CLIENT TRACKING / CACHING / GETREDIR / TRACKINGINFO against redis-server
7.0.15, byte for byte, RESP2 and RESP3 (router/commands/tracking.py): the
options and their errors in Redis's order, prefixes, the CACHING flag's life,
redirection (ids replaced by placeholders: each server numbers its own
clients), FLUSHALL's "every key" invalidation, a broken redirect, and how
CLIENT LIST shows tracking (flags t / B / R, redir=)."""

from __future__ import annotations

import re
import socket

import pytest

from tests.differential.oracle import (
    HELLO3,
    client_info_masked,
    exchange,
    hello_identity_masked,
    redis_only,
)
from tests.procs import connect, read_quiet

pytestmark = [pytest.mark.timeout(120), redis_only]

SINGLE = {
    "on off getredir info": b"CLIENT GETREDIR\r\nCLIENT TRACKINGINFO\r\nCLIENT TRACKING on\r\n"
    b"CLIENT GETREDIR\r\nCLIENT TRACKINGINFO\r\nCLIENT TRACKING OFF\r\nCLIENT GETREDIR\r\n"
    b"CLIENT TRACKING off\r\nCLIENT TRACKINGINFO\r\n",
    "option errors": b"CLIENT TRACKING maybe\r\nCLIENT TRACKING on FOO\r\nCLIENT TRACKING\r\n"
    b"CLIENT TRACKING on redirect\r\nCLIENT TRACKING on prefix\r\nCLIENT TRACKING on REDIRECT x\r\n"
    b"CLIENT TRACKING on REDIRECT 999\r\nCLIENT TRACKING on REDIRECT 0\r\n"
    b"CLIENT TRACKING on REDIRECT -1\r\nCLIENT TRACKING maybe REDIRECT 999\r\n"
    b"CLIENT TRACKING maybe bcast\r\nCLIENT TRACKING off redirect 999\r\n"
    b"CLIENT TRACKING off OPTIN OPTOUT BCAST PREFIX a\r\nCLIENT TRACKING on PREFIX a\r\n"
    b"CLIENT TRACKING on OPTIN OPTOUT\r\nCLIENT TRACKING on BCAST OPTIN\r\n"
    b"CLIENT TRACKING on BCAST OPTOUT NOLOOP\r\nCLIENT TRACKINGINFO\r\n",
    "mode switches": b"CLIENT TRACKING on\r\nCLIENT TRACKING on BCAST\r\n"
    b"CLIENT TRACKING on OPTIN\r\nCLIENT TRACKING on OPTOUT\r\nCLIENT TRACKING on\r\n"
    b"CLIENT TRACKING on OPTOUT noloop\r\n"
    b"CLIENT TRACKINGINFO\r\nCLIENT TRACKING off\r\nCLIENT TRACKING on BCAST noloop\r\n"
    b"CLIENT TRACKING on\r\nCLIENT TRACKINGINFO\r\n",
    "prefixes": b"CLIENT TRACKING on BCAST PREFIX b PREFIX a\r\nCLIENT TRACKINGINFO\r\n"
    b"CLIENT TRACKING on BCAST PREFIX ab\r\nCLIENT TRACKING on BCAST PREFIX c PREFIX \xff\r\n"
    b"CLIENT TRACKING on BCAST\r\nCLIENT TRACKINGINFO\r\nCLIENT TRACKING on BCAST PREFIX z\r\n"
    b"CLIENT TRACKING off\r\nCLIENT TRACKING on BCAST PREFIX a PREFIX a\r\nCLIENT TRACKINGINFO\r\n"
    b'CLIENT TRACKING on BCAST PREFIX "x\\x00y" PREFIX x\r\nCLIENT TRACKINGINFO\r\n',
    # Redis answers a collision among the new prefixes after the first with its
    # error and still enables tracking: two replies
    "prefix collision after the first": b"CLIENT TRACKING on BCAST PREFIX a PREFIX b PREFIX bc\r\n"
    b"CLIENT TRACKINGINFO\r\nCLIENT GETREDIR\r\n",
    "caching": b"CLIENT CACHING yes\r\nCLIENT TRACKING on\r\nCLIENT CACHING yes\r\n"
    b"CLIENT CACHING no\r\nCLIENT CACHING maybe\r\nCLIENT CACHING\r\nCLIENT CACHING yes x\r\n"
    b"CLIENT TRACKING on OPTIN\r\nCLIENT CACHING no\r\nCLIENT CACHING YES\r\n"
    b"CLIENT TRACKINGINFO\r\nPING\r\nCLIENT TRACKINGINFO\r\nCLIENT CACHING yes\r\nFOO\r\n"
    b"CLIENT TRACKINGINFO\r\nCLIENT CACHING yes\r\nCLIENT\r\nCLIENT TRACKINGINFO\r\n"
    b"CLIENT CACHING yes\r\nCLIENT NOPE\r\nCLIENT TRACKINGINFO\r\nCLIENT CACHING yes\r\n"
    b"CLIENT TRACKING on\r\nCLIENT TRACKINGINFO\r\nCLIENT TRACKING on OPTIN\r\n"
    b"CLIENT TRACKINGINFO\r\nCLIENT TRACKING off\r\nCLIENT TRACKING on OPTOUT\r\n"
    b"CLIENT CACHING NO\r\nCLIENT TRACKINGINFO\r\nCLIENT TRACKING off\r\nCLIENT CACHING no\r\n",
    "caching and MULTI": b"CLIENT TRACKING on OPTIN\r\nCLIENT CACHING yes\r\nMULTI\r\nPING\r\n"
    b"CLIENT TRACKINGINFO\r\nEXEC\r\nCLIENT TRACKINGINFO\r\nMULTI\r\nCLIENT CACHING yes\r\n"
    b"CLIENT TRACKINGINFO\r\nEXEC\r\nCLIENT TRACKINGINFO\r\nCLIENT CACHING yes\r\n"
    b"CLIENT REPLY ON\r\nCLIENT TRACKINGINFO\r\nPING\r\nCLIENT TRACKINGINFO\r\n",
    "reset": b"CLIENT TRACKING on BCAST PREFIX p\r\nRESET\r\nCLIENT TRACKINGINFO\r\n"
    b"CLIENT GETREDIR\r\n",
    "flush invalidates every key": b"CLIENT TRACKING on\r\nFLUSHALL\r\nPING\r\nFLUSHDB ASYNC\r\n"
    b"MULTI\r\nFLUSHALL\r\nFLUSHDB\r\nPING\r\nEXEC\r\nFLUSHALL x\r\nCLIENT TRACKING off\r\n"
    b"FLUSHALL\r\nCLIENT TRACKING on BCAST\r\nFLUSHALL\r\n",
    "subscribed context": b"SUBSCRIBE c\r\nCLIENT TRACKING on\r\nCLIENT GETREDIR\r\n",
}


@pytest.mark.parametrize("prefix", [b"", HELLO3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", list(SINGLE))
def test_one_connection_same_bytes(servers, case, prefix):
    oracle, node = servers
    payload = prefix + SINGLE[case]
    want, got = exchange(oracle, payload), exchange(node, payload)
    assert (hello_identity_masked(got[0]), got[1]) == (hello_identity_masked(want[0]), want[1])


def _id(s: socket.socket) -> int:
    s.sendall(b"CLIENT ID\r\n")
    return int(read_quiet(s)[0][1:-2])


def _send(s: socket.socket, payload: bytes, ids: dict[int, bytes]) -> bytes:
    """Send; the reply with each known client id replaced by its placeholder
    (not an integer that is no id: HELLO's ``proto`` and a subscribe count,
    which an id of 1-3 would equal on one server only)."""
    s.sendall(payload)
    out = read_quiet(s)[0]
    for cid, name in ids.items():
        out = re.sub(
            rb"((?<!proto\r\n)(?<!\$1\r\nx\r\n):|redir=|id=)%d(\r\n| )" % cid,
            rb"\1" + name + rb"\2",
            out,
        )
    return re.sub(rb"=\d+\r\ntxt:|\$\d+\r\nid=", b"<text>", out)


def _redirected(port: int, target_setup: bytes, tracker_resp3: bool) -> list[bytes]:
    """A target connection (subscribed or not, RESP2 or 3) and a tracking
    connection redirecting to it; FLUSHALL from a third; then the target
    goes and the tracker flushes itself: what each connection saw."""
    seen = []
    with connect(port) as target, connect(port) as tracker, connect(port) as other:
        if tracker_resp3:
            tracker.sendall(HELLO3)
            read_quiet(tracker)
        target_id = _id(target)
        ids = {target_id: b"TARGET", _id(tracker): b"TRACKER"}
        seen.append(_send(target, target_setup, ids))
        setup = b"CLIENT TRACKING on REDIRECT %d\r\nCLIENT GETREDIR\r\nCLIENT TRACKINGINFO\r\n"
        seen.append(_send(tracker, setup % target_id, ids))
        seen.append(_send(other, b"FLUSHALL\r\n", ids))
        seen.append(_send(target, b"PING\r\n", ids))
        seen.append(_send(tracker, b"PING\r\n", ids))
        seen.append(_send(tracker, b"FLUSHDB\r\nCLIENT TRACKINGINFO\r\n", ids))
        seen.append(_send(target, b"PING\r\n", ids))
        target.close()
        seen.append(_send(other, b"PING\r\n", ids))  # the target is gone meanwhile
        seen.append(
            _send(
                tracker,
                b"CLIENT TRACKINGINFO\r\nFLUSHALL\r\nCLIENT TRACKINGINFO\r\nCLIENT INFO\r\n",
                ids,
            )
        )
    return seen


#: CLIENT INFO after a pipeline: Redis keeps the replies before it partly in
#: its reply list, the node in one queue
_LISTED = ("obl", "oll", "omem")


@pytest.mark.parametrize("tracker_resp3", [False, True], ids=["tracker2", "tracker3"])
@pytest.mark.parametrize(
    "target_setup",
    [b"PING\r\n", b"SUBSCRIBE x\r\n", HELLO3, HELLO3 + b"SUBSCRIBE x\r\n"],
    ids=["plain", "subscribed", "resp3", "resp3 subscribed"],
)
def test_redirected_invalidations_like_redis(servers, target_setup, tracker_resp3):
    oracle, node = servers
    want = _redirected(oracle, target_setup, tracker_resp3)
    got = _redirected(node, target_setup, tracker_resp3)
    assert b"tR" in want[-1] and b"broken_redirect" in want[-1]
    assert [hello_identity_masked(x) for x in got[:-1]] == [
        hello_identity_masked(x) for x in want[:-1]
    ]
    assert client_info_masked(got[-1], *_LISTED) == client_info_masked(want[-1], *_LISTED)


def test_flushall_from_another_client_reaches_a_resp3_tracker(servers):
    def run(port: int) -> tuple[bytes, bytes]:
        with connect(port) as tracker, connect(port) as other:
            tracker.sendall(HELLO3 + b"CLIENT TRACKING on BCAST PREFIX a\r\n")
            read_quiet(tracker)
            other.sendall(b"CLIENT TRACKING on\r\nFLUSHALL\r\n")
            return read_quiet(other)[0], read_quiet(tracker)[0]

    oracle, node = servers
    assert run(oracle) == (b"+OK\r\n+OK\r\n", b">2\r\n$10\r\ninvalidate\r\n_\r\n")
    assert run(node) == run(oracle)
