"""Spool servers for the tests of ``stats run --nodes``: the node's own spool HTTP code
(bloomcast/http_server.py + spark/spool_service.py) in a process of its own over a
directory the test fills, and real ``bloomcast node`` processes with a spool."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from bloomcast.testing import free_port, free_ports, stop_process, wait_port
from spark.events import TrafficEvent
from tests.spark.events_data import lines_of

ROOT = Path(__file__).resolve().parents[2]

#: the spool endpoints of a node, without the node (no auth: loopback only)
SERVER = """
import asyncio, sys
from bloomcast.http_server import SmallHttpServer
from spark.spool_service import SpoolService

class Spool(SmallHttpServer):
    def __init__(self, directory):
        super().__init__()
        self.spool = SpoolService(directory)

    def answer(self, request):
        return self.spool.answer(request.method, request.path, request.query)

async def main():
    server = Spool(sys.argv[1])
    await server.start("127.0.0.1", int(sys.argv[2]))
    await asyncio.Event().wait()

asyncio.run(main())
"""


@contextlib.contextmanager
def spool_server(directory: Path, port: int | None = None) -> Iterator[str]:
    """Serve ``directory`` as a node's spool; yields ``127.0.0.1:port``."""
    port = port or free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(directory), str(port)], cwd=ROOT)
    try:
        wait_port(port, proc, 30)
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(proc, 5)


def write_spool_file(
    directory: Path, writer: str, n: int, events: Sequence[TrafficEvent], mtime: float
) -> Path:
    """``<writer>-<n>.ndjson`` holding ``events``, last written at ``mtime``."""
    path = directory / f"{writer}-{n:08d}.ndjson"
    path.write_text("".join(lines_of(list(events))))
    os.utime(path, (mtime, mtime))
    return path


def chunks(events: list[TrafficEvent], n: int) -> list[list[TrafficEvent]]:
    return [events[i * len(events) // n : (i + 1) * len(events) // n] for i in range(n)]


class SpoolNode:
    """One real ``bloomcast node`` (no bus) writing ``spool`` and serving it on its
    metrics port; :meth:`kill` is kill -9."""

    def __init__(self, spool: Path, *extra: str) -> None:
        self.spool = spool
        self.port, self.metrics_port = free_ports(2)
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None
        self.published = 0  # by this process (a restart starts again at 0)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.metrics_port}"

    def start(self) -> SpoolNode:
        """Start (or, after :meth:`kill`, restart: a new node id, the same ports)."""
        self.published = 0
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(self.port), "--no-bus",
             "--traffic-dir", str(self.spool), "--metrics-port", str(self.metrics_port),
             *self.extra],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(self.metrics_port, self.proc, 30)
        wait_port(self.port, self.proc, 30)
        return self

    def publish(self, n: int) -> str:
        """``n`` PUBLISH (channels ``room.0`` .. ``room.4``), returned once the tap wrote
        every event this process recorded; returns the node's id."""
        import redis

        with redis.Redis(port=self.port) as r:
            for i in range(n):
                r.publish(f"room.{i % 5}", "x")
            self.published += n
            want = self.published

            def written() -> int:
                return int(r.info("traffic")["traffic_events_written"])

            wait_until(lambda: written() == want, "the tap to write every event", 30)
            # a node without the bus answers CLUSTER as Redis does (cluster support
            # disabled); its id is INFO's run_id, as the tap names its spool files
            return str(r.info("server")["run_id"])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 10)


def wait_until(cond, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)
