"""Client: the asyncio protocol of one client connection (uvicorn's model).

A thin shell around the sans-IO :class:`router.connection.Connection`: it
makes the connection when the transport exists (its address, socket
options), hands the bytes read to the request loop
(:func:`router.dispatch.process`) and does what it asks
(:class:`router.states.Action`): on ``SLICE`` it stops reading until the
next loop turn (libuv would otherwise read a busy socket again and again in
one turn), on ``BLOCK`` until the awaited reply is ready. Everything else —
parsing, commands, replies, limits, closing — is the connection's.

Socket options at accept, as Redis's ``anetKeepAlive`` (``tcp-keepalive``
seconds, 0: off): SO_KEEPALIVE, the first probe after that many idle
seconds, then one every third of it (at least 1 s), the connection dropped
after 3 unanswered probes.
"""

from __future__ import annotations

import asyncio
import socket
from time import monotonic
from typing import TYPE_CHECKING, Any, Protocol, cast

import cython

from router.client_extras import ClientExtras
from router.states import BLOCK, SLICE, Action

if not cython.compiled:  # (compiled: router/_client.pxd cimports them)
    from router.connection import Connection
    from router.dispatch import process, resume, unblock

if TYPE_CHECKING:
    from router.context import CommandContext

try:  # the transport whose socket a compiled Connection may send on itself
    import uvloop.loop as _uvloop_loop

    _UV_TCP = getattr(_uvloop_loop, "TCPTransport", None)  # (not in uvloop's stubs)
except ImportError:  # pragma: no cover (uvloop is not on Windows)
    _UV_TCP = None


class _PubSub(Protocol):
    def schedule_flush(self, client: Any) -> None: ...


class Host(Protocol):
    """What a client needs of its node (:class:`router.node.Node`)."""

    @property
    def context(self) -> CommandContext: ...

    @property
    def pubsub(self) -> _PubSub: ...

    def next_client_id(self) -> int: ...

    def client_disconnected(self, client: Any) -> None: ...


#: a refused connection (protected mode) that never closes its end is aborted
REFUSED_LINGER_SECONDS = 5.0


@cython.final
@cython.cclass
class Client:
    """One client connection's transport side (an asyncio protocol)."""

    def __init__(self, node: Host) -> None:
        self._node = node
        self.transport: asyncio.Transport | None = None
        self.conn: Connection | None = None
        self._sliced = False  # reading paused until the next loop turn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = wire = cast(asyncio.Transport, transport)
        node = self._node
        extras = ClientExtras()
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        addr = "?:0"
        if peer:
            addr = f"{peer[0]}:{peer[1]}"
            extras.peer_ip = str(peer[0])
        if sock:
            extras.laddr = f"{sock[0]}:{sock[1]}"
        raw = transport.get_extra_info("socket")
        ctx = node.context
        if raw is not None:
            extras.fd = raw.fileno()
            if ctx.settings.tcp_keepalive:
                keep_alive(raw, ctx.settings.tcp_keepalive)
        self.conn = conn = Connection(
            ctx, wire, node.next_client_id(), node.pubsub.schedule_flush, extras, addr
        )
        if cython.compiled and raw is not None and _UV_TCP is not None and type(wire) is _UV_TCP:
            conn.send_directly(extras.fd)  # (a TLS client's transport is another type)
        conn.admit()
        if extras.refused:
            asyncio.get_running_loop().call_later(REFUSED_LINGER_SECONDS, wire.abort)

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.conn
        if conn is None:
            return
        conn.lost()
        unread = conn.parser.release()
        if len(unread) > 4096:  # a huge unfinished request: free it in slices
            _free_in_slices(unread)
        if not conn.extras.refused:
            self._node.client_disconnected(conn)

    def eof_received(self) -> bool | None:
        """The peer closed its end: the transport closes (asyncio.Protocol's rule)."""
        return None

    def pause_writing(self) -> None:
        """The transport's buffer passed its high-water mark: the output
        limits (Connection.flush) are what bound a slow reader."""

    def resume_writing(self) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is not None:
            action = process(conn, data, monotonic())
            if action:
                self._wait(action, conn)

    def _wait(self, action: Action, conn: Connection) -> None:
        """Stop reading until the next loop turn (SLICE) or the awaited reply (BLOCK)."""
        transport = self.transport
        if transport is None:
            return
        if action is SLICE:
            if not self._sliced:
                self._sliced = True
                transport.pause_reading()
                asyncio.get_running_loop().call_soon(self._next_slice)
        elif action is BLOCK and conn.blocked is not None:
            transport.pause_reading()
            conn.blocked.add_done_callback(self._unblocked)

    def _next_slice(self) -> None:
        self._sliced = False
        conn = self.conn
        if conn is None or conn.closed:
            return
        self._go_on(resume(conn), conn)

    def _unblocked(self, future: asyncio.Future[bytes]) -> None:
        conn = self.conn
        if conn is None or conn.blocked is not future:
            return
        self._go_on(unblock(conn), conn)

    def _go_on(self, action: Action, conn: Connection) -> None:
        if action:
            self._wait(action, conn)
        elif (
            not (self._sliced or conn.closing)
            and conn.blocked is None
            and self.transport is not None
        ):
            self.transport.resume_reading()


def keep_alive(sock: socket.socket, interval: int) -> None:
    """Redis's ``anetKeepAlive`` (module doc); a socket that refuses an
    option keeps the system's value for it."""
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    if hasattr(socket, "TCP_KEEPIDLE"):  # Linux
        options += [
            (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, interval),
            (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(interval // 3, 1)),
            (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3),
        ]
    for level, option, value in options:
        try:
            sock.setsockopt(level, option, value)
        except OSError:
            return


def _free_in_slices(items: list[bytes]) -> None:
    del items[-4096:]
    if items:
        asyncio.get_running_loop().call_soon(_free_in_slices, items)
