"""A real ``bloomcast node`` process and raw sockets for the tests: a socket
reader that returns the exact reply bytes. Ports, waiting and stopping come
from the project's process toolkit (:mod:`bloomcast.testing`). Used by
tests/router and tests/differential."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from bloomcast.testing import free_port, stop_process, wait_port


@contextlib.contextmanager
def bloomcast_node(
    *extra: str, bus: bool = False, env: dict[str, str] | None = None
) -> Iterator[int]:
    """A node on a free port (``env``: the process's whole environment, or
    this one's when None); yields the port, stops the node after."""
    port = free_port()
    args = [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(port)]
    args += ["--cluster-port", str(free_port())] if bus else ["--no-bus"]
    proc = subprocess.Popen(
        [*args, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    try:
        wait_port(port, proc)
        yield port
    finally:
        stop_process(proc, timeout=10)


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), 5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_quiet(s: socket.socket, settle: float = 0.15, limit: float = 5.0) -> tuple[bytes, bool]:
    """Read until the peer is quiet for ``settle`` s; returns (bytes, closed)."""
    out = b""
    deadline = time.monotonic() + limit
    s.settimeout(settle)
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(1 << 20)
        except TimeoutError:
            return out, False
        if not chunk:
            return out, True
        out += chunk
    return out, False


def ignore_sigint() -> None:
    """``preexec_fn`` of a child started as a non-interactive shell starts a
    background job (``cmd &``): with SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
