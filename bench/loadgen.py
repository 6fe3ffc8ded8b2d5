"""The load side of the benchmarks: redis-benchmark (the standard Redis load
tool, from Debian's redis-tools) and a pool of raw-socket subscribers.

Both servers under comparison get exactly the same load from the same tool.
"""

from __future__ import annotations

import csv
import io
import selectors
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass

from bloomcast.testing import LOOPBACK, Managed

INSTALL_HINT = "redis-benchmark not found: apt-get install redis-tools"


class MissingTool(RuntimeError):
    """A load tool the benchmark needs is not installed (message says how to get it)."""


def redis_benchmark_path() -> str:
    """Path of ``redis-benchmark``; raises MissingTool with the apt-get line."""
    path = shutil.which("redis-benchmark")
    if path is None:
        raise MissingTool(INSTALL_HINT)
    return path


def redis_benchmark_version() -> str:
    """E.g. ``"redis-benchmark 7.0.15"``."""
    out = subprocess.run(
        [redis_benchmark_path(), "--version"], capture_output=True, text=True, timeout=10
    ).stdout
    return out.strip().split(" (")[0]


@dataclass(frozen=True)
class BenchmarkResult:
    """One redis-benchmark run: requests per second and latencies in ms."""

    rps: float
    avg_latency_ms: float
    p50_latency_ms: float
    p99_latency_ms: float
    requests: int
    clients: int
    pipeline: int
    command: str


def parse_benchmark_csv(text: str) -> dict[str, float]:
    """The one data row of ``redis-benchmark --csv`` -> {column: value}.

    Raises ValueError when the output has no data row (e.g. the server refused
    the command and redis-benchmark printed an error instead).
    """
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if r]
    if len(rows) < 2 or rows[0][:2] != ["test", "rps"]:
        raise ValueError(f"unexpected redis-benchmark output: {text[:300]!r}")
    header, data = rows[0], rows[-1]
    return {name: float(value) for name, value in zip(header[1:], data[1:], strict=True)}


def redis_benchmark(
    port: int,
    command: list[str],
    *,
    clients: int = 50,
    requests: int = 100_000,
    pipeline: int = 1,
    timeout: float = 600.0,
) -> BenchmarkResult:
    """Run ``redis-benchmark -h 127.0.0.1 -p PORT -c CLIENTS -n REQUESTS -P PIPELINE
    --csv COMMAND...`` and parse its result. Raises MissingTool, ValueError
    (no result row), subprocess.TimeoutExpired."""
    cmd = [
        redis_benchmark_path(),
        "-h", LOOPBACK,
        "-p", str(port),
        "-c", str(clients),
        "-n", str(requests),
        "-P", str(pipeline),
        "--csv",
        *command,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    values = parse_benchmark_csv(proc.stdout)
    return BenchmarkResult(
        rps=values["rps"],
        avg_latency_ms=values["avg_latency_ms"],
        p50_latency_ms=values["p50_latency_ms"],
        p99_latency_ms=values["p99_latency_ms"],
        requests=requests,
        clients=clients,
        pipeline=pipeline,
        command=" ".join(command),
    )


def message_frame(channel: bytes, message: bytes) -> bytes:
    """The RESP2 push a subscriber receives for one PUBLISH
    (``*3 $7 message $len channel $len payload``, Redis pub/sub docs)."""
    return b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(channel),
        channel,
        len(message),
        message,
    )


def subscribe_reply(channel: bytes, count: int, verb: bytes = b"subscribe") -> bytes:
    """The RESP2 confirmation of SUBSCRIBE (or ``verb``, e.g. ``psubscribe``) when it
    is the ``count``-th subscription."""
    return b"*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n:%d\r\n" % (
        len(verb),
        verb,
        len(channel),
        channel,
        count,
    )


def pmessage_frame(pattern: bytes, channel: bytes, message: bytes) -> bytes:
    """The RESP2 push a PSUBSCRIBEd client receives for one matching PUBLISH."""
    return b"*4\r\n$8\r\npmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(pattern),
        pattern,
        len(channel),
        channel,
        len(message),
        message,
    )


