"""CLIENT KILL (old and filter forms), NO-EVICT, PAUSE / UNPAUSE against the
oracle: the replies and errors byte for byte, who gets killed, and what a
pause holds back (PUBLISH under WRITE, everything under ALL) until it ends."""

from __future__ import annotations

import pytest

from tests.differential.oracle import assert_same_as_oracle, exchange, redis_only
from tests.procs import connect, read_quiet

pytestmark = pytest.mark.timeout(120)

CASES = {
    "kill errors": b"CLIENT KILL 1.2.3.4:5\r\nCLIENT KILL foo\r\nCLIENT KILL ID 0\r\n"
    b"CLIENT KILL ID -1\r\nCLIENT KILL ID abc\r\nCLIENT KILL ID 999\r\nCLIENT KILL TYPE foo\r\n"
    b"CLIENT KILL TYPE normal SKIPME maybe\r\nCLIENT KILL USER nobody\r\n"
    b"CLIENT KILL ADDR 1.2.3.4:5\r\nCLIENT KILL LADDR 1.2.3.4:5\r\n"
    b"CLIENT KILL ID\r\nCLIENT KILL ID 1 TYPE\r\nCLIENT KILL FOO bar\r\n"
    b"CLIENT KILL TYPE pubsub\r\nCLIENT KILL TYPE master\r\nCLIENT KILL TYPE replica\r\n"
    b"CLIENT KILL TYPE slave\r\nCLIENT KILL MAXAGE 10\r\nCLIENT KILL ID 0 FOO\r\nCLIENT KILL\r\n"
    b"PING\r\n",
    "kill itself with skipme no": b"CLIENT KILL TYPE normal SKIPME no\r\nPING\r\n",
    "skipme yes spares itself": b"CLIENT KILL TYPE normal SKIPME yes\r\nPING\r\n",
    "no-evict": b"CLIENT NO-EVICT on\r\nCLIENT NO-EVICT OFF\r\nCLIENT NO-EVICT x\r\n"
    b"CLIENT NO-EVICT\r\nCLIENT NO-EVICT on x\r\n",
    "pause errors": b"CLIENT PAUSE\r\nCLIENT PAUSE abc\r\nCLIENT PAUSE -1\r\n"
    b"CLIENT PAUSE 10 foo\r\nCLIENT PAUSE 10 write x\r\nCLIENT UNPAUSE x\r\n"
    b"CLIENT PAUSE 99999999999999999999\r\nCLIENT PAUSE 1.5\r\nCLIENT PAUSE 0\r\n"
    b"CLIENT PAUSE 9223372036854775807\r\nCLIENT UNPAUSE\r\nPING\r\n",
    "pause write then unpause": b"CLIENT PAUSE 100000 WRITE\r\nCLIENT UNPAUSE\r\nPUBLISH x y\r\n",
}


#: where Valkey 9 (the fallback oracle) answers otherwise than Redis 7.0.15:
#: newer KILL filters (MAXAGE) and PAUSE wording
VALKEY_DIFFERS = {"kill errors", "pause errors"}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=redis_only) if n in VALKEY_DIFFERS else n for n in CASES],
)
def test_client_admin_same_bytes_as_the_oracle(servers, name):
    assert_same_as_oracle(servers, CASES[name])


def test_kill_itself_inside_exec_cuts_the_exec_reply_like_redis(servers):
    """Redis writes EXEC's header and the KILL's reply, then closes: raw bytes."""
    oracle, node = servers
    payload = b"MULTI\r\nCLIENT KILL TYPE normal SKIPME no\r\nPING\r\nEXEC\r\nPING\r\n"
    assert exchange(node, payload) == exchange(oracle, payload)


@redis_only
def test_no_evict_flag_like_redis(servers):
    """flags=e after NO-EVICT on, N after off (only the flags field: the
    other fields of CLIENT INFO differ between any two servers)."""

    def flags(port: int) -> list[str]:
        out, _ = exchange(port, b"CLIENT NO-EVICT on\r\nCLIENT INFO\r\nRESET\r\nCLIENT INFO\r\n"
                          b"CLIENT NO-EVICT off\r\nCLIENT INFO\r\n")  # fmt: skip
        return [f.split(" ", 1)[0] for f in out.decode().split("flags=")[1:]]

    oracle, node = servers
    assert flags(node) == flags(oracle) == ["e", "e", "N"]  # RESET keeps it (Redis 7.0)


def _kill_others(port: int) -> tuple[bytes, list[bool]]:
    """A kills by TYPE pubsub, then by ID, then the old form ADDR; which of
    the three other connections were closed."""
    with connect(port) as a, connect(port) as sub, connect(port) as b, connect(port) as c:
        sub.sendall(b"SUBSCRIBE ch\r\n")
        read_quiet(sub)
        b.sendall(b"CLIENT ID\r\n")
        b_id = read_quiet(b)[0][1:-2]
        c.sendall(b"CLIENT INFO\r\n")
        c_addr = read_quiet(c)[0].split(b"addr=")[1].split(b" ")[0]
        a.sendall(b"CLIENT KILL TYPE pubsub\r\nCLIENT KILL ID " + b_id + b"\r\n")
        replies = read_quiet(a)[0]
        a.sendall(b"CLIENT KILL " + c_addr + b"\r\nCLIENT KILL " + c_addr + b"\r\n")
        replies += read_quiet(a)[0]
        closed = [read_quiet(s)[1] for s in (sub, b, c)]
    return replies, closed


