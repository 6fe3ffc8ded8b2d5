"""A listener whose accept errors are seen: counted and logged (issue 49).

uvloop's servers accept in libuv, which meets EMFILE/ENFILE with its "emfile
trick": it closes a spare descriptor, accepts every waiting connection and
closes it at once, and tells no one (seen with a node under ``prlimit
--nofile=64``: of 100 connects, 51 were reset and nothing was counted or
logged). asyncio's own servers call the loop's exception handler and stop
accepting for a second. Redis logs "Accepting client connection: accept: %s"
(its bus "Error accepting cluster node: ...") and carries on, the connection waiting in the backlog.

:class:`Acceptor` accepts itself on the loop (``add_reader``): an accept that
fails for want of descriptors or memory calls ``on_error`` (the caller counts
it and logs it rate-limited, in Redis's words) and pauses accepting for
``RETRY_S``, the connections waiting in the kernel's backlog until
descriptors are free, as Redis's do; any other accept error is reported the
same way and accepting goes on. Each accepted socket becomes a transport of
the loop (``connect_accepted_socket``). It stands in for the
``asyncio.Server`` objects :func:`netutil.addresses.listen` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Callable
from typing import Protocol

#: accept errors that mean "no descriptor or memory now": accepting pauses
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: how long accepting pauses after such an error (the connections wait in the backlog)
RETRY_S = 0.1
#: connections accepted per readable event at most (Redis's MAX_ACCEPTS_PER_CALL
#: is 1000, but Redis refuses one over maxclients at once: here each waits a
#: loop iteration for its transport, holding its descriptor, so a burst is kept short)
ACCEPTS_PER_CALL = 64


class Listener(Protocol):
    """What the node and the bus use of a listener: an ``asyncio.Server`` or an
    :class:`Acceptor`."""

    @property
    def sockets(self) -> tuple[socket.socket, ...]: ...

    def is_serving(self) -> bool: ...

    async def start_serving(self) -> None: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


class Acceptor:
    """Accepts on ``sock`` (bound and listening) into ``factory``'s protocols."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.BaseProtocol],
        on_error: Callable[[OSError], None],
    ) -> None:
        self.sockets = (sock,)
        self._factory = factory
        self._on_error = on_error
        self._loop = asyncio.get_running_loop()
        self._serving = False
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        self._pending: set[asyncio.Task[object]] = set()
        sock.setblocking(False)
        # what each accepted socket is made of (read once: socket.accept()
        # converts the family and type to enums per call)
        self._kind = (int(sock.family), int(sock.type), sock.proto)
        self._tcp = sock.family in (socket.AF_INET, socket.AF_INET6)

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        self._serve()

    def _serve(self) -> None:
        if self._closed or self._serving:
            return
        self._serving = True
        self._loop.add_reader(self.sockets[0].fileno(), self._accept)

    def _pause(self) -> None:
        if self._serving:
            self._serving = False
            self._loop.remove_reader(self.sockets[0].fileno())
        if self._retry is None:
            self._retry = self._loop.call_later(RETRY_S, self._resume)

    def _resume(self) -> None:
        self._retry = None
        self._serve()

    def _accept(self) -> None:
        sock = self.sockets[0]
        family, kind, proto = self._kind
        for _ in range(ACCEPTS_PER_CALL):
            try:
                fd, _ = sock._accept()  # type: ignore[attr-defined]  # (socket.accept's own call)
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue  # the peer gave up while it waited: nothing to serve
            except OSError as exc:
                self._on_error(exc)
                if exc.errno in RESOURCE_ERRNOS:
                    self._pause()
                return
            conn = socket.socket(family, kind, proto, fileno=fd)
            conn.setblocking(False)
            if self._tcp:
                with contextlib.suppress(OSError):
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = self._loop.create_task(self._connect(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)
        except OSError as exc:  # reset before its transport was made
            conn.close()
            self._on_error(exc)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._serving:
            self._serving = False
            self._loop.remove_reader(self.sockets[0].fileno())
        self.sockets[0].close()

    async def wait_closed(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)


def listening_sockets(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Bound, listening sockets for ``host`` (every address it resolves to) and
    ``port``, as asyncio's ``create_server`` makes them: SO_REUSEADDR, IPv6
    sockets IPv6-only."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks
