"""What a client sees of ``timeout``, ``tcp-keepalive``, ``tcp-backlog`` and the
pre-AUTH output limit, against the oracle (issue 28 item 5):

- CONFIG GET / SET of the three, byte for byte, Redis's errors;
- ``timeout``: an idle client is closed after the timeout, a subscriber
  (RESP2 or RESP3) is not; with ``maxclients`` reached by idle sockets, a
  new client gets in again once they are closed;
- before AUTH, a client that sends PINGs and never reads is cut early (Redis
  7.0.15 with Debian's CVE-2025-21605 fix), long before its 20 MB are sent.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import pytest

from tests.differential.oracle import (
    HELLO3,
    assert_same_as_oracle,
    exchange,
    oracle_server,
    redis_only,
)
from tests.procs import bloomcast_node, connect, read_quiet

pytestmark = pytest.mark.timeout(120)

CASES = {
    "get": b"CONFIG GET timeout\r\nCONFIG GET tcp-keepalive\r\nCONFIG GET tcp-backlog\r\n"
    b"CONFIG GET TIMEOUT\r\n",
    "set timeout": b"CONFIG SET timeout 2\r\nCONFIG GET timeout\r\nCONFIG SET timeout -1\r\n"
    b"CONFIG SET timeout abc\r\nCONFIG SET timeout 2147483648\r\nCONFIG SET timeout 1e3\r\n"
    b"CONFIG SET timeout 0\r\nCONFIG GET timeout\r\n",
    "set keepalive": b"CONFIG SET tcp-keepalive 60\r\nCONFIG GET tcp-keepalive\r\n"
    b"CONFIG SET tcp-keepalive -5\r\nCONFIG SET tcp-keepalive 300\r\n"
    b"CONFIG GET tcp-keepalive\r\n",
    "backlog is immutable": b"CONFIG SET tcp-backlog 100\r\nCONFIG GET tcp-backlog\r\n",
    "a bad pair sets nothing": b"CONFIG SET timeout 5 tcp-keepalive x\r\nCONFIG GET timeout\r\n",
}


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
@pytest.mark.parametrize("name", list(CASES))
def test_config_same_bytes_as_the_oracle(servers, name, resp3):
    assert_same_as_oracle(servers, (HELLO3 if resp3 else b"") + CASES[name])


@pytest.fixture(scope="module")
def timed_out() -> Iterator[tuple[int, int]]:
    """The oracle and a node with ``timeout 1`` and ``maxclients 4``."""
    flags = ("--timeout", "1", "--maxclients", "4")
    with oracle_server(*flags) as oracle, bloomcast_node(*flags) as node:
        yield oracle, node


def _closed(s: socket.socket) -> bool:
    s.settimeout(0.05)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def _idle_run(port: int) -> tuple[bool, bool, bool, bool]:
    """(idle closed, RESP2 subscriber open, RESP3 subscriber open, still open at 0.5 s)."""
    idle, sub2, sub3 = connect(port), connect(port), connect(port)
    try:
        idle.sendall(b"PING\r\n")
        sub2.sendall(b"SUBSCRIBE a\r\n")
        sub3.sendall(HELLO3 + b"SUBSCRIBE a\r\n")
        for s in (idle, sub2, sub3):
            read_quiet(s, 0.1)
        time.sleep(0.4)
        early = not _closed(idle)
        time.sleep(2.7)
        gone = _closed(idle)
        alive = []
        for s in (sub2, sub3):
            s.sendall(b"PING\r\n")
            alive.append(bool(read_quiet(s, 0.2)[0]) and not _closed(s))
        return gone, alive[0], alive[1], early
    finally:
        for s in (idle, sub2, sub3):
            s.close()


def test_timeout_closes_idle_clients_not_subscribers_like_redis(timed_out):
    oracle, node = timed_out
    want = _idle_run(oracle)
    assert want == (True, True, True, True)
    assert _idle_run(node) == want


def _lockout_run(port: int) -> tuple[bytes, bytes]:
    """maxclients 4 held by idle sockets: what a fifth client gets at once,
    and what a new one gets once the idle ones were closed."""
    idle = [connect(port) for _ in range(4)]
    try:
        time.sleep(0.2)
        with connect(port) as extra:  # refused at accept, before any request
            refused = read_quiet(extra, 0.3)[0]
        time.sleep(3.0)
        with connect(port) as late:
            late.sendall(b"PING\r\n")
            answered = read_quiet(late, 0.3)[0]
        return refused, answered
    finally:
        for s in idle:
            s.close()


def test_idle_sockets_at_maxclients_lock_no_one_out_like_redis(timed_out):
    oracle, node = timed_out
    want = _lockout_run(oracle)
    assert want == (b"-ERR max number of clients reached\r\n", b"+PONG\r\n")
    assert _lockout_run(node) == want


@pytest.fixture(scope="module")
def with_password() -> Iterator[tuple[int, int]]:
    """The oracle and a node with a password (set once they answer PING)."""
    with oracle_server() as oracle, bloomcast_node() as node:
        for port in (oracle, node):
            with connect(port) as s:
                s.sendall(b"CONFIG SET requirepass s3cret\r\n")
                assert read_quiet(s)[0] == b"+OK\r\n"
        yield oracle, node


def _flood_unread(port: int, total: int = 20 * 1024 * 1024) -> tuple[int, bytes]:
    """Send up to ``total`` bytes of PING before AUTH without reading; the
    bytes the server took before it cut the connection, and the first reply
    frame read afterwards (if any reached the client)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    block = b"PING\r\n" * 10922
    sent = 0
    try:
        while sent < total:
            sent += s.send(block)
    except OSError:
        pass
    first = b""
    with contextlib.suppress(OSError):
        first = s.recv(34)
    s.close()
    return sent, first


