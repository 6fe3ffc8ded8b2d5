"""Connection: one client connection as a sans-IO state machine with its
output (h11's model).

Bytes in go to its request parser (:attr:`Connection.parser`), replies and
messages out through one output queue written once per event-loop turn. The
connection is the one owner of its output, as Redis's ``networking.c`` is of
a client's (``addReply*`` -> ``_addReplyToBuffer``, ``clientHasPendingReplies``,
``checkClientOutputBufferLimits``): no other module reads or writes its
queue, its counts or its limit state (``tests/router/test_output_owner.py``
reads the sources); they call :meth:`Connection.write` (a reply or a message
from anywhere), :meth:`Connection.add_reply` (the request loop's replies,
between :meth:`Connection.begin_batch` and :meth:`Connection.end_batch`),
:func:`add_messages` (the fan-out) and :meth:`Connection.flush`
(the end of the loop turn), which holds the client to its output limits.
The connection knows its state and every change
between them (:mod:`router.states`, each change through
:meth:`Connection._to`), MULTI's queue (not what is in it), CLIENT REPLY's
mode, admission and closing; it knows nothing of commands: the request loop
that reads its requests and runs them is :mod:`router.dispatch`, which
changes its state only through its methods. It touches no socket and no
event loop: its output goes to a :class:`Transport` (an asyncio transport fits) and
the node's ``schedule_flush``, given to its constructor;
:class:`router.client.Client` is the thin asyncio protocol around it. A reply
that is a future blocks it (Redis's blocked client: later requests stay
buffered, messages wait behind the reply).

Compiled on the compiled data plane (``router._connection``, its fields
declared in ``router/_connection.pxd``): the request loop and the fan-out
read its state in C. The calls they make per request and per receiver
(:meth:`Connection.add_reply`, :meth:`Connection.begin_batch`) are C
inline functions there, written in the
``.pxd`` (a method of a class compiled in another module is inlined only
from its ``.pxd``) and here for the pure-Python data plane, each a few lines, kept
alike (``tests/fuzz/fuzz_loop.py`` runs both).

Output limits (``client-output-buffer-limit``): a subscriber is held to the
``pubsub`` class; over the hard limit, or over the soft limit for longer
than its seconds, it is closed at once and counted
(``client_output_buffer_limit_disconnections``); the writer never waits for a
slow reader, so no subscriber stalls the node. Every other authenticated
client is held to the ``normal`` class the same way (Redis's
``getClientType``; no limit by default, ``normal 0 0 0``). Before AUTH, a
client that does not read its replies is closed as Redis 7.0.15 with the
CVE-2025-21605 fix closes it (:data:`PREAUTH_OUTPUT_LIMIT`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import cython

from router import client_log, resp
from router.client_extras import ClientExtras
from router.protected import DENIED, denies
from router.states import (
    BLOCK,
    BLOCKED,
    CLOSED,
    CLOSING,
    EXECUTING,
    IN_MULTI,
    NORMAL,
    RESTING,
    SUBSCRIBED,
    TRANSITIONS,
    Action,
    ReplyMode,
    State,
)

if not cython.compiled:  # (compiled: router/_connection.pxd cimports it)
    from router.parser import RequestParser

if TYPE_CHECKING:
    from router.stats import CommandStat
if not cython.compiled and TYPE_CHECKING:  # (compiled: the .pxd cimports it)
    from router.context import CommandContext


#: Redis 7.0.15 as Debian ships it (CVE-2025-21605 fix): a client that must
#: authenticate and has not is freed at once (``freeClientAsync``, its
#: output dropped) when a reply does not fit in its 16 KiB reply buffer,
#: that is when more than 16384 bytes of replies wait to be written: 481
#: pipelined PINGs before AUTH are answered, 482 close the connection with
#: no reply at all (their NOAUTH errors are 34 bytes each).
PREAUTH_OUTPUT_LIMIT = 16 * 1024


if not cython.compiled:  # (compiled: router/_connection.pxd defines it, a send(2))

    def send_now(fd: int, data: bytes) -> int:
        """Bytes of ``data`` the socket ``fd`` took at once: the pure-Python
        data plane sends nothing itself (-1), its transport writes it all."""
        return -1


class Transport(Protocol):
    """What a connection uses of its asyncio transport (the ``transport`` attribute)."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...

    def write_eof(self) -> None: ...

    def get_write_buffer_size(self) -> int: ...

    def is_closing(self) -> bool: ...

    def is_reading(self) -> bool: ...


