"""The dashboard's HTTP side: one static page and its JSON, HTTP/1.0 on
``asyncio.start_server`` (as bloomcast/metrics.py; no web framework).

``GET /`` the page (``index.html`` beside this module: vanilla JS, no build
step, nothing fetched from elsewhere); ``GET /api/cluster`` the poller's
latest snapshot; ``GET /healthz`` 200 while the dashboard runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

from bloomcast.dashboard.poller import Poller

PAGE = Path(__file__).with_name("index.html")


class DashboardServer:
    """Serves the page and ``/api/cluster`` from ``poller``."""

    def __init__(self, poller: Poller) -> None:
        self.poller = poller
        self.page = PAGE.read_bytes()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        """Listen (OSError when the address is taken or not ours)."""
        self._server = await asyncio.start_server(self._handle, host, port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def respond(self, path: str) -> tuple[str, str, bytes]:
        """(status, content type, body) of ``GET path``."""
        path = path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            return "200 OK", "text/html; charset=utf-8", self.page
        if path == "/api/cluster":
            body = json.dumps(self.poller.snapshot(), separators=(",", ":")).encode()
            return "200 OK", "application/json", body
        if path == "/healthz":
            return "200 OK", "text/plain", b"ok\n"
        return "404 Not Found", "text/plain", b"try / or /api/cluster\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, path, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            if method not in ("GET", "HEAD"):
                status, kind, body = "405 Method Not Allowed", "text/plain", b""
            else:
                status, kind, body = self.respond(path)
            writer.write(
                f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
                "Connection: close\r\n\r\n".encode()
                + (body if method == "GET" else b"")
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            pass  # a bad or slow request: just close
        except ConnectionError:
            pass
        finally:
            with contextlib.suppress(ConnectionError):
                writer.close()
