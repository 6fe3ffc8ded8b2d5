"""Loopback ports: pick free ones, wait until a server listens, wait until one is free.

Every process the tests, the benchmarks and the demo start listens on
127.0.0.1 only, on a port picked here: one implementation, so a fix to the
port race (or to the readiness probe) reaches every caller at once.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time

LOOPBACK = "127.0.0.1"

_PING = b"*1\r\n$4\r\nPING\r\n"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port free on ``host`` a moment ago (bind to port 0; racy but fine for tests)."""
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """``n`` distinct free ports (every socket held open until all are chosen)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]
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