@redis_only
@pytest.mark.parametrize("pings", [481, 482, 5000])
def test_unauthenticated_pipeline_past_the_reply_buffer_same_bytes(with_password, pings):
    """Redis 7.0.15 (Debian's CVE-2025-21605 fix): 481 NOAUTH errors fit in
    the 16 KiB reply buffer; one more closes the connection, no reply sent."""
    oracle, node = with_password
    payload = b"PING\r\n" * pings
    assert _exchange(node, payload) == _exchange(oracle, payload)


def _exchange(port: int, payload: bytes) -> tuple[bytes, bool]:
    """:func:`exchange`, a reset read as a close (a server that closes with
    requests unread resets the connection: how much it read is its own)."""
    try:
        return exchange(port, payload)
    except ConnectionResetError:
        return b"", True


@redis_only
def test_unauthenticated_client_that_never_reads_is_cut_like_redis(with_password):
    """20 MB of PING before AUTH, never read: both cut the client on its
    first big read, so they take a small part of the 20 MB, and nothing it
    got is more than NOAUTH errors."""
    oracle, node = with_password
    for port in (oracle, node):
        sent, first = _flood_unread(port)
        assert sent < 4 * 1024 * 1024, port
        assert first in (b"", b"-NOAUTH Authentication required.\r\n"), port
    # an authenticated client that does not read is never cut (normal class: no limit)
    with connect(node) as s:
        s.sendall(b"AUTH s3cret\r\n" + b"PING\r\n" * 200_000)
        time.sleep(0.5)
        assert not _closed(s)


def _normal_client_unread(port: int, limits: bytes) -> tuple[bool, bool, bool]:
    """A client with ``client-output-buffer-limit`` set to ``limits`` pipelines
    16 MB of PING replies and reads nothing for a second: (whether it was
    closed, whether every reply came once it read, whether another client
    is still served)."""
    with connect(port) as ctl:
        ctl.sendall(b'CONFIG SET client-output-buffer-limit "%s"\r\n' % limits)
        assert read_quiet(ctl)[0] == b"+OK\r\n"
        n, arg = 2000, b"x" * 8192
        reply = b"$8192\r\n" + arg + b"\r\n"
        s = socket.create_connection(("127.0.0.1", port))
        with contextlib.suppress(OSError):  # a server that cut it may reset the rest
            s.sendall((b"PING " + arg + b"\r\n") * n)
        time.sleep(1.0)
        got, closed = b"", False
        s.settimeout(5)
        with contextlib.suppress(OSError):
            while len(got) < n * len(reply):
                chunk = s.recv(1 << 20)
                if not chunk:
                    closed = True
                    break
                got += chunk
        s.close()
        ctl.sendall(b"PING\r\n")
        served = read_quiet(ctl)[0] == b"+PONG\r\n"
        ctl.sendall(b'CONFIG SET client-output-buffer-limit "normal 0 0 0"\r\n')
        read_quiet(ctl)
    return closed, got == reply * n, served


def test_the_normal_class_limit_cuts_a_client_that_does_not_read_like_redis(servers):
    """``client-output-buffer-limit normal 1mb 0 0``: a client that pipelines
    16 MB of replies and reads nothing is cut, others are served; with the
    default ``normal 0 0 0`` it gets every reply once it reads (issue 41)."""
    oracle, node = servers
    for limits, want in ((b"normal 1048576 0 0", (True, False, True)),
                         (b"normal 0 0 0", (False, True, True))):  # fmt: skip
        assert _normal_client_unread(node, limits) == _normal_client_unread(oracle, limits) == want
