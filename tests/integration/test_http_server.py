"""bloomcast/http_server.py's bounds (issues 41 and 49): idle connections
never keep a request out (over MAX_WAITING the oldest is closed, counted),
at most MAX_CONNECTIONS requests answered at once with PROBE_SLOTS kept for
the probes (one more is answered 503 and counted), a slow head, a client
that stops reading and a whole answer each have a time budget (aborted,
counted), an answer that raises is counted and the server goes on, and a
file body is read off the event loop (a read that takes 0.3 s never holds
another request)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from bloomcast import http_server
from bloomcast.http_server import Body, Request, SmallHttpServer
from bloomcast.testing import free_port

pytestmark = pytest.mark.timeout(60)


class Files(SmallHttpServer):
    probe_paths = frozenset({"/healthz"})

    def __init__(self, file: Path) -> None:
        super().__init__()
        self.file = file

    def answer(self, request: Request) -> tuple[str, str, Body]:
        if request.path == "/boom":
            raise RuntimeError("a bug")
        if request.path == "/file":
            return "200 OK", "text/plain", self.file
        return "200 OK", "text/plain", b"ok\n"


async def _get(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    return data


def test_idle_connections_make_room_and_busy_requests_are_refused_with_503(monkeypatch, tmp_path):
    monkeypatch.setattr(http_server, "MAX_WAITING", 2)
    monkeypatch.setattr(http_server, "PROBE_SLOTS", 0)
    monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 0)

    async def main() -> tuple[bytes, bytes, bytes, SmallHttpServer]:
        server = Files(tmp_path / "f")
        await server.start("127.0.0.1", free_port())
        idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
        await asyncio.sleep(0.1)
        # the third idle connection closed the first: it reads EOF at once
        first = await asyncio.wait_for(idle[0][0].read(), 5)
        monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 2)
        served = await _get(server.port, "/")  # closes the second idle one to make room
        monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 0)
        refused = await _get(server.port, "/")
        for _, writer in idle:
            writer.close()
        monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 2)
        boom = await _get(server.port, "/boom")
        await server.stop()
        return first, served, refused + boom, server

    first, served, refused, server = asyncio.run(main())
    assert first == b""
    assert served.endswith(b"\r\n\r\nok\n")
    # /boom is closed with no answer: nothing after the 503
    assert refused == b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n" + (
        b"Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    assert server.refusals() == {"busy": 1, "idle_closed": 2, "timeout": 0}
    assert server.errors == 1  # /boom: closed, counted (and logged once a minute)


def test_probes_keep_their_slots_while_downloads_that_stop_reading_fill_the_rest(
    monkeypatch, tmp_path
):
    """Three downloads that stop reading hold every non-probe slot until the
    drain timeout cuts them; meanwhile a probe is answered, a fourth download
    refused. Before issue 49 a stalled drain held its slot for good."""
    monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 4)
    monkeypatch.setattr(http_server, "PROBE_SLOTS", 1)
    monkeypatch.setattr(http_server, "DRAIN_SECONDS", 1.0)
    file = tmp_path / "f"
    file.write_bytes(b"x" * (64 * 1024 * 1024))  # more than the socket buffers hold

    async def main() -> tuple[bytes, bytes, SmallHttpServer, int]:
        server = Files(file)
        await server.start("127.0.0.1", free_port())
        stalled = []
        for _ in range(3):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /file HTTP/1.0\r\n\r\n")
            stalled.append((reader, writer))
        while server._open < 3:
            await asyncio.sleep(0.01)
        refused = await _get(server.port, "/file")
        probe = await _get(server.port, "/healthz")
        while server._open:  # each stalled drain ends at DRAIN_SECONDS
            await asyncio.sleep(0.05)
        for _, writer in stalled:
            writer.close()
        await server.stop()
        return refused, probe, server, server._open

    refused, probe, server, still_open = asyncio.run(main())
    assert refused.startswith(b"HTTP/1.0 503 Service Unavailable\r\n")
    assert probe.endswith(b"\r\n\r\nok\n")
    assert server.refusals() == {"busy": 1, "idle_closed": 0, "timeout": 3}
    assert still_open == 0


def test_a_head_that_never_ends_and_an_answer_over_its_budget_are_cut(monkeypatch, tmp_path):
    monkeypatch.setattr(http_server, "HEAD_SECONDS", 0.3)
    monkeypatch.setattr(http_server, "REQUEST_SECONDS", 0.3)

    class Slow(Files):
        async def answer_async(self, request: Request) -> tuple[str, str, Body]:
            if request.path == "/slow":
                await asyncio.sleep(30)
            return self.answer(request)

    async def main() -> tuple[bytes, bytes, Slow]:
        server = Slow(tmp_path / "f")
        await server.start("127.0.0.1", free_port())
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET / HTTP/1.0\r\n")  # the head never ends
        cut = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        slow = await asyncio.wait_for(_get(server.port, "/slow"), 10)
        await server.stop()
        return cut, slow, server

    cut, slow, server = asyncio.run(main())
    assert cut == b"" and slow == b""
    assert server.refusals() == {"busy": 0, "idle_closed": 0, "timeout": 2}


def test_a_slow_file_read_never_holds_the_loop(monkeypatch, tmp_path):
    file = tmp_path / "f"
    file.write_bytes(b"x" * (3 * http_server.CHUNK))
    pread = os.pread

    def slow(fd: int, n: int, offset: int) -> bytes:
        time.sleep(0.3)
        return pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", slow)

    async def main() -> tuple[bytes, float]:
        server = Files(file)
        await server.start("127.0.0.1", free_port())
        sending = asyncio.create_task(_get(server.port, "/file"))
        worst = 0.0
        while not sending.done():
            before = time.monotonic()
            await asyncio.sleep(0.01)
            worst = max(worst, time.monotonic() - before - 0.01)
        await server.stop()
        return sending.result(), worst

    body, worst = asyncio.run(main())
    assert body.endswith(b"\r\n\r\n" + b"x" * (3 * http_server.CHUNK))
    assert worst < 0.15  # a read on the loop would hold it 0.3 s