class SubscriberPool(Managed):
    """``n`` raw-socket clients, each SUBSCRIBEd to ``channel`` (or to every
    channel of a list, all of the same length) on ``port``.

    A background thread drains every socket and counts bytes; since every
    message of a run has the same channel and payload, messages received =
    bytes / len(:func:`message_frame`). Raw sockets keep the counting cheap, so
    the subscriber side takes as little CPU as possible from the servers.

    Use as a context manager; :meth:`wait_for` blocks until every subscriber
    received ``count`` messages. ``closed`` counts sockets the server closed
    (e.g. output buffer limit).
    """

    def __init__(self, port: int, channel: bytes | list[bytes], n: int, message: bytes) -> None:
        self.port = port
        self.channels = [channel] if isinstance(channel, bytes) else list(channel)
        if not self.channels or len({len(ch) for ch in self.channels}) != 1:
            raise ValueError("channels must be given and all of the same length")
        self.n = n
        self.verb = b"subscribe"
        self.frame_len = len(message_frame(self.channels[0], message))
        self._socks: list[socket.socket] = []
        self._bytes: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.closed = 0
        self.last_receive = 0.0

    def start(self, timeout: float = 10.0) -> None:
        """Connect, SUBSCRIBE, wait for every confirmation, start draining."""
        confirm = b"".join(
            subscribe_reply(ch, i + 1, self.verb) for i, ch in enumerate(self.channels)
        )
        cmd = b"*%d\r\n$%d\r\n%s\r\n" % (
            1 + len(self.channels),
            len(self.verb),
            self.verb.upper(),
        ) + b"".join(b"$%d\r\n%s\r\n" % (len(ch), ch) for ch in self.channels)
        for _ in range(self.n):
            s = socket.create_connection((LOOPBACK, self.port), timeout=timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks.append(s)
            s.sendall(cmd)
        for s in self._socks:
            got = b""
            while len(got) < len(confirm):
                chunk = s.recv(len(confirm) - len(got))
                if not chunk:
                    raise ConnectionError("server closed a subscriber before confirming")
                got += chunk
            if got != confirm:
                raise ConnectionError(f"unexpected SUBSCRIBE reply {got[:200]!r}")
            s.setblocking(False)
            self._bytes[s.fileno()] = 0
        self._thread = threading.Thread(target=self._drain, name="subscribers", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        sel = selectors.DefaultSelector()
        for s in self._socks:
            sel.register(s, selectors.EVENT_READ)
        buf = bytearray(1 << 20)
        while not self._stop.is_set():
            for key, _ in sel.select(timeout=0.05):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    got = sock.recv_into(buf)
                except BlockingIOError:
                    continue
                except OSError:
                    got = 0
                if got == 0:
                    sel.unregister(sock)
                    with self._lock:
                        self.closed += 1
                    continue
                with self._lock:
                    self._bytes[sock.fileno()] += got
                    self.last_receive = time.monotonic()
        sel.close()

    def messages(self) -> int:
        """Messages received so far, summed over all subscribers."""
        with self._lock:
            return sum(self._bytes.values()) // self.frame_len

    def snapshot(self) -> tuple[int, float]:
        """(messages received so far, monotonic time of the last receive), together."""
        with self._lock:
            return sum(self._bytes.values()) // self.frame_len, self.last_receive

    def min_messages(self) -> int:
        """Messages received by the subscriber that received the fewest."""
        with self._lock:
            return min(self._bytes.values(), default=0) // self.frame_len

    def wait_for(self, per_subscriber: int, timeout: float = 60.0) -> bool:
        """Block until every subscriber received ``per_subscriber`` messages (all
        its channels together);
        False on timeout or when a subscriber was closed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.min_messages() >= per_subscriber:
                return True
            if self.closed:
                return False
            time.sleep(0.005)
        return False

    def stop(self) -> None:
        """Stop draining and close every socket (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        for s in self._socks:
            s.close()
        self._socks.clear()


class PatternPool(SubscriberPool):
    """``n`` raw-socket clients, each PSUBSCRIBEd to one ``pattern`` on ``port``;
    counts ``pmessage`` pushes for channels of ``channel_len`` bytes (every
    channel of a run has the same length, so every push has the same size)."""

    def __init__(self, port: int, pattern: bytes, channel_len: int, n: int, message: bytes) -> None:
        super().__init__(port, pattern, n, message)
        self.verb = b"psubscribe"
        self.frame_len = len(pmessage_frame(pattern, b"x" * channel_len, message))
