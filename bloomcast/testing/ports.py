"""Loopback ports: pick free ones, wait until a server listens, wait until one is free.

Every process the tests, the benchmarks and the demo start listens on
127.0.0.1 only, on a port picked here: one implementation, so a fix to the
port race (or to the readiness probe) reaches every caller at once.

Ports are picked below the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 by default), never with
bind(0): a port from the ephemeral range can be taken by any outgoing
connection (a node dialling a peer, a client) between the moment it is
picked and the moment the server binds it.

A port is free when picked, but nothing holds it until its server binds it:
two picks in a row (a client port, then a bus port) could name the same
port. So this process never hands out a port it handed out among its last
:data:`RECENT` picks (seen: two nodes of one test cluster given one port).

Under pytest-xdist (``pytest -n N``: ``PYTEST_XDIST_WORKER`` gwI and
``PYTEST_XDIST_WORKER_COUNT`` N set in each worker) worker I picks only the
ports p with p % N == I, so two workers never hand out one port; a node's
default bus port (port + 10000) stays its worker's when N divides 10000.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import socket
import subprocess
import time

LOOPBACK = "127.0.0.1"
#: the lowest port handed out (below: well-known and registered services)
LOWEST_PORT = 15000

_PING = b"*1\r\n$4\r\nPING\r\n"
#: how many of this process's latest picks are not handed out again
RECENT = 512
_recent: collections.deque[int] = collections.deque(maxlen=RECENT)


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default when unreadable)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _worker_share() -> tuple[int, int] | None:
    """(I, N) in pytest-xdist's worker I of N (module doc), else None."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not worker.startswith("gw") or not worker[2:].isdigit() or not count.isdigit():
        return None
    index, n = int(worker[2:]), int(count)
    return (index, n) if 0 <= index < n else None


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port free on ``host`` a moment ago, outside the ephemeral range."""
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """``n`` distinct free ports outside the ephemeral range (each bound, with
    every socket held open until all are chosen). Racy only against another
    process picking the same way, which random starts make unlikely."""
    low, high = ephemeral_range()
    # below the range only: a default bus port (port + 10000) stays <= 65535
    pool = list(range(LOWEST_PORT, max(low, LOWEST_PORT + 1024)))
    share = _worker_share()
    if share is not None:
        index, count = share
        pool = [port for port in pool if port % count == index]
    rng = random.Random(os.getpid() * 1_000_003 + time.monotonic_ns())
    socks: list[socket.socket] = []
    try:
        recent = set(_recent)
        for port in rng.sample(pool, len(pool)):
            if len(socks) == n:
                break
            if port in recent:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((host, port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            raise RuntimeError(f"fewer than {n} free ports on {host} outside {low}-{high}")
        ports = [int(s.getsockname()[1]) for s in socks]
        _recent.extend(ports)
        return ports
    finally:
        for s in socks:
            s.close()


def wait_port(
    port: int,
    proc: subprocess.Popen[bytes] | None = None,
    timeout: float = 30.0,
    *,
    ping: bool = False,
    host: str = LOOPBACK,
) -> None:
    """Block until something accepts a TCP connection on ``port`` (``ping``: and
    answers PING with +PONG, i.e. a RESP server that is ready for commands).

    A plain connect is the probe for servers that may refuse PING (a node
    started with ``--requirepass``). Raises RuntimeError if ``proc`` exits
    first, TimeoutError after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.5) as s:
            if not ping:
                return
            s.sendall(_PING)
            if s.recv(64).startswith(b"+PONG"):
                return
        time.sleep(0.05)
    raise TimeoutError(f"no {'PONG' if ping else 'listener'} on port {port} within {timeout} s")


def wait_for_ping(
    port: int, timeout: float = 10.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until a RESP server on ``port`` answers PING with +PONG (see :func:`wait_port`)."""
    wait_port(port, proc, timeout, ping=True)


def wait_port_free(port: int, timeout: float, host: str = LOOPBACK) -> None:
    """Block until ``port`` can be bound again (a killed server's port, before a
    restart on the same port); returns silently after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            return
        time.sleep(0.05)
