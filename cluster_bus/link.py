"""A link of the bus: one TCP connection (:class:`Link`), either direction.

A link is an ``asyncio.Protocol`` around the sans-IO codec: bytes in go to a
:class:`cluster_bus.codec.FrameDecoder` and the decoded frames to the link's
:class:`LinkOwner` (the bus); frames out are queued and leave in one
``transport.write`` per loop turn, so a pipelined batch of forwards costs one
send system call and keeps its order. A send buffer limit
(``cluster-link-sendbuf-limit``) drops a link whose peer does not read.

Until the handshake is done a link accepts only small frames
(``HANDSHAKE_MAX_BODY``): an unauthenticated peer cannot make us buffer a
large body. It decodes them one at a time, so the frames that arrive in the
same read as the handshake's last one (the dialer sends HELLO_AUTH and its
MEET in one loop turn) are decoded after the link authenticated, with its
limit (a MEET carries one gossip entry per known node: above 4096 bytes from
about 62 nodes; issue 40). With per-link keys from the handshake (a cluster secret, no
``tls-cluster``), every later batch leaves sealed and every received frame
must be sealed (:mod:`cluster_bus.seal`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
from time import time as _wall
from typing import TYPE_CHECKING, Protocol, cast

import cython

from cluster_bus.clock import Address, now_ms
from cluster_bus.codec import BusProtocolError, short_id
from cluster_bus.frames import Message, Publish
from cluster_bus.handshake import Handshake
from cluster_bus.seal import SealedDecoder, Sealer, SealError
from netutil.tls import TlsSession

if not cython.compiled:  # (compiled: cluster_bus/_link.pxd cimports it)
    from cluster_bus.decoder import FrameDecoder

    def _wall_ms() -> int:
        """The wall clock in whole milliseconds (:func:`cluster_bus.clock.now_ms`;
        compiled: clock_gettime in C)."""
        return int(_wall() * 1000)

    def send_now(fd: int, data: bytes) -> int:
        """Bytes of ``data`` the socket ``fd`` took at once (compiled: one
        send(2)): the pure-Python data plane sends nothing itself (-1), its
        transport writes it all."""
        return -1


try:  # the transport whose socket a compiled link sends on itself (Link.flush)
    import uvloop.loop as _uvloop_loop

    _UV_TCP = getattr(_uvloop_loop, "TCPTransport", None)  # (not in uvloop's stubs)
except ImportError:  # pragma: no cover (uvloop is not on Windows)
    _UV_TCP = None

if TYPE_CHECKING:
    from collections.abc import Callable

    from cluster_bus.info import BusStats

log = logging.getLogger("bloomcast.bus")

HANDSHAKE_MAX_BODY = 4096


class PublishSink(Protocol):
    """What a link hands its runs of PUBLISH frames to (the bus's
    :class:`cluster_bus.forwarding.Forwarding`)."""

    def publishes_received(self, link: Link, msgs: list[Publish]) -> None: ...


class LinkOwner(Protocol):
    """What a link reports to (the bus); PUBLISH frames go to its
    ``forwarding`` directly (one call for each run of them, no frame of the
    bus in between)."""

    sendbuf_limit: int
    #: cluster-forward-linger-us in seconds: the least time between a link's
    #: writes of forwarded PUBLISH frames that a batch of them waits for (0:
    #: none, the next loop turn)
    forward_linger: float
    stats: BusStats

    @property
    def forwarding(self) -> PublishSink: ...

    def link_made(self, link: Link) -> None: ...

    def message_received(self, link: Link, msg: Message) -> None: ...

    def bad_frame(self, link: Link, reason: str, sealed: bool = False) -> None: ...

    def buffer_exceeded(self, link: Link) -> None: ...

    def tls_failed(self, link: Link, exc: Exception) -> None: ...

    def link_closed(self, link: Link) -> None: ...


@cython.final
@cython.cclass
class Link:
    """One TCP connection of the bus, either direction (``outbound``: we dialled
    ``dial_key``). ``peer_id`` is set once the handshake authenticated it. An
    asyncio protocol (by its methods: compiled, it is no subclass of one)."""

    def __init__(
        self,
        owner: LinkOwner,
        handshake: Handshake,
        dial_key: Address | None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.owner = owner
        #: the owner's send-buffer limit and forward linger (seconds), read
        #: once: every write reads them (the bus's settings, fixed at its start)
        self._sendbuf_limit = owner.sendbuf_limit
        self._forward_linger = owner.forward_linger
        self.tls = tls  # tls-cluster: TLS starts on the connection, then the bus protocol
        self._tls: TlsSession | None = None
        self._tls_wait = tls is not None  # frames queue until the TLS handshake is done
        self.handshake = handshake
        self.outbound = handshake.outbound
        self.dial_key = dial_key
        self.transport: asyncio.Transport | None = None
        self.peer_id: str | None = None
        self.peer_host = ""
        self.local_host = ""  # our address on this connection (a MEET teaches us our IP)
        self.first_bytes = b""  # the start of what the peer sent (a hint on bad frames)
        self.closed_by_peer = False  # the connection ended without our close()
        self.authenticated = False
        self.closed = False
        self.decoder: FrameDecoder | SealedDecoder = FrameDecoder(HANDSHAKE_MAX_BODY)
        self.sealer: Sealer | None = None
        self.created_ms = now_ms()
        self.last_rx_ms = self.created_ms
        self._pending: list[bytes] | None = None
        self._pending_bytes = 0  # counted only with a send-buffer limit
        #: the linger timer of the queued frames, when only forwards are queued
        self._linger: asyncio.TimerHandle | None = None
        #: whether the queued frames hold a forward, and the loop time of the
        #: last write that held one (kept while a linger is set: Link.write)
        self._forwards = False
        self._last_forward_write = -math.inf
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the loop's call_soon, bound once (a write schedules the turn's flush with it)
        self._call_soon: Callable[..., object] | None = None
        #: the loop turn's flush, bound once (a write schedules it each turn)
        self._flush_soon = self._iteration_flush
        #: the owner's forwarding's publishes_received, looked up at the first run
        self._publish_sink: Callable[[Link, list[Publish]], None] | None = None
        #: the socket flush() sends on itself while the transport holds
        #: nothing (a plain uvloop transport, compiled), -1: none
        self._fd = -1
        #: the transport held nothing after the last flush (no need to ask it)
        self._wire_empty = False
        #: with ``_fd``: the transport's is_closing, bound once
        self._is_closing: Callable[[], bool] | None = None

    def authenticate(
        self, peer_id: str, max_body: int, keys: tuple[bytes, bytes] | None = None
    ) -> None:
        """The handshake is done: frames must now come from ``peer_id`` and may
        be large; with ``keys`` (send, receive), they are sealed both ways."""
        self.peer_id = peer_id
        self.authenticated = True
        decoder = self.decoder
        assert isinstance(decoder, FrameDecoder)
        decoder.expect_sender = short_id(peer_id)
        decoder.max_body = max_body
        if keys is not None:
            self.flush()  # the HELLO_AUTH queued by the dialer leaves unsealed
            self.sealer = Sealer(keys[0], short_id(self.handshake.my_id))
            inner = FrameDecoder(max_body, expect_sender=short_id(peer_id))
            self.decoder = SealedDecoder(keys[1], decoder, inner)

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        self._loop = loop = asyncio.get_running_loop()
        self._call_soon = loop.call_soon
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer_host = peer[0]
        local = transport.get_extra_info("sockname")
        if local:
            self.local_host = local[0]
        raw = transport.get_extra_info("socket")
        if (
            cython.compiled
            and raw is not None
            and _UV_TCP is not None
            and type(transport) is _UV_TCP
        ):
            self._fd = raw.fileno()  # (tls-cluster encrypts here: the transport is plain TCP)
            self._is_closing = transport.is_closing
        if self.tls is not None:  # tls-cluster: TLS first; frames queue until it is up
            self._tls = TlsSession(self.tls, server_side=not self.outbound)
            self._send(self.transport, self._tls.outgoing())  # a dialler's ClientHello
        self.owner.link_made(self)

    def eof_received(self) -> bool | None:
        """The peer closed its end: the transport closes (asyncio.Protocol's rule)."""
        return None

    def pause_writing(self) -> None:
        """The transport's buffer passed its high-water mark: the send-buffer
        limit (``cluster-link-sendbuf-limit``) is what bounds a slow peer."""

    def resume_writing(self) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        # (now_ms inline: compiled, the clock read in C on every read of the bus)
        self.last_rx_ms = _wall_ms()
        if self._tls is not None:
            data = self._tls_received(data)
            if not data:
                return
        if not self.first_bytes:
            self.first_bytes = data[:8]
        try:
            if self.authenticated:
                decoder = self.decoder
                if type(decoder) is FrameDecoder:  # unsealed: compiled, a C call
                    self._dispatch(cython.cast(FrameDecoder, decoder).feed(data))
                else:
                    self._dispatch(decoder.feed(data))
            else:
                self._handshake_received(data)
        except BusProtocolError as exc:
            self.owner.bad_frame(self, str(exc), isinstance(exc, SealError))

    def _tls_received(self, data: bytes) -> bytes:
        """tls-cluster: decrypt; answer the handshake; flush what waited for it."""
        session = self._tls
        assert session is not None and self.transport is not None
        try:
            plain = session.receive(data)
        except ssl.SSLError as exc:
            self.owner.tls_failed(self, exc)
            return b""
        out = session.outgoing()
        if out:
            self._send(self.transport, out)
        if self._tls_wait and session.established:
            self._tls_wait = False
            self.flush()
        return plain

    def _handshake_received(self, data: bytes) -> None:
        """Frames before authentication, one at a time with the handshake's
        limit; once a frame authenticates the link, the bytes read after it
        go to the link's decoder as it is now (the authenticated limit; with
        keys, the sealed decoder, which took them over)."""
        decoder = self.decoder
        assert isinstance(decoder, FrameDecoder)
        msgs = decoder.feed(data, 1)
        while msgs and not self.closed:
            self._dispatch(msgs)
            if self.authenticated:
                if not self.closed:
                    self._dispatch(self.decoder.feed(b""))
                return
            msgs = decoder.feed(b"", 1)

    def _dispatch(self, msgs: list[Message]) -> None:
        owner = self.owner
        # consecutive PUBLISH frames go to the owner's forwarding as one run
        # (one call, the session's rules once), in their place among the other
        # frames
        run: list[Publish] = []
        for msg in msgs:
            if self.authenticated and type(msg) is Publish:
                run.append(msg)
                continue
            if run:
                if self.closed:
                    return
                self._publishes(run)
                run = []
            if self.closed:
                return
            owner.message_received(self, msg)
        if run and not self.closed:
            self._publishes(run)

    def _publishes(self, run: list[Publish]) -> None:
        """A run of PUBLISH frames to the owner's forwarding (its method looked up once)."""
        sink = self._publish_sink
        if sink is None:
            sink = self._publish_sink = self.owner.forwarding.publishes_received
        sink(self, run)

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop_linger()  # what lingered goes with the link (kept for replay)
        self._fd = -1
        if not self.closed:
            self.closed = True
            self.closed_by_peer = True
            self.owner.link_closed(self)

    # -- sending -----------------------------------------------------------------------

    def write(self, data: bytes, forward: bool = False) -> None:
        """Queue a frame. Frames queued while one loop callback runs (e.g. the
        forwards of a pipelined batch of PUBLISH) leave in one ``transport.write``
        at the next loop turn: one send syscall for the batch, order kept.

        ``forward``: a forwarded PUBLISH frame. With ``cluster-forward-linger-us``
        set, a batch that holds only forwards leaves no sooner than that long
        after the link's last write of forwards, gathering the forwards
        queued meanwhile (Kafka's producer ``linger.ms``, counted from the
        last send of forwards rather than the batch's first frame, as Nagle's
        algorithm holds small segments only while data is in flight): a
        forward that comes longer than that after the last write of forwards
        leaves at the next loop turn, as at 0 (a heartbeat or a filter delta
        sent meanwhile does not make it wait; at random arrivals of rate r a
        share 1 - exp(-r * linger) waits), and a busy link writes forwards
        about once per linger: fewer and larger writes and fewer wake-ups of
        the peer for at most that much added latency. Any other frame, the
        send-buffer limit or a close sends the batch at once (counted:
        ``cluster_stats_forward_linger_cut``; the batches that waited it out:
        ``cluster_stats_forward_linger_batches``)."""
        pending = self._pending
        if pending is None:
            if self.closed or self.transport is None or self._loop is None:
                return
            self._pending = [data]
            self._forwards = forward
            linger = self._forward_linger if forward else 0.0
            wait = self._last_forward_write + linger - self._loop.time() if linger else 0.0
            if wait > 0:
                self._linger = self._loop.call_later(wait, self._linger_ended)
            else:
                self._call_soon(self._flush_soon)  # type: ignore[misc]  # (set with _loop)
        else:
            pending.append(data)
            if forward:
                self._forwards = True
            elif self._linger is not None:
                # forwards were lingering: this frame does not wait, nor do they
                self._cut_linger()
                self._call_soon(self._flush_soon)  # type: ignore[misc]  # (set with _loop)
        limit = self._sendbuf_limit
        if limit:
            self._pending_bytes += len(data)
            if self._pending_bytes + self.transport.get_write_buffer_size() > limit:  # type: ignore[union-attr]
                self.flush()  # writes and applies the limit now

    def _iteration_flush(self) -> None:
        """The event-loop iteration's flush. A batch of forwards begun after it was
        scheduled (an earlier flush, e.g. the send-buffer limit's, sent the
        batch it was for) lingers on instead."""
        if self._linger is None:
            self.flush()

    def _linger_ended(self) -> None:
        self._linger = None
        if self._pending and not self.closed and not self._tls_wait:
            self.owner.stats.forward_linger_batches += 1
        self.flush()

    def _drop_linger(self) -> None:
        """Cancel the linger timer of a link that closes without sending."""
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    def _cut_linger(self) -> None:
        """The queued forwards leave before their linger ended (counted)."""
        handle = self._linger
        if handle is not None:
            handle.cancel()
            self._linger = None
            if self._pending:
                self.owner.stats.forward_linger_cut += 1

    def flush(self) -> None:
        if self._tls_wait:
            return  # sent once the TLS handshake is done
        if self._linger is not None:
            self._cut_linger()
        pending = self._pending
        self._pending = None
        self._pending_bytes = 0
        transport = self.transport
        if not pending or transport is None or self.closed:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        if self.sealer is not None:
            data = self.sealer.seal(data)
        forwards, self._forwards = self._forwards, False  # (before a write that may re-enter)
        all_sent = self._send(transport, data if self._tls is None else self._tls.encrypt(data))
        if forwards and self._forward_linger and self._loop is not None:
            self._last_forward_write = self._loop.time()
        limit = self._sendbuf_limit
        if limit and not all_sent and transport.get_write_buffer_size() > limit:
            self.owner.buffer_exceeded(self)

    def _send(self, transport: asyncio.Transport, data: bytes) -> bool:
        """Write ``data``; whether the socket took all of it at once. On the
        compiled plane, while the transport is open and holds nothing, one
        send(2) on its socket first (uvloop's own fast path, ``uv_try_write``,
        without its Python call); what the socket does not take (a full
        buffer, an error, which the transport then meets and reports) goes
        to the transport, in order."""
        fd = self._fd
        is_closing = self._is_closing
        if fd >= 0 and is_closing is not None and not is_closing():
            if not self._wire_empty:
                self._wire_empty = transport.get_write_buffer_size() == 0
            if self._wire_empty:
                sent = send_now(fd, data)
                if sent == len(data):
                    return True
                self._wire_empty = False
                if sent > 0:
                    data = data[sent:]
        transport.write(data)
        return False

    def send_buffer_used(self) -> int:
        """Bytes queued for this link and not yet taken by the kernel."""
        pending = sum(map(len, self._pending)) if self._pending else 0
        transport = self.transport
        return pending + (transport.get_write_buffer_size() if transport is not None else 0)

    def close(self, abort: bool = False) -> None:
        if self.closed:
            return
        if not abort:
            self.flush()
        self._drop_linger()  # (abort, or a flush that waits for TLS) the frames go with the link
        self.closed = True
        self._fd = -1  # its transport closes: the socket's number may be reused
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()
        self.owner.link_closed(self)
