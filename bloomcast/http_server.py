"""A tiny HTTP/1.0 GET server on asyncio streams, shared by the node's
``/metrics`` (bloomcast/metrics.py) and the dashboard (bloomcast/dashboard/):
one request per connection, ``respond(path)`` decides the answer. A bad or
slow request (10 s for the head) just closes the connection."""

from __future__ import annotations

import asyncio
import contextlib


class SmallHttpServer:
    """Subclasses implement :meth:`respond`; ``extra_headers`` go on every answer."""

    extra_headers = ""

    def __init__(self) -> None:
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
        """(status line, content type, body) of ``GET path``."""
        raise NotImplementedError

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, path, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            if method not in ("GET", "HEAD"):
                status, kind, body = "405 Method Not Allowed", "text/plain", b""
            else:
                status, kind, body = self.respond(path.split("?", 1)[0])
            writer.write(
                f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(body)}\r\n{self.extra_headers}"
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
