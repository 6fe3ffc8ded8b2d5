"""A latency probe and the socket helpers of ``bloomcast bench hostile``.

:class:`LatencyProbe` sends PING every 10 ms on its own connection, from
its own process (``python -m bench.probe PORT``: the benchmark's threads and its payloads of a
million arguments never delay the probe's timer), and reports the longest
round trip: how long any other client of the server waited while a case
ran. :func:`rss_mb` reads a server's resident and peak memory from
``/proc``.
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bloomcast.testing import LOOPBACK

#: the probe's period (issue 28: a PING every 10 ms)
PERIOD = 0.010


def connect(port: int, timeout: float = 300) -> socket.socket:
    s = socket.create_connection((LOOPBACK, port), timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def bulk(*args: bytes) -> bytes:
    """One RESP request."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def _probe_main(port: int, period: float) -> None:
    """The probe process: PING, wait for PONG, sleep to the next 10 ms tick
    (on stdin: a line ends it); prints every wait (JSON) at the end."""
    sock = connect(port, 60)
    waits: list[float] = []
    print("ready", flush=True)
    next_at = time.perf_counter()
    while True:
        start = time.perf_counter()
        sock.sendall(b"PING\r\n")
        got = b""
        while not got.endswith(b"\r\n"):
            chunk = sock.recv(64)
            if not chunk:
                break
            got += chunk
        waits.append(time.perf_counter() - start)
        next_at = max(next_at + period, time.perf_counter())
        ready, _, _ = select.select([sys.stdin], [], [], max(0.0, next_at - time.perf_counter()))
        if ready or not got:
            break
    print(json.dumps(waits), flush=True)


class LatencyProbe:
    """``with LatencyProbe(port) as probe: ...``, then ``probe.worst`` (s),
    ``probe.count``, ``probe.over_100ms``."""

    def __init__(self, port: int, period: float = PERIOD) -> None:
        self.port = port
        self.period = period
        self.worst = 0.0
        self.count = 0
        self.over_100ms = 0
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> LatencyProbe:
        root = str(Path(__file__).resolve().parent.parent)
        cmd = [sys.executable, "-m", "bench.probe", str(self.port), str(self.period)]
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root
        )
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the latency probe did not start")
        time.sleep(3 * self.period)
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(3 * self.period)
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        waits = json.loads(proc.stdout.readline() or "[]")
        proc.wait(30)
        self.count = len(waits)
        self.worst = max(waits, default=0.0)
        self.over_100ms = sum(1 for w in waits if w > 0.1)


def rss_mb(pid: int) -> tuple[float, float]:
    """(resident, peak resident) MB of process ``pid``."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


class Reader:
    """Reads a reply stream without keeping it: counts a marker across chunk
    boundaries, keeps the first bytes and the last ones."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.total = 0
        self.head = b""
        self.tail = b""
        self.count = 0

    def until(self, done: Callable[[Reader], bool], marker: bytes = b"") -> Reader:
        keep = max(len(marker) - 1, 64)
        while not done(self):
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"closed after {self.total} bytes: {self.tail[-80:]!r}")
            self.total += len(chunk)
            if len(self.head) < 256:
                self.head += chunk[: 256 - len(self.head)]
            window = self.tail[-keep:] + chunk
            if marker:
                self.count += window.count(marker) - self.tail[-keep:].count(marker)
            self.tail = window[-4096:]
        return self

    def markers(self, marker: bytes, n: int) -> Reader:
        """Until ``marker`` was seen ``n`` times."""
        return self.until(lambda r: r.count >= n, marker)

    def ends(self, tail: bytes) -> Reader:
        return self.until(lambda r: r.tail.endswith(tail))


def send_in_thread(sock: socket.socket, payload: bytes) -> threading.Thread:
    """``sendall`` on a thread, so the reply is read while a big request goes."""
    thread = threading.Thread(target=sock.sendall, args=(payload,), daemon=True)
    thread.start()
    return thread


def exchange(sock: socket.socket, payload: bytes, read: Callable[[Reader], Any]) -> Reader:
    """Send ``payload`` (from a thread) and read the reply with ``read``."""
    sender = send_in_thread(sock, payload)
    reader = Reader(sock)
    read(reader)
    sender.join()
    return reader


if __name__ == "__main__":
    _probe_main(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else PERIOD)
