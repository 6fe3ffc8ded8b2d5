"""A tiny HTTP/1.0 server on asyncio streams, shared by the node's
``/metrics`` (bloomcast/metrics.py; ``/spool`` too, spark/spool_service.py) and
the dashboard (bloomcast/dashboard/): one request per connection,
``respond(path)`` (GET and HEAD) or ``answer(request)`` (any method) decides
the answer. A bad or slow request (10 s for the head) just closes the
connection. A :class:`~pathlib.Path` body is sent from the file in
:data:`CHUNK` pieces, waiting for the socket to drain after each, so a large
file never sits whole in memory nor holds the loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

#: bytes read from a file body per write (one ``os.pread`` from the page cache)
CHUNK = 65536

Body = bytes | Path


@dataclass(frozen=True)
class Request:
    """One request's line and headers (names lower-cased); ``peer_ip``: the client."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    peer_ip: str


def parse_request(head: bytes, peer_ip: str) -> Request:
    """The request line and headers of ``head`` (ValueError when malformed)."""
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    path, _, query = target.partition("?")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return Request(method, path, query, headers, peer_ip)


class SmallHttpServer:
    """Subclasses implement :meth:`respond` (or :meth:`answer`); ``extra_headers`` go
    on every answer."""

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

    def answer(self, request: Request) -> tuple[str, str, Body]:
        """(status line, content type, body) of any request; default: :meth:`respond`
        for GET and HEAD, 405 for the rest."""
        if request.method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b""
        return self.respond(request.path)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            peer = writer.get_extra_info("peername")
            request = parse_request(head, peer[0] if isinstance(peer, tuple) else "")
            status, kind, body = self.answer(request)
            if isinstance(body, Path):
                await self._send_file(writer, request.method, kind, body)
            else:
                writer.write(self._head(status, kind, len(body), request.method, body))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            pass  # a bad or slow request: just close
        except ConnectionError:
            pass
        finally:
            with contextlib.suppress(ConnectionError):
                writer.close()

    def _head(self, status: str, kind: str, length: int, method: str, body: bytes = b"") -> bytes:
        return (
            f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\n"
            f"Content-Length: {length}\r\n{self.extra_headers}"
            "Connection: close\r\n\r\n".encode()
            + (body if method != "HEAD" else b"")
        )

    async def _send_file(
        self, writer: asyncio.StreamWriter, method: str, kind: str, path: Path
    ) -> None:
        """200 with ``path``'s bytes in :data:`CHUNK` pieces; 404 when it is gone."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            writer.write(self._head("404 Not Found", "text/plain", 0, method))
            return
        try:
            size = os.fstat(fd).st_size
            writer.write(self._head("200 OK", kind, size, method))
            offset = 0
            while method != "HEAD" and offset < size:
                chunk = os.pread(fd, min(CHUNK, size - offset), offset)
                if not chunk:
                    break  # truncated meanwhile: the client sees a short body
                writer.write(chunk)
                offset += len(chunk)
                await writer.drain()
        finally:
            os.close(fd)
