"""A tiny HTTP/1.0 server on asyncio streams, shared by the node's
``/metrics`` (bloomcast/metrics.py; ``/spool`` too, spark/spool_service.py) and
the dashboard (bloomcast/dashboard/): one request per connection,
``respond(path)`` (GET and HEAD) or ``answer(request)`` (any method) decides
the answer. A bad or slow request (10 s for the head) just closes the
connection. A :class:`~pathlib.Path` body is sent from the file in
:data:`CHUNK` pieces, waiting for the socket to drain after each, so a large
file never sits whole in memory.

The event loop never waits on a disk (issue 41): a file body's open, stat
and every read run in the loop's executor, and :meth:`SmallHttpServer.off_loop`
runs a subclass's file work there too, at most :data:`FILE_JOBS` at a time
per server (the others wait their turn). At most :data:`MAX_CONNECTIONS`
connections are served at once: one more is answered 503 and closed,
counted in ``refused``. An answer that raises is counted in ``errors`` and
logged at most once a minute (:class:`cluster_bus.refusals.Refusals`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from cluster_bus.refusals import Refusals

#: bytes read from a file body per write (one ``os.pread``, in the executor)
CHUNK = 65536
#: file jobs in the executor at once per server (a slow disk takes no more threads)
FILE_JOBS = 4
#: connections served at once per server; one more is answered 503 and closed
MAX_CONNECTIONS = 64

Body = bytes | Path
T = TypeVar("T")
log = logging.getLogger("bloomcast.http")


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
        self._file_jobs = asyncio.Semaphore(FILE_JOBS)
        self._open = 0  # connections being served
        self.refused = 0  # connections over MAX_CONNECTIONS, answered 503
        self.errors = 0  # answers that raised
        self._warnings = Refusals(logger=log)

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

    async def answer_async(self, request: Request) -> tuple[str, str, Body]:
        """The answer, awaited: :meth:`answer` unless a subclass has file work
        to do (then through :meth:`off_loop`)."""
        return self.answer(request)

    async def off_loop(self, work: Callable[..., T], *args: object) -> T:
        """``work(*args)`` in the loop's executor, at most :data:`FILE_JOBS` at
        once for this server: the disk's time is never the loop's."""
        async with self._file_jobs:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, functools.partial(work, *args))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= MAX_CONNECTIONS:
            self.refused += 1
            await self._refuse(reader, writer)
            return
        self._open += 1
        path = "?"
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            peer = writer.get_extra_info("peername")
            request = parse_request(head, peer[0] if isinstance(peer, tuple) else "")
            path = request.path
            status, kind, body = await self.answer_async(request)
            if isinstance(body, Path):
                await self._send_file(writer, request.method, kind, body)
            else:
                writer.write(self._head(status, kind, len(body), request.method, body))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            pass  # a bad or slow request: just close
        except ConnectionError:
            pass
        except Exception as exc:  # a bug in an answer: counted, logged, the server goes on
            self.errors += 1
            self._warnings.warn("answer", path, f"HTTP {path}: the answer failed: {exc!r}")
        finally:
            self._open -= 1
            with contextlib.suppress(ConnectionError):
                writer.close()

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """503 to a connection over :data:`MAX_CONNECTIONS`, after its head
        (at most 1 s: closing with the request unread would reset it)."""
        quiet = (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError)
        with contextlib.suppress(*quiet):  # whatever the peer sends: it is refused (counted)
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 1)
        with contextlib.suppress(ConnectionError):
            writer.write(self._head("503 Service Unavailable", "text/plain", 0, "GET"))
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
        """200 with ``path``'s bytes in :data:`CHUNK` pieces; 404 when it is gone.
        The open, the stat, each read and the close run in the executor."""
        try:
            fd, size = await self.off_loop(_open_sized, path)
        except OSError:
            writer.write(self._head("404 Not Found", "text/plain", 0, method))
            return
        try:
            writer.write(self._head("200 OK", kind, size, method))
            offset = 0
            while method != "HEAD" and offset < size:
                chunk = await self.off_loop(os.pread, fd, min(CHUNK, size - offset), offset)
                if not chunk:
                    break  # truncated meanwhile: the client sees a short body
                writer.write(chunk)
                offset += len(chunk)
                await writer.drain()
        finally:
            await self.off_loop(os.close, fd)


def _open_sized(path: Path) -> tuple[int, int]:
    """(descriptor, size) of ``path`` opened for reading."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return fd, os.fstat(fd).st_size
    except OSError:
        os.close(fd)
        raise
