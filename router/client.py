"""Client: one RESP connection (an ``asyncio.Protocol``, not streams).

Bytes go through the sans-IO :class:`router.parser.RequestParser`; each request
is looked up in :data:`router.commands.COMMANDS` and checked the way Redis's
``processCommand`` checks it, in Redis's order: unknown command, arity,
authentication, subscribed context (RESP2 only), CLIENT PAUSE
(:mod:`router.pause`), then queued if in MULTI (:mod:`router.commands.multi`);
a command that runs is counted for INFO commandstats, its time read once
per pipelined batch (:mod:`router.stats`). Replies and pub/sub
messages go to one output queue that the node writes once per event-loop
turn, after every ready client has been read — Redis's
``handleClientsWithPendingWrites`` in ``beforeSleep`` — so a pipelined batch
costs one ``send()``, and the sends of one turn go out back to back.

A command may answer with a future (SUBSCRIBE under subscribe visibility, a
command CLIENT PAUSE postponed):
the connection then behaves like a Redis blocked client — it stops reading
until the future resolves, writes the reply and carries on with what is
buffered, so replies keep their order.

Pub/sub output is limited like ``client-output-buffer-limit pubsub``: over the
hard limit, or over the soft limit for longer than its seconds, the client is
closed asynchronously and counted (``client_output_buffer_limit_disconnections``);
the writer never waits for a slow reader, so no subscriber stalls the node.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import TYPE_CHECKING, cast

from router import client_log, parser, resp
from router.commands import COMMANDS, LOOKUP, Reply
from router.commands.base import CONFIRMING, Command, Transaction
from router.stats import CommandStat, share_time

if TYPE_CHECKING:
    from router.node import Node

# commands a RESP2 client may send while subscribed (Redis's processCommand);
# subscribed = any channel, pattern or shard channel (Redis 7.0's CLIENT_PUBSUB)
_SUBSCRIBED_ALLOWED = frozenset(
    {"subscribe", "ssubscribe", "sunsubscribe", "psubscribe", "unsubscribe", "punsubscribe"}
    | {"ping", "quit", "reset"}
)


# run at once inside MULTI, never queued (Redis ``processCommand``)
_MULTI_IMMEDIATE = frozenset({"exec", "discard", "multi", "watch", "quit", "reset"})
_QUEUED = b"+QUEUED\r\n"
_Waited = asyncio.Future[None]


@dataclass(slots=True)
class ClientExtras:
    """State read rarely, kept out of the Client's own attributes (CPython
    shares an instance dict's keys only up to 30 of them; past that every
    attribute read on the hot path is slower)."""

    created: float = field(default_factory=time.monotonic)
    db: int = 0  # SELECT: recorded only, pub/sub ignores it (as Redis)
    lib_name: bytes = b""  # CLIENT SETINFO
    lib_ver: bytes = b""
    no_evict: bool = False  # CLIENT NO-EVICT: shown only (the node evicts no client)
    in_exec: bool = False  # running EXEC's commands: replies never wait


class Client(asyncio.Protocol):
    """One client connection of a node."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.id = node.next_client_id()
        self.name = b""
        self.extras = ClientExtras()
        self.resp = 2
        self.authenticated = node.config.requirepass is None
        self.channels: set[bytes] = set()
        self.patterns: set[bytes] = set()
        self.shard_channels: set[bytes] = set()
        self.transport: asyncio.Transport | None = None
        self.parser = parser.RequestParser(
            node.config.proto_max_bulk_len, node.config.max_multibulk_len
        )
        self.parser.authenticated = self.authenticated
        self.closed = False
        self.last_interaction = self.extras.created
        self.last_command = "NULL"  # Redis's cmd= before the first command
        # CLIENT REPLY OFF / SKIP (Redis's CLIENT_REPLY_OFF, _SKIP_NEXT flags);
        # ``quiet`` is either, so the common path checks one attribute
        self.reply_off = False
        self.reply_skip_next = False
        self.quiet = False
        self.multi: Transaction | None = None  # MULTI's queue, None outside one
        self._ran: CommandStat | None = None  # the stat of the command that just ran
        self.addr = "?:0"
        self.laddr = "?:0"
        self._blocked: asyncio.Future[bytes] | None = None
        # messages that arrived while a confirmation was held (they go after it)
        self._held: list[bytes] = []
        # output (replies and messages) queued in this loop turn, written by flush()
        self._out: list[bytes] = []
        self._out_bytes = 0
        # queued bytes that force an early flush: the hard limit, if any
        self._queue_limit = node.config.pubsub_hard_limit or sys.maxsize
        self._close_after_reply = False
        self._soft_limit_since: float | None = None

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        if peer:
            self.addr = f"{peer[0]}:{peer[1]}"
        if sock:
            self.laddr = f"{sock[0]}:{sock[1]}"
        self.node.client_connected(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._blocked is not None and not self._blocked.done():
            self._blocked.cancel()
        self.node.client_disconnected(self)

    def data_received(self, data: bytes) -> None:
        self.node.stats.net_input_bytes += len(data)
        self.parser.feed(data)
        self.last_interaction = time.monotonic()
        if self._blocked is None:
            self._process()

    # ------------------------------------------------------------ requests

    def _process(self) -> None:
        if self.closed or self._close_after_reply:
            return  # QUIT or a protocol error ended this connection: read no more
        # replies go straight to the output queue pub/sub messages go to, so
        # output leaves in command order (a message this connection publishes
        # to itself follows the replies before it, as in Redis); the queue is
        # still written once per loop turn
        out = self._out
        execute = self.execute
        queued = 0
        # commandstats usec: one clock read per batch, shared by the commands
        # that ran (router.stats.share_time), so runs of one command are counted
        start = perf_counter_ns()
        runs: list[tuple[CommandStat, int]] = []
        last: CommandStat | None = None
        n = 0
        try:
            for args in self.parser.requests():
                reply = self.execute_quietly(args) if self.quiet else execute(args)
                ran = self._ran
                if ran is not None:
                    self._ran = None
                    if ran is last:
                        n += 1
                    else:
                        if last is not None:
                            runs.append((last, n))
                        last, n = ran, 1
                if type(reply) is bytes:
                    if reply[:1] == b"-":
                        self.node.stats.error_replied(reply)
                        if ran is not None:
                            ran.failed_calls += 1
                    if not out:
                        self.node.schedule_flush(self)
                    out.append(reply)
                    queued += len(reply)
                    if self._close_after_reply or self.closed:  # QUIT, or cut
                        break
                    continue
                # blocked until the future resolves (subscribe visibility);
                # what follows stays buffered in the parser until then
                self._out_bytes += queued
                if last is not None:
                    runs.append((last, n))
                    share_time(runs, perf_counter_ns() - start)
                self._block(reply)  # type: ignore[arg-type]
                return
        except parser.ProtocolError as exc:
            self._out_bytes += queued
            queued = 0
            error = resp.error(str(exc))
            client_log.protocol_error(self, str(exc))
            self.node.stats.error_replied(error)
            self.write(error)
            self._close_after_reply = True
        if last is not None:
            runs.append((last, n))
            share_time(runs, perf_counter_ns() - start)
        # (an early flush in the batch, a message to this client over the
        # limit, reset the count: it may over-count, flushing early once more)
        self._out_bytes += queued
        if self._out_bytes > self._queue_limit:
            self.flush()
        if self._close_after_reply and self.transport is not None:
            self.flush()
            self.transport.close()

    def _block(self, future: asyncio.Future[bytes]) -> None:
        self._blocked = future
        if self.transport is not None:
            self.transport.pause_reading()
        future.add_done_callback(self._unblock)

    def _unblock(self, future: asyncio.Future[bytes]) -> None:
        self._blocked = None
        held, self._held = self._held, []
        if self.closed or future.cancelled():
            return
        self.write(future.result())
        for frame in held:
            self.write(frame)
        if self.transport is not None:
            self.transport.resume_reading()
        self._process()

    def execute_quietly(self, args: list[bytes]) -> Reply:
        """Run one request under CLIENT REPLY OFF or SKIP (Redis's
        ``resetClient`` / ``prepareClientToWrite``): SKIP silences the next
        command's reply, OFF every reply until ON or RESET; pub/sub
        confirmations and messages are pushes and always go out."""
        skip = self.reply_skip_next
        self.reply_skip_next = False
        reply = self.execute(args)
        if (skip or self.reply_off) and args[0].lower().decode(errors="replace") not in CONFIRMING:
            # a postponed command (CLIENT PAUSE) still holds what follows back
            reply = b"" if type(reply) is bytes else self.node.after(cast(_Waited, reply), b"")
        self.quiet = self.reply_off or self.reply_skip_next
        return reply

    def execute(self, args: list[bytes]) -> Reply:
        """Run one request; returns reply bytes or a future of them. Checked
        in Redis's ``processCommand`` order: unknown command, arity,
        authentication, subscribed context, CLIENT PAUSE, then queued when in
        MULTI (a rejection there aborts the transaction: ``flagTransaction``)."""
        node = self.node
        top = LOOKUP.get(args[0]) or COMMANDS.get(args[0].lower())
        if top is None:
            return self._reject(None, resp.unknown_command_text(args))
        cmd = top
        argc = len(args)
        if cmd.subcommands is not None and argc >= 2:
            sub = cmd.subcommands.get(args[1].lower())
            if sub is None:
                shown = resp.c_string(args[1][:128])
                return self._reject(
                    None, f"ERR unknown subcommand '{shown}'. Try {cmd.name.upper()} HELP."
                )
            cmd = sub
        self.last_command = cmd.name
        arity = cmd.arity
        if argc != arity and (arity > 0 or argc < -arity):
            return self._reject(cmd, f"ERR wrong number of arguments for '{cmd.name}' command")
        if not self.authenticated and not cmd.no_auth:
            return self._reject(cmd, "NOAUTH Authentication required.")
        if (
            self.resp == 2
            and (self.channels or self.patterns or self.shard_channels)
            and top.name not in _SUBSCRIBED_ALLOWED
        ):
            return self._reject(
                cmd,
                f"ERR Can't execute '{cmd.name}': only (P|S)SUBSCRIBE / "
                "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            )
        if node.pause.level and node.pause.holds(self, cmd):
            return node.pause.postpone(self, args)
        if self.multi is not None and top.name not in _MULTI_IMMEDIATE:
            self.multi.append((cmd, args))
            return _QUEUED
        reply = cmd.handler(node, self, args)
        # counted after it ran, as Redis's call() counts (so INFO does not
        # count itself and CONFIG RESETSTAT's call survives it); its time and
        # failure are added by the caller (_process: one clock read per batch)
        stats = node.stats
        stats.commands_processed += 1
        ran = self._ran = stats.commands[cmd.name]
        ran.calls += 1
        return reply

    def _reject(self, cmd: Command | None, text: str) -> bytes:
        """A command refused before it ran (Redis ``rejectCommand``)."""
        if cmd is not None:
            self.node.stats.command_stat(cmd.name).rejected_calls += 1
        if self.multi is not None:
            if cmd is not None and cmd.name == "exec":  # execCommandAbort
                self.multi = None
                text = "EXECABORT Transaction discarded because of: " + text.removeprefix("ERR ")
            else:
                self.multi.dirty = True
        return resp.error(text)

    def close_after_reply(self) -> None:
        """QUIT: write what is pending, then close."""
        self._close_after_reply = True

    def set_queue_limit(self, hard_limit: int) -> None:
        """CONFIG SET client-output-buffer-limit changed the pubsub hard limit."""
        self._queue_limit = hard_limit or sys.maxsize

    @property
    def closing(self) -> bool:
        """Closed, or to be closed once what is queued is written."""
        return self.closed or self._close_after_reply

    def swap_output(self, out: list[bytes]) -> list[bytes]:
        """Make ``out`` the output queue; returns the queue it replaces (EXEC
        collects what its commands write into its own reply)."""
        saved, self._out = self._out, out
        return saved

    def set_authenticated(self, value: bool) -> None:
        self.authenticated = value
        self.parser.authenticated = value

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
        system call. While a (P|S)SUBSCRIBE confirmation is held for subscribe
        visibility, messages wait behind it: Redis always confirms first."""
        if self.closed or self.transport is None:
            return
        if self._blocked is not None:
            self._held.append(data)
            return
        out = self._out
        if not out:
            self.node.schedule_flush(self)
        out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes > self._queue_limit:
            self.flush()

    def flush(self) -> None:
        """Write the queued output; a pub/sub client is held to the
        ``client-output-buffer-limit pubsub`` limits (other clients, like
        Redis's ``normal`` class, have none)."""
        transport = self.transport
        out = self._out
        if not out or self.closed or transport is None:
            out.clear()
            self._out_bytes = 0
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        transport.write(data)
        self.node.stats.net_output_bytes += len(data)
        out.clear()
        self._out_bytes = 0
        if not (self.channels or self.patterns or self.shard_channels):
            return
        size = transport.get_write_buffer_size()
        config = self.node.config
        if size <= config.pubsub_soft_limit or not config.pubsub_soft_limit:
            self._soft_limit_since = None
            if size <= config.pubsub_hard_limit or not config.pubsub_hard_limit:
                return
        if config.pubsub_hard_limit and size > config.pubsub_hard_limit:
            self._cut_slow()
            return
        now = time.monotonic()
        if self._soft_limit_since is None:
            self._soft_limit_since = now
        elif now - self._soft_limit_since > config.pubsub_soft_seconds:
            self._cut_slow()

    def _cut_slow(self) -> None:
        # Redis frees such a client asynchronously (freeClientAsync); abort()
        # drops the buffered output and calls connection_lost on a later turn
        # of the loop, so the delivery loop in progress is not disturbed.
        self.node.stats.output_buffer_limit_disconnections += 1
        client_log.output_buffer_cut(self)  # its omem= is the size that cut it
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def output_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport else 0