def add_messages(subs: Any, frame2: bytes) -> int:
    """Queue one pub/sub frame (RESP2 bytes; a RESP3 client gets it as a
    push) for ``subs``, one connection or a set of them; returns how many:
    the fan-out loop of :meth:`router.pubsub.PubSub.write_to_all`, here with
    the queues it appends to (one call per message, not per receiver). A
    RESP2 receiver's frame is appended in line when its queue already holds
    output this loop turn (so its flush is due) and nothing holds it back,
    not counted in its queued bytes (the fan-out counts the
    turn's bytes once, ``PubSub.iteration_output``); else :meth:`Connection.write`."""
    if type(subs) is not set:
        subs = (subs,)
    frame3: bytes | None = None
    for client in subs:
        if client.resp == 2:
            if client._out and client.blocked is None and not client.closed:
                client._out.append(frame2)
            else:
                client.write(frame2)
        else:
            if frame3 is None:
                frame3 = resp.as_push(frame2)
            client.write(frame3)
    return len(subs)


@cython.final
@cython.cclass
class Connection:
    """One client connection of a node (module doc)."""

    def __init__(
        self,
        ctx: CommandContext,
        transport: Transport,
        client_id: int,
        schedule_flush: Callable[[Connection], None],
        extras: ClientExtras | None = None,
        addr: str = "?:0",
    ) -> None:
        self.ctx = ctx
        self.transport = transport
        self.id = client_id
        self.schedule_flush = schedule_flush
        self.extras = extras or ClientExtras()
        self.addr = addr
        self.state = NORMAL
        self.reply_mode = ReplyMode.ON
        #: requests take ``dispatch.execute_quietly``: CLIENT REPLY OFF / SKIP, or
        #: a CLIENT CACHING flag to clear after the next command (update_quiet)
        self.quiet = False
        self.closed = False  # state is CLOSED, kept by _to() for the fan-out loop
        self.name = b""
        self.resp = 2
        self.user = ctx.acl.default  # Redis: every client starts as the default user
        self.authenticated = not ctx.acl.default_requires_auth()
        # subscriptions, {name: None}: a dict of bytes is never tracked by
        # the collector (a set always is); router/pubsub.py keeps them
        self.channels: dict[bytes, None] = {}
        self.patterns: dict[bytes, None] = {}
        self.shard_channels: dict[bytes, None] = {}
        config = ctx.config
        # this plane's parser: router._parser's compiled, or router.parser's
        self.parser = RequestParser(config.proto_max_bulk_len, config.max_multibulk_len)
        self.parser.authenticated = self.authenticated
        self.last_interaction = self.extras.created
        self.last_command = "NULL"  # Redis's cmd= before the first command
        self.multi: Any = None  # MULTI's queue (commands' Transaction), None outside one
        self.blocked: asyncio.Future[bytes] | None = None  # BLOCKED: the reply awaited
        #: BLOCKED by CLIENT PAUSE (Redis's BLOCKED_POSTPONE): the command has
        #: not run, so nothing waits behind it and messages flow as ever
        #: (set and cleared by :class:`router.pause.ClientPause`)
        self.postponed = False
        self._held: list[bytes] = []  # messages that came while BLOCKED on a reply
        self._held_bytes = 0  # their size: counted against the output limits
        #: the transport's buffer after this subscriber's last write (flush)
        self._pending = 0
        #: the socket flush() sends on itself while the transport holds
        #: nothing (:meth:`send_directly`), -1: none (all through the transport)
        self._fd = -1
        #: the transport held nothing after the last flush (no need to ask it)
        self._wire_empty = False
        #: with ``_fd``: the transport's is_closing, bound once
        self._is_closing: Callable[[], bool] | None = None
        self.ran: CommandStat | None = None  # the stat of the command that just ran
        # output queued in this loop turn, written by flush(); its bytes
        # (not those add_messages appends in line: PubSub.iteration_output has them)
        self._out: list[bytes] = []
        self._out_bytes = 0
        #: a request loop's batch that began with nothing queued: its replies
        #: schedule no flush, end_batch does (or writes them)
        self._batching = False
        #: when the output buffer passed the soft limit (monotonic), None: under it
        self._soft_limit_since: float | None = None
        #: when this loop turn's first request ran (perf_counter_ns), 0 before
        #: it: the turn's budget (router.dispatch)
        self.work_started = 0

    # ------------------------------------------------------------ transitions

    def _rest(self) -> State:
        """The state with nothing awaited: IN_MULTI, SUBSCRIBED or NORMAL."""
        if self.multi is not None:
            return IN_MULTI
        if self.resp == 2 and (self.channels or self.patterns or self.shard_channels):
            return SUBSCRIBED
        return NORMAL

    def _to(self, target: State) -> None:
        """Every state change goes through here, checked against
        :data:`TRANSITIONS`. Closing is final: a later change to a closing or
        closed connection is ignored (a kill racing a QUIT); any other change
        the table lacks is a bug."""
        state = self.state
        if target is state:
            return
        if target not in TRANSITIONS[state]:
            if state is CLOSING or state is CLOSED:
                return
            raise RuntimeError(f"connection {self.id}: no transition {state.name} -> {target.name}")
        self.state = target
        self.closed = target is CLOSED
        if target is CLOSED or target is CLOSING:
            self._fd = -1  # its transport closes: the socket's number may be reused

    def settle(self) -> None:
        """Subscriptions, the protocol or the MULTI queue changed: a resting
        connection moves to the state the facts say. Elsewhere (BLOCKED:
        CLIENT PAUSE ran a postponed MULTI; EXECUTING) the change is picked
        up when that state ends."""
        if self.state in RESTING:
            self._to(self._rest())

    def begin_multi(self, queue: Any) -> None:
        """MULTI: ``queue`` collects the commands (IN_MULTI)."""
        self.multi = queue
        self.settle()

    def end_multi(self) -> Any:
        """DISCARD, RESET, an aborted EXEC: the queue, now dropped."""
        queued, self.multi = self.multi, None
        self.settle()
        return queued

    def start_exec(self, saved: list[bytes]) -> Any:
        """EXEC: takes the queue; ``saved`` is the output queued before it
        (CLIENT LIST shows both while EXEC runs, as Redis keeps CLIENT_MULTI
        and the reply buffer until EXEC ends)."""
        queued = self.multi
        self.multi = None
        self.extras.executing = (queued, saved)
        self._to(EXECUTING)
        return queued

    def end_exec(self) -> None:
        """EXEC is done: back to rest, or to BLOCKED for an EXEC that CLIENT
        PAUSE postponed (its reply is the awaited one, written by unblock)."""
        self.extras.executing = None
        if self.state is EXECUTING:
            self._to(BLOCKED if self.blocked is not None else self._rest())

    @property
    def in_exec(self) -> bool:
        """Running EXEC's queue: replies never wait (Redis's CLIENT_MULTI in call())."""
        return self.state is EXECUTING

    @property
    def closing(self) -> bool:
        """Closed, or to be closed once what is queued is written."""
        return self.state is CLOSING or self.state is CLOSED

    def close_after_reply(self) -> None:
        """QUIT: write what is pending, then close."""
        self._to(CLOSING)

    def set_authenticated(self, value: bool) -> None:
        self.authenticated = value
        self.parser.authenticated = value

    # ------------------------------------------------------------ CLIENT REPLY

    def set_reply_mode(self, mode: ReplyMode) -> None:
        """CLIENT REPLY ON / OFF / SKIP, RESET (ON): SKIP while OFF stays OFF."""
        if mode is ReplyMode.SKIP and self.reply_mode is ReplyMode.OFF:
            return
        self.reply_mode = mode
        self.update_quiet()

    def take_reply_mode(self) -> ReplyMode:
        """The mode for the command about to run; a SKIP is used up by it."""
        mode = self.reply_mode
        if mode is ReplyMode.SKIP:
            self.reply_mode = ReplyMode.ON
        return mode

    def silenced(self, taken: ReplyMode) -> bool:
        """Whether the reply of the command that ran under ``taken`` (the mode
        :meth:`take_reply_mode` gave it) is dropped: SKIP, or OFF as it is
        after the command (CLIENT REPLY ON answers +OK)."""
        return taken is ReplyMode.SKIP or self.reply_mode is ReplyMode.OFF

    def update_quiet(self) -> None:
        """Requests take :meth:`execute_quietly` while CLIENT REPLY OFF / SKIP
        or a CLIENT CACHING flag is on."""
        caching = self.extras.tracking is not None and self.extras.tracking.caching
        self.quiet = self.reply_mode is not ReplyMode.ON or caching

    # ------------------------------------------------------------ blocking

    def block(self, future: asyncio.Future[bytes]) -> Action:
        """A reply that waits (``future``): BLOCKED until it is done."""
        self._to(BLOCKED)
        self.blocked = future
        return BLOCK

    def finish_block(self) -> bool:
        """The awaited reply is ready (``blocked`` is done): write it and the
        messages held behind it; whether to read on (the request loop then
        runs what was buffered, :func:`router.dispatch.unblock`)."""
        future, self.blocked = self.blocked, None
        held, self._held = self._held, []
        self._held_bytes = 0
        self.postponed = False
        if self.state is BLOCKED:
            self._to(self._rest())
        if self.state is CLOSED or future is None or future.cancelled():
            return False
        self.write(future.result())
        for frame in held:
            self.write(frame)
        if self.state is CLOSING:  # a QUIT that CLIENT PAUSE postponed
            self.flush()
            self.transport.close()
            return False
        return True

    # ------------------------------------------------------------ output

    def subscription_count(self) -> int:
        """Channels + patterns: the count in (un)subscribe replies (Redis
        ``clientSubscriptionsCount``; shard channels are counted apart)."""
        return len(self.channels) + len(self.patterns)

    def write(self, data: bytes) -> None:
        """Queue output (a reply or a pub/sub message); the node flushes every
        queued client once per event-loop turn, after reading from every ready
        client (Redis writes in ``beforeSleep``,
        ``handleClientsWithPendingWrites``). Output leaves in the order it was
        made, and a pipelined batch or many messages to one client cost one
        system call. While BLOCKED on a reply (subscribe visibility, a
        SUBSCRIBE the pub/sub budget spreads over turns), messages wait
        behind it, as Redis, which confirms at once, always confirms first;
        they count against the output limits as Redis counts its reply
        buffer (``_addReplyProtoToList`` -> ``closeClientOnOutputBufferLimitReached``
        at every append), so a client that never reads is disconnected at the hard
        limit. A command CLIENT PAUSE postponed has not run: its messages
        are queued as ever (Redis writes to a postponed client)."""
        state = self.state
        if state is CLOSED:
            return
        if state is BLOCKED and not self.postponed:
            self._held.append(data)
            self._held_bytes += len(data)
            if (self.channels or self.patterns or self.shard_channels) and self._over_limit(
                self.output_buffer_size(), False
            ):
                self.disconnect_over_limit()
            return
        out = self._out
        if not out:
            self.schedule_flush(self)
        out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes > self.ctx.queue_limit:
            self.flush()

    # The two below are C inline functions on the compiled plane, written
    # in router/_connection.pxd (module doc); keep both alike.
    if not cython.compiled:

        def begin_batch(self) -> None:
            """The request loop (:func:`router.dispatch.process`) begins a
            batch of requests: when nothing is queued, its replies schedule no
            flush (:meth:`end_batch` decides when they are written)."""
            self._batching = not self._out

        def add_reply(self, data: bytes) -> None:
            """Queue the reply of a request of the batch (Redis's ``addReply``:
            the flush is scheduled by the first output of a loop turn,
            ``clientHasPendingReplies``, here unless the batch defers it)."""
            out = self._out
            if not out and not self._batching:
                self.schedule_flush(self)
            out.append(data)
            self._out_bytes += len(data)

    def end_batch(self, now: bool) -> None:
        """The request loop's batch ended (or blocked): a batch that began
        with nothing queued has its output written at once when ``now`` (one
        request, the first work of the loop turn: no end-of-turn callback),
        else at the end of the turn; output past the pubsub hard limit is
        written at once."""
        if self._batching:
            self._batching = False
            if self._out:
                if now:
                    self.flush()
                else:
                    self.schedule_flush(self)
        if self._out_bytes > self.ctx.queue_limit:
            self.flush()

    def flush(self) -> None:
        """Write the queued output, holding the client to its output limits:
        before AUTH, :data:`PREAUTH_OUTPUT_LIMIT` (before the write: Redis
        drops it all); a subscriber whose queued and buffered output passes
        the pubsub hard limit, before the write; after it,
        :meth:`_over_limit` (the pubsub class for a subscribed client, else
        the normal class when it has a limit)."""
        out = self._out
        self.work_started = 0
        if not out or self.state is CLOSED:
            out.clear()
            self._out_bytes = 0
            return
        if not self.authenticated and self._preauth_over_limit():
            self.disconnect_over_limit()
            return
        transport = self.transport
        subscribed = self.channels or self.patterns or self.shard_channels
        if (
            subscribed
            and self._out_bytes + self._pending + self._held_bytes > self.ctx.queue_limit
            and self._out_bytes + self.output_buffer_size() > self.ctx.queue_limit
        ):
            # past the pubsub hard limit with what is queued: disconnect before it is
            # joined and buffered (Redis checks at every append to the reply
            # list, closeClientOnOutputBufferLimitReached, so its buffer never
            # holds twice the limit; issue 41: 79 MB peak RSS for a 32 MB limit).
            # ``_pending``, what the transport held after a subscriber's last
            # write, is at least what it holds now (only this method writes to
            # it), so the transport is asked only when that bound is past the
            # limit (a client that subscribed since its last write has none:
            # the check after the write holds it, as before)
            self.disconnect_over_limit()
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        all_sent = self._send(data)
        self.ctx.stats.net_output_bytes += len(data)
        out.clear()
        self._out_bytes = 0
        if not subscribed:
            # a normal client: Redis's normal class, no limit unless CONFIG SET
            if self.ctx.normal_limited and self._over_limit(
                0 if all_sent else transport.get_write_buffer_size(), True
            ):
                self.disconnect_over_limit()
            return
        pending = 0 if all_sent else transport.get_write_buffer_size()
        self._pending = pending
        if not pending:  # the socket took it all: under every limit (_over_limit's first case)
            self._soft_limit_since = None
        elif self._over_limit(pending, False):
            self.disconnect_over_limit()

    def send_directly(self, fd: int) -> None:
        """Let :meth:`flush` send on ``fd``, the socket of its transport (a
        plain uvloop TCP transport: never a TLS one), while the transport
        holds nothing: uvloop's own fast path (``uv_try_write``) without its
        Python call (:class:`router.client.Client`, on the compiled plane)."""
        self._fd = fd
        self._wire_empty = False
        self._is_closing = self.transport.is_closing  # (bound once: read on every flush)

    def _send(self, data: bytes) -> bool:
        """Write ``data``; whether the socket took all of it at once (the
        transport holds nothing). With :meth:`send_directly`, while the
        transport is open and holds nothing, one send(2) first; what the
        socket does not take (a full socket buffer, an error, which the
        transport then meets and reports) goes to the transport, in order."""
        transport = self.transport
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

    def _preauth_over_limit(self) -> bool:
        """Whether this connection, not authenticated, must be closed before its
        queued output is written (:data:`PREAUTH_OUTPUT_LIMIT`: what is
        queued plus what an earlier write left waiting for the socket)."""
        waiting = self.queued_bytes() + self.transport.get_write_buffer_size()
        return waiting > PREAUTH_OUTPUT_LIMIT and self.ctx.acl.default_requires_auth()

    def _over_limit(self, pending: int, normal: bool) -> bool:
        """Whether this connection, with ``pending`` bytes the socket did not
        take, is past its ``client-output-buffer-limit`` class (Redis's
        ``checkClientOutputBufferLimits``): ``pubsub`` for a subscribed
        client, ``normal`` (``normal`` true) for the others; over the hard
        limit, or over the soft limit for longer than its seconds. (:meth:`flush`
        does the first case of a subscriber, ``pending`` 0, itself: keep them
        alike.)"""
        if not pending:  # the socket took it all: under every limit
            self._soft_limit_since = None
            return False
        settings = self.ctx.settings
        hard, soft, seconds = settings.normal_limits if normal else settings.pubsub_limits
        if hard and pending > hard:
            return True
        if not soft or pending <= soft:
            self._soft_limit_since = None
            return False
        now = time.monotonic()
        since = self._soft_limit_since
        if since is None:
            self._soft_limit_since = now
            return False
        return now - since > seconds

    def over_limit_with(self, extra: int, normal: bool) -> bool:
        """Whether this connection would be past its ``client-output-buffer-limit``
        class with ``extra`` more bytes than it holds now (Redis checks at each
        append: a MONITOR line, :meth:`router.hooks.Hooks.feed`)."""
        return self._over_limit(self.output_buffer_size() + extra, normal)

    def swap_output(self, out: list[bytes]) -> list[bytes]:
        """Make ``out`` the output queue; returns the queue it replaces (EXEC
        collects what its commands write into its own reply)."""
        saved, self._out = self._out, out
        return saved

    def output_buffer_size(self) -> int:
        """Bytes made for the client and not yet taken by its socket: the
        transport's buffer and the messages held while BLOCKED (CLIENT LIST's
        ``omem``; Redis's ``getClientOutputBufferMemoryUsage``)."""
        return self.transport.get_write_buffer_size() + self._held_bytes

    def queued_bytes(self) -> int:
        """Bytes queued this loop turn, not yet written (CLIENT LIST's ``obl``)."""
        queued = 0
        for frame in self._out:
            queued += len(frame)
        return queued

    def is_reading(self) -> bool:
        """Whether its socket is read (CLIENT LIST's ``events=r``)."""
        return not self.closed and self.transport.is_reading()

    # ------------------------------------------------------------ opening, closing

    def admit(self) -> bool:
        """A new connection: refused by protected mode (Redis's DENIED: counted
        as rejected, not received nor as an error reply; never a client), or
        at ``maxclients`` (Redis's error, then closed); else a client of the node."""
        ctx = self.ctx
        settings, stats = ctx.settings, ctx.stats
        if denies(settings.protected_mode, ctx.acl.default_has_password(), self.extras.peer_ip):
            stats.rejected_connections += 1
            stats.protected_mode_denied += 1
            self.refuse(DENIED)
            return False
        stats.connections_received += 1
        if len(ctx.clients) >= settings.maxclients:
            stats.rejected_connections += 1
            self.write(resp.error("ERR max number of clients reached"))
            self.close_now()
            return False
        ctx.clients[self.id] = self
        return True

    def disconnect_over_limit(self) -> None:
        """Over an output limit: closed at once, its output dropped (Redis's
        ``freeClientAsync``; ``abort`` calls ``connection_lost`` on a later
        loop iteration, so a delivery loop in progress is not disturbed)."""
        self.ctx.stats.output_buffer_limit_disconnections += 1
        client_log.output_buffer_disconnect(self)  # omem= is the size over the limit
        self.kill()

    def kill(self) -> None:
        """Close now, dropping pending output (an ACL revocation, a deleted
        user, an idle timeout: Redis's ``freeClient``)."""
        self._out.clear()
        self._out_bytes = 0
        self._drop_held()
        self._to(CLOSED)
        self.transport.abort()

    def drop(self) -> None:
        """Close without writing what is queued (Redis's freeClient of a
        client that sent an HTTP request)."""
        self._out.clear()
        self._out_bytes = 0
        self._drop_held()
        self._to(CLOSED)
        self.transport.close()

    def close_now(self) -> None:
        """Write what is queued, then close (CLIENT KILL of another client,
        a node shutting down, a loss with ``--on-publish-loss disconnect``)."""
        self.flush()
        self._to(CLOSED)
        self.transport.close()

    def refuse(self, reply: bytes) -> None:
        """Write ``reply`` and close, reading nothing (protected mode): the
        connection never counts as a client. Half-closed: closed once the
        peer closes (a close with its request unread would reset the
        connection and could lose the reply); the caller aborts a peer that
        never does."""
        self._to(CLOSED)
        self.extras.refused = True
        self.transport.write(reply)
        self.transport.write_eof()

    def _drop_held(self) -> None:
        """Free what waited behind an awaited reply (a closed connection can
        stay referenced until a pause or a job ends)."""
        self._held = []
        self._held_bytes = 0

    def lost(self) -> None:
        """The connection is gone (``connection_lost``)."""
        self._to(CLOSED)
        self._drop_held()
        if self.blocked is not None and not self.blocked.done():
            self.blocked.cancel()

    def idle_for(self, now: float) -> float | None:
        """Seconds since the last read, or None if exempt from ``timeout``:
        pub/sub clients (RESP2 or 3) and blocked ones, as Redis's
        ``clientsCronHandleTimeout``."""
        if self.state is BLOCKED or self.channels or self.patterns or self.shard_channels:
            return None
        return now - self.last_interaction
