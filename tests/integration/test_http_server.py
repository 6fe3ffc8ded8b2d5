"""bloomcast/http_server.py's bounds (issue 41): at most MAX_CONNECTIONS
connections served at once (one more is answered 503 and counted), an answer
that raises is counted and the server goes on, and a file body is read off
the event loop (a read that takes 0.3 s never holds another request)."""

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


def test_connections_over_the_bound_are_refused_with_503_and_counted(monkeypatch, tmp_path):
    monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 2)

    async def main() -> tuple[bytes, bytes, bytes, int, int]:
        server = Files(tmp_path / "f")
        await server.start("127.0.0.1", free_port())
        idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        await asyncio.sleep(0.1)
        refused = await _get(server.port, "/")
        for _, writer in idle:
            writer.close()
        await asyncio.sleep(0.1)
        served = await _get(server.port, "/")
        boom = await _get(server.port, "/boom")
        await server.stop()
        return refused, served, boom, server.refused, server.errors

    refused, served, boom, count, errors = asyncio.run(main())
    assert refused.startswith(b"HTTP/1.0 503 Service Unavailable\r\n")
    assert served.endswith(b"\r\n\r\nok\n") and count == 1
    assert boom == b"" and errors == 1  # closed, counted (and logged once a minute)


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
