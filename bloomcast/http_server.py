"""A tiny HTTP/1.0 server on asyncio streams, shared by the node's
``/metrics`` (bloomcast/metrics.py; ``/spool`` too, spark/spool_service.py) and
the dashboard (bloomcast/dashboard/): one request per connection,
``respond(path)`` (GET and HEAD) or ``answer(request)`` (any method) decides
the answer. A :class:`~pathlib.Path` body is sent from the file in
:data:`CHUNK` pieces, waiting for the socket to drain after each, so a large
file never sits whole in memory.

The event loop never waits on a disk (issue 41): a file body's open, stat
and every read run in the loop's executor, and :meth:`SmallHttpServer.off_loop`
runs a subclass's file work there too, at most :data:`FILE_JOBS` at a time
per server (the others wait their turn).

Nothing a client does holds the server (issue 49), the way nginx treats idle
connections: a connection still sending its head is *waiting* and holds no
slot; at most :data:`MAX_WAITING` wait, and one more closes the oldest of them
to make room (counted in ``idle_closed``), so idle or slow connections never
keep a probe out. A head must arrive within :data:`HEAD_SECONDS`, each drain
of the answer within :data:`DRAIN_SECONDS`, the whole answer within
:data:`REQUEST_SECONDS`; past one the connection is aborted (``timeouts``).
At most :data:`MAX_CONNECTIONS` requests are answered at once; the last
:data:`PROBE_SLOTS` of them only for :attr:`SmallHttpServer.probe_paths`
(``/healthz`` and ``/metrics``: answered from memory), so slow downloads
never starve the probes; a request over its bound is answered 503 and closed
(``refused``). Every refusal and an answer that raises (``errors``) is logged
at most once a minute per cause (:class:`netutil.rate_limited_log.RateLimitedLog`)."""

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

from netutil.rate_limited_log import RateLimitedLog

#: bytes read from a file body per write (one ``os.pread``, in the executor)
CHUNK = 65536
#: file jobs in the executor at once per server (a slow disk takes no more threads)
FILE_JOBS = 4
#: requests answered at once per server; one more is answered 503 and closed
MAX_CONNECTIONS = 64
#: of those, kept for :attr:`SmallHttpServer.probe_paths` (other paths get the rest)
PROBE_SLOTS = 16
#: connections still sending their head; one more closes the oldest of them
MAX_WAITING = 64
#: seconds for a request's head
HEAD_SECONDS = 10.0
#: seconds for the socket to take one piece of an answer (a client that stops reading)
DRAIN_SECONDS = 10.0
#: seconds for a whole answer, file bodies included
REQUEST_SECONDS = 120.0

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
    #: paths answered from memory (health checks, scrapes): they may use the
    #: :data:`PROBE_SLOTS` other paths may not
    probe_paths: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self.port = 0
        self._file_jobs = asyncio.Semaphore(FILE_JOBS)
        self._open = 0  # requests being answered
        self._waiting: dict[asyncio.StreamWriter, None] = {}  # heads not read yet, oldest first
        self.refused = 0  # requests over MAX_CONNECTIONS (or the non-probe share), answered 503
        self.idle_closed = 0  # waiting connections closed to make room (MAX_WAITING)
        self.timeouts = 0  # heads, drains or answers over their time budget: aborted
        self.errors = 0  # answers that raised
        self._warnings = RateLimitedLog(logger=log)

    def refusals(self) -> dict[str, int]:
        """Connections refused or closed, by reason (the metrics port exports them)."""
        return {"busy": self.refused, "idle_closed": self.idle_closed, "timeout": self.timeouts}

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
        peer = writer.get_extra_info("peername")
        peer_ip = peer[0] if isinstance(peer, tuple) else ""
        try:
            head = await self._read_head(reader, writer, peer_ip)
            if head is None:
                return
            request = parse_request(head, peer_ip)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, OSError):
            writer.transport.abort()  # a bad request, or closed to make room: just close
            return
        limit = MAX_CONNECTIONS - (0 if request.path in self.probe_paths else PROBE_SLOTS)
        if self._open >= limit:
            self.refused += 1
            self._warnings.warn(
                "http busy",
                "",
                f"HTTP: {limit} requests being answered: {request.path} refused (503)",
            )
            with contextlib.suppress(ConnectionError):
                writer.write(self._head("503 Service Unavailable", "text/plain", 0, "GET"))
                writer.close()
            return
        self._open += 1
        try:
            async with asyncio.timeout(REQUEST_SECONDS):
                await self._serve(request, writer)
        except TimeoutError:
            self._timed_out(writer, peer_ip, f"answering {request.path}")
        except ConnectionError:
            pass
        except Exception as exc:  # a bug in an answer: counted, logged, the server goes on
            self.errors += 1
            path = request.path
            self._warnings.warn("answer", path, f"HTTP {path}: the answer failed: {exc!r}")
        finally:
            self._open -= 1
            with contextlib.suppress(ConnectionError):
                writer.close()

    async def _read_head(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer_ip: str
    ) -> bytes | None:
        """The request's head, within :data:`HEAD_SECONDS` (None: too slow, aborted).
        Meanwhile the connection is waiting; over :data:`MAX_WAITING` the oldest
        waiting connection is closed to make room."""
        waiting = self._waiting
        if len(waiting) >= MAX_WAITING:
            oldest = next(iter(waiting))
            del waiting[oldest]
            oldest.transport.abort()  # its readuntil ends (IncompleteReadError)
            self.idle_closed += 1
            self._warnings.warn(
                "http idle",
                "",
                f"HTTP: {MAX_WAITING} connections sent no request yet: the oldest closed",
            )
        waiting[writer] = None
        try:
            return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_SECONDS)
        except TimeoutError:
            self._timed_out(writer, peer_ip, "reading the request")
            return None
        finally:
            waiting.pop(writer, None)

    def _timed_out(self, writer: asyncio.StreamWriter, peer_ip: str, what: str) -> None:
        self.timeouts += 1
        self._warnings.warn("http timeout", peer_ip, f"HTTP client {peer_ip}: too slow {what}")
        writer.transport.abort()

    async def _serve(self, request: Request, writer: asyncio.StreamWriter) -> None:
        status, kind, body = await self.answer_async(request)
        if isinstance(body, Path):
            await self._send_file(writer, request.method, kind, body)
        else:
            writer.write(self._head(status, kind, len(body), request.method, body))
        await _drain(writer)

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
                await _drain(writer)
        finally:
            await self.off_loop(os.close, fd)


async def _drain(writer: asyncio.StreamWriter) -> None:
    """``writer.drain()`` within :data:`DRAIN_SECONDS` (TimeoutError past it)."""
    async with asyncio.timeout(DRAIN_SECONDS):
        await writer.drain()


def _open_sized(path: Path) -> tuple[int, int]:
    """(descriptor, size) of ``path`` opened for reading."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return fd, os.fstat(fd).st_size
    except OSError:
        os.close(fd)
        raise