def _kill_by_user(port: int) -> tuple[bytes, bytes, bool]:
    """A alone (it waits until CLIENT LIST shows no other connection: a
    readiness probe's close may not be processed yet, and KILL USER counts
    it), then B joins: A's KILL USER default with no other connection, and
    with B, and whether B was closed. (In the batch case above this count
    raced with the probe's close under load.)"""
    with connect(port) as a:
        for _ in range(100):
            a.sendall(b"CLIENT LIST\r\n")
            if read_quiet(a, settle=0.05)[0].count(b"id=") == 1:
                break
        else:
            raise AssertionError("another connection stayed on")
        a.sendall(b"CLIENT KILL USER default\r\n")
        alone = read_quiet(a)[0]
        with connect(port) as b:
            b.sendall(b"PING\r\n")
            read_quiet(b)
            a.sendall(b"CLIENT KILL USER default\r\n")
            with_b = read_quiet(a)[0]
            closed = read_quiet(b)[1]
    return alone, with_b, closed


def test_kill_by_user_counts_the_others_like_redis(servers):
    oracle, node = servers
    assert _kill_by_user(node) == _kill_by_user(oracle) == (b":0\r\n", b":1\r\n", True)


def test_kill_closes_the_connections_it_names_like_redis(servers):
    oracle, node = servers
    assert _kill_others(node) == _kill_others(oracle)
    assert _kill_others(node)[1] == [True, True, True]


def _held_back(port: int, mode: bytes, command: bytes) -> tuple[bytes, bytes, bytes]:
    """(what B got while A's pause is on, A's UNPAUSE reply, what B got after)."""
    with connect(port) as a, connect(port) as b:
        a.sendall(b"CLIENT PAUSE 100000 " + mode + b"\r\n")
        assert read_quiet(a)[0] == b"+OK\r\n"
        b.sendall(command)
        during = read_quiet(b, settle=0.3)[0]
        a.sendall(b"CLIENT UNPAUSE\r\n")
        unpause = read_quiet(a)[0]
        after = read_quiet(b)[0]
    return during, unpause, after


@pytest.mark.parametrize(
    "command",
    [b"PUBLISH x y\r\nPING\r\n", b"PING\r\nSPUBLISH x y\r\nPING\r\n",
     b"MULTI\r\nPUBLISH x y\r\nEXEC\r\nPING\r\n", b"PING\r\nECHO a\r\n",
     b"CLIENT REPLY OFF\r\nPUBLISH x y\r\nCLIENT REPLY ON\r\nPING\r\n"],
)  # fmt: skip
def test_pause_write_holds_publish_until_unpause_like_redis(servers, command):
    oracle, node = servers
    assert _held_back(node, b"WRITE", command) == _held_back(oracle, b"WRITE", command)


def _exec_held_back(port: int) -> tuple[bytes, bytes, bytes, bytes]:
    """B queues a PUBLISH in MULTI, then A pauses writes, then B's EXEC is held
    until A's UNPAUSE runs it (the postponed EXEC runs from BLOCKED: found by
    tests/fuzz/fuzz_loop.py, where it raised). (B's queueing replies, what B
    got while paused, A's UNPAUSE reply, what B got after.)"""
    with connect(port) as a, connect(port) as b, connect(port) as sub:
        sub.sendall(b"SUBSCRIBE x\r\n")
        read_quiet(sub)
        b.sendall(b"MULTI\r\nPUBLISH x y\r\n")
        queued = read_quiet(b)[0]
        a.sendall(b"CLIENT PAUSE 100000 WRITE\r\n")
        assert read_quiet(a)[0] == b"+OK\r\n"
        b.sendall(b"EXEC\r\nPING\r\n")
        during = read_quiet(b, settle=0.3)[0]
        a.sendall(b"CLIENT UNPAUSE\r\n")
        unpause = read_quiet(a)[0]
        after = read_quiet(b)[0]
        assert read_quiet(sub)[0] == b"*3\r\n$7\r\nmessage\r\n$1\r\nx\r\n$1\r\ny\r\n"
    return queued, during, unpause, after


def test_pause_write_holds_an_exec_queued_before_it_like_redis(servers):
    oracle, node = servers
    assert _exec_held_back(node) == _exec_held_back(oracle)
    assert _exec_held_back(node)[3] == b"*1\r\n:1\r\n+PONG\r\n"


def _held_by_all(port: int) -> tuple[bytes, bytes]:
    """PAUSE ALL for 1 s: B's PING gets nothing at first (even UNPAUSE would
    wait), then its PONG once the pause is over."""
    with connect(port) as a, connect(port) as b:
        a.sendall(b"CLIENT PAUSE 1000 ALL\r\n")
        assert read_quiet(a)[0] == b"+OK\r\n"
        b.sendall(b"PING\r\n")
        during = read_quiet(b, settle=0.1)[0]
        after = read_quiet(b, settle=2.0)[0]
    return during, after


def test_pause_all_holds_every_command_like_redis(servers):
    oracle, node = servers
    assert _held_by_all(node) == _held_by_all(oracle) == (b"", b"+PONG\r\n")
