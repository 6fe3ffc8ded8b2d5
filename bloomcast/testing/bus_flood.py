"""Bare TCP connections to a bus port, held open, and a client's PING waits
meanwhile (issue 49: a node under a connection flood still serves its clients
and keeps its peers). For tests/integration/test_bus_flood.py and the bus
flood case of ``bloomcast bench hostile`` (bench/hostile_bus.py)."""

from __future__ import annotations

import socket
import threading
import time

PING = b"*1\r\n$4\r\nPING\r\n"


def open_bare(
    port: int, count: int, sources: tuple[str, ...] = ("127.0.0.1",)
) -> list[socket.socket]:
    """``count`` connections to ``127.0.0.1:port`` that send nothing, from the
    loopback ``sources`` in turn (bind() before connect). Each connect
    completes in the kernel's backlog whatever the server does with it then."""
    socks = []
    for i in range(count):
        s = socket.socket()
        s.bind((sources[i % len(sources)], 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


def closed_count(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the server closed or reset (read without waiting)."""
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            closed += s.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    return closed


class PingWatch:
    """A client of ``port`` that connects, then PINGs every ``period`` s in a
    thread: ``worst`` (s) is its longest wait for +PONG, ``errors`` the PINGs
    that failed (an error, a reset, a timeout of ``timeout`` s)."""

    def __init__(self, port: int, period: float = 0.01, timeout: float = 5.0) -> None:
        self.port = port
        self.period = period
        self.timeout = timeout
        self.worst = 0.0
        self.pings = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PingWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 1)

    def _run(self) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        except OSError as exc:
            self.errors.append(f"connect: {exc}")
            return
        with s:
            while not self._stop.is_set():
                start = time.monotonic()
                try:
                    s.sendall(PING)
                    got = b""
                    while not got.endswith(b"\r\n"):
                        chunk = s.recv(64)
                        if not chunk:
                            raise ConnectionResetError("closed by the server")
                        got += chunk
                except OSError as exc:
                    self.errors.append(str(exc))
                    return
                if got != b"+PONG\r\n":
                    self.errors.append(got.decode(errors="replace"))
                self.worst = max(self.worst, time.monotonic() - start)
                self.pings += 1
                self._stop.wait(self.period)
