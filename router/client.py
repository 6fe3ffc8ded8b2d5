"""Client: one RESP connection (an ``asyncio.Protocol``, not streams).

Bytes go through the sans-IO :class:`router.parser.RequestParser`; each request
is looked up in :data:`router.commands.COMMANDS` and checked the way Redis's
``processCommand`` checks it, in Redis's order: unknown command, arity,
authentication, subscribed context (RESP2 only). Replies and pub/sub
messages go to one output queue that the node writes once per event-loop
turn, after every ready client has been read — Redis's
``handleClientsWithPendingWrites`` in ``beforeSleep`` — so a pipelined batch
costs one ``send()``, and the sends of one turn go out back to back.

A command may answer with a future (SUBSCRIBE under subscribe visibility):
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
from typing import TYPE_CHECKING, cast

from router import parser, resp
from router.acl.registry import noperm
from router.commands import COMMANDS, LOOKUP, Reply
from router.commands.base import client_info_line, unknown_command_text

if TYPE_CHECKING:
    from router.node import Node

#: the longest one connection's requests hold the loop before the other
#: clients run: the rest of its pipeline (or of a huge request) waits for the
#: next loop turn, and reading from it pauses meanwhile (libuv would
#: otherwise read a busy socket again and again in one turn)
SLICE_SECONDS = 0.005

# commands a RESP2 client may send while subscribed (Redis's processCommand);
# subscribed = any channel, pattern or shard channel (Redis 7.0's CLIENT_PUBSUB)
_SUBSCRIBED_ALLOWED = frozenset(
    {"subscribe", "ssubscribe", "sunsubscribe", "psubscribe", "unsubscribe", "punsubscribe"}
    | {"ping", "quit", "reset"}
)


# commands whose replies are pub/sub confirmations: Redis 7.0 sends them as
# pushes (CLIENT_PUSHING), which CLIENT REPLY OFF / SKIP do not silence
_CONFIRMING = frozenset(
    {"subscribe", "ssubscribe", "sunsubscribe", "psubscribe", "unsubscribe", "punsubscribe"}
)


class Client(asyncio.Protocol):
    """One client connection of a node."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.id = node.next_client_id()
        self.name = b""
        self.lib_name = b""
        self.lib_ver = b""
        self.resp = 2
        self.user = node.acl.default  # Redis: every client starts as the default user
        self.authenticated = not node.acl.default_requires_auth()
        self.channels: set[bytes] = set()
        self.patterns: set[bytes] = set()
        self.shard_channels: set[bytes] = set()
        self.transport: asyncio.Transport | None = None
        self.parser = parser.RequestParser(
            node.config.proto_max_bulk_len, node.config.max_multibulk_len
        )
        self.parser.authenticated = self.authenticated
        self.closed = False
        self.created = time.monotonic()
        self.last_interaction = self.created
        self.last_command = "NULL"  # Redis's cmd= before the first command
        # CLIENT REPLY OFF / SKIP (Redis's CLIENT_REPLY_OFF, _SKIP_NEXT flags);
        # ``quiet`` is either, so the common path checks one attribute
        self.reply_off = False
        self.reply_skip_next = False
        self.quiet = False
        self.db = 0  # SELECT: recorded only, pub/sub ignores it (as Redis)
        self.addr = "?:0"
        self.peer_ip = ""
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
        self._slicing = False  # a slice of a huge request is scheduled
        self._work_started: float | None = None  # this loop turn's first request
        self.refused = False  # protected mode turned it away at connect

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        if peer:
            self.addr = f"{peer[0]}:{peer[1]}"
            self.peer_ip = str(peer[0])
        if sock:
            self.laddr = f"{sock[0]}:{sock[1]}"
        self.node.client_connected(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        unread = self.parser.release()
        if len(unread) > 4096:  # a huge unfinished request: free it in slices
            _free_in_slices(unread)
        if self._blocked is not None and not self._blocked.done():
            self._blocked.cancel()
        if not self.refused:
            self.node.client_disconnected(self)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # protected mode: nothing it sends is read
        self.node.stats.net_input_bytes += len(data)
        self.parser.feed(data)
        self.last_interaction = time.monotonic()
        if self._blocked is None:
            self._process()

    # ------------------------------------------------------------ requests

    def _process(self) -> None:
        if self.closed or self._close_after_reply:
            return  # QUIT or a protocol error ended this connection: read no more
        # replies go straight to the output queue, the one that pub/sub
        # messages go to, so output leaves in command order (a message this
        # connection publishes to itself follows the confirmation and the
        # replies before it, as in Redis); the queue is still written once
        # per loop turn
        out = self._out
        execute = self.execute
        queued = 0
        # the loop turn's budget is shared by every read of this turn (libuv
        # may deliver several): flush(), at the end of the turn, resets it
        started = self._work_started
        if started is None:
            started = self._work_started = time.monotonic()
        elif time.monotonic() - started > SLICE_SECONDS:
            self._resume_later()  # a read after this turn's budget was spent
            return
        sliced = False
        done = 0
        try:
            for args in self.parser.requests():
                reply = self.execute_quietly(args) if self.quiet else execute(args)
                if type(reply) is bytes:
                    if reply[:1] == b"-":
                        self.node.stats.error_replied(reply)
                    if not out:
                        self.node.schedule_flush(self)
                    out.append(reply)
                    queued += len(reply)
                    if self._close_after_reply or self.closed:  # QUIT, or cut
                        break
                    done += 1  # the clock is read every 4th request (hot path)
                    if not done & 3 and time.monotonic() - started > SLICE_SECONDS:
                        sliced = True  # a long pipeline: the rest after the others
                        break
                    continue
                # blocked until the future resolves (subscribe visibility);
                # what follows stays buffered in the parser until then
                self._out_bytes += queued
                self._block(reply)  # type: ignore[arg-type]
                return
        except parser.ProtocolError as exc:
            self._out_bytes += queued
            queued = 0
            error = resp.error(str(exc))
            self.node.stats.error_replied(error)
            self.write(error)
            self._close_after_reply = True
        # (an early flush in the batch, a message to this client over the
        # limit, reset the count: it may over-count, flushing early once more)
        self._out_bytes += queued
        if (sliced or self.parser.backlog) and not self._close_after_reply:
            # a huge request is still being parsed, or a pipeline ran past
            # SLICE_SECONDS: let the other clients run before the next slice
            self._resume_later()
        if self._out_bytes > self._queue_limit:
            self.flush()
        if self._close_after_reply and self.transport is not None:
            self.flush()
            self.transport.close()

    def _resume_later(self) -> None:
        if self.transport is not None and not self._slicing:
            self._slicing = True
            self.node.stats.parse_slices += 1
            self.transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._next_slice)

    def _next_slice(self) -> None:
        self._slicing = False
        self._work_started = None
        if self.closed:
            return
        self._process()
        if not self._slicing and self._blocked is None and self.transport is not None:
            self.transport.resume_reading()

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
        if (skip or self.reply_off) and args[0].lower().decode(errors="replace") not in _CONFIRMING:
            reply = b""
        self.quiet = self.reply_off or self.reply_skip_next
        return reply

    def execute(self, args: list[bytes]) -> Reply:
        """Run one request; returns reply bytes or a future of them."""
        node = self.node
        top = LOOKUP.get(args[0]) or COMMANDS.get(args[0].lower())
        if top is None:
            return resp.error(unknown_command_text(args))
        cmd = top
        argc = len(args)
        if cmd.subcommands is not None and argc >= 2:
            sub = cmd.subcommands.get(args[1].lower())
            if sub is None:
                shown = resp.c_string(args[1][:128])
                return resp.error(f"ERR unknown subcommand '{shown}'. Try {cmd.name.upper()} HELP.")
            cmd = sub
        self.last_command = cmd.name
        arity = cmd.arity
        if argc != arity and (arity > 0 or argc < -arity):
            return resp.error(f"ERR wrong number of arguments for '{cmd.name}' command")
        if not self.authenticated and not cmd.no_auth and node.acl.default_requires_auth():
            return resp.error("NOAUTH Authentication required.")
        user = self.user
        if not user.unrestricted and not cmd.no_auth:
            denial = node.acl.denied(user, cmd.name, args)
            if denial is not None:
                node.acl.add_log(*denial, user.name, client_info_line(self))
                return noperm(denial[0], denial[1])
        if (
            self.resp == 2
            and (self.channels or self.patterns or self.shard_channels)
            and top.name not in _SUBSCRIBED_ALLOWED
        ):
            return resp.error(
                f"ERR Can't execute '{cmd.name}': only (P|S)SUBSCRIBE / "
                "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
            )
        # Redis counts a command in call(): rejected ones are not processed
        node.stats.commands_processed += 1
        return cmd.handler(node, self, args)

    def refuse(self, reply: bytes) -> None:
        """Write ``reply`` and close, reading nothing (protected mode): the
        connection never counts as a client."""
        self.closed = True
        self.refused = True
        transport = self.transport
        if transport is not None:
            transport.write(reply)
            # half-close, and close once the peer does (a close with its
            # request still unread would reset the connection and could lose
            # the reply); a peer that never closes is cut after 5 s
            transport.write_eof()
            asyncio.get_running_loop().call_later(5.0, transport.abort)

    def kill(self) -> None:
        """Close now, dropping pending output (Redis's freeClientAsync of an
        ACL revocation or a deleted user)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def close_after_reply(self) -> None:
        """QUIT: write what is pending, then close."""
        self._close_after_reply = True

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
        self._work_started = None
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
        self.closed = True
        self.node.stats.output_buffer_limit_disconnections += 1
        if self.transport is not None:
            self.transport.abort()

    def output_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport else 0

    def flags(self) -> str:
        return "P" if self.channels or self.patterns or self.shard_channels else "N"


def _free_in_slices(items: list[bytes]) -> None:
    del items[-4096:]
    if items:
        asyncio.get_running_loop().call_soon(_free_in_slices, items)
