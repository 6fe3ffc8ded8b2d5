"""Client: one RESP connection (an ``asyncio.Protocol``, not streams).

Bytes go through the sans-IO :class:`router.parser.RequestParser`; each request
is looked up in :data:`router.commands.COMMANDS` and checked the way Redis's
``processCommand`` checks it, in Redis's order: unknown command, arity,
authentication, ACL, CROSSSLOT (a cluster node), subscribed context (RESP2
only; commands the node lacks too: :mod:`router.command_checks`), CLIENT
PAUSE (:mod:`router.pause`), then queued if in MULTI
(:mod:`router.commands.multi`); a command that runs is counted for INFO
commandstats, its time read once per pipelined batch (:mod:`router.stats`).
Replies and pub/sub messages go to one output queue that the node writes
once per event-loop turn, after every ready client has been read — Redis's
``handleClientsWithPendingWrites`` in ``beforeSleep`` — so a pipelined batch
costs one ``send()``, and the sends of one turn go out back to back.

A command may answer with a future (SUBSCRIBE under subscribe visibility, a
command CLIENT PAUSE postponed): the connection then behaves like a Redis
blocked client — it stops reading until the future resolves, writes the
reply and carries on with what is buffered, so replies keep their order.
Output and its pub/sub limits: :mod:`router.client_output`.

No connection holds the loop: its requests share a budget of
:data:`SLICE_SECONDS` per loop turn (a huge multibulk is parsed in slices by
the parser), then reading from it pauses and the rest runs on a later turn.
"""

from __future__ import annotations

import asyncio
import sys
import time
from time import perf_counter_ns
from typing import TYPE_CHECKING, cast

from router import client_log, parser, resp
from router.acl.registry import noperm_text
from router.client_extras import ClientExtras
from router.client_output import ClientOutput
from router.command_checks import (
    CROSSSLOT,
    SUBSCRIBED_ALLOWED,
    context_error,
    cross_slot,
    elsewhere,
)
from router.commands import COMMANDS, LOOKUP, Reply
from router.commands.base import CONFIRMING, Command, Transaction
from router.commands.client_view import acl_context, info_line
from router.commands.tracking import after_command
from router.stats import CommandStat, share_time

if TYPE_CHECKING:
    from router.node import Node

#: the longest one connection's requests hold the loop before the other
#: clients run: the rest of its pipeline (or of a huge request) waits for the
#: next loop turn, and reading from it pauses meanwhile (libuv would
#: otherwise read a busy socket again and again in one turn)
SLICE_SECONDS = 0.005
_SLICE_NS = int(SLICE_SECONDS * 1e9)

# run at once inside MULTI, never queued (Redis ``processCommand``)
_MULTI_IMMEDIATE = frozenset({"exec", "discard", "multi", "watch", "quit", "reset"})
_QUEUED = b"+QUEUED\r\n"
_Waited = asyncio.Future[None]


class Client(ClientOutput, asyncio.Protocol):
    """One client connection of a node."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.id = node.next_client_id()
        self.name = b""
        self.extras = ClientExtras()
        self.resp = 2
        self.user = node.acl.default  # Redis: every client starts as the default user
        self.authenticated = not node.acl.default_requires_auth()
        # subscriptions, {name: None}: a dict of bytes is never tracked by
        # the collector (a set always is); router/pubsub.py keeps them
        self.channels: dict[bytes, None] = {}
        self.patterns: dict[bytes, None] = {}
        self.shard_channels: dict[bytes, None] = {}
        self.transport: asyncio.Transport | None = None
        self.parser = parser.RequestParser(
            node.config.proto_max_bulk_len, node.config.max_multibulk_len
        )
        self.parser.authenticated = self.authenticated
        self.closed = False
        self.last_interaction = self.extras.created
        self.last_command = "NULL"  # Redis's cmd= before the first command
        # CLIENT REPLY OFF / SKIP (Redis's CLIENT_REPLY_OFF, _SKIP_NEXT flags);
        # ``quiet``: either, or a CLIENT CACHING flag to clear after the next
        # command (update_quiet), so the common path checks one attribute
        self.reply_off = False
        self.reply_skip_next = False
        self.quiet = False
        self.multi: Transaction | None = None  # MULTI's queue, None outside one
        self._ran: CommandStat | None = None  # the stat of the command that just ran
        self.addr = "?:0"
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
        self._work_started: int | None = None  # this loop turn's first request (ns)

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        if peer:
            self.addr = f"{peer[0]}:{peer[1]}"
            self.extras.peer_ip = str(peer[0])
        if sock:
            self.extras.laddr = f"{sock[0]}:{sock[1]}"
        raw = transport.get_extra_info("socket")
        if raw is not None:
            self.extras.fd = raw.fileno()
        self.node.client_connected(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        unread = self.parser.release()
        if len(unread) > 4096:  # a huge unfinished request: free it in slices
            _free_in_slices(unread)
        if self._blocked is not None and not self._blocked.done():
            self._blocked.cancel()
        if not self.extras.refused:
            self.node.client_disconnected(self)

    def data_received(self, data: bytes) -> None:
        if self.closed and self.extras.refused:
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
        # replies go straight to the output queue pub/sub messages go to, so
        # output leaves in command order (a message this connection publishes
        # to itself follows the replies before it, as in Redis); the queue is
        # still written once per loop turn. When it was empty, nothing is
        # scheduled before the batch ends (below)
        out = self._out
        deferred = not out
        execute = self.execute
        queued = 0
        # the loop turn's budget is shared by every read of this turn (libuv
        # may deliver several): flush(), at the end of the turn, resets it
        # commandstats usec: one clock read per batch, shared by the commands
        # that ran (router.stats.share_time), so runs of one command are counted
        start = perf_counter_ns()
        started = self._work_started
        if started is None:
            started = self._work_started = start
        elif start - started > _SLICE_NS:
            self._resume_later()  # a read after this turn's budget was spent
            return
        sliced = False
        done = 0
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
                    if not out and not deferred:
                        self.node.schedule_flush(self)
                    out.append(reply)
                    queued += len(reply)
                    if self._close_after_reply or self.closed:  # QUIT, or cut
                        break
                    done += 1  # the clock is read every 4th request (hot path)
                    if not done & 3 and perf_counter_ns() - started > _SLICE_NS:
                        sliced = True  # a long pipeline: the rest after the others
                        break
                    continue
                # blocked until the future resolves (subscribe visibility);
                # what follows stays buffered in the parser until then
                self._out_bytes += queued
                if last is not None:
                    runs.append((last, n))
                    share_time(runs, perf_counter_ns() - start)
                if deferred and out:
                    self.node.schedule_flush(self)
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
            if runs:
                runs.append((last, n))
                share_time(runs, perf_counter_ns() - start)
            else:  # one command in the batch (the usual case): all of the time is its
                last.nanoseconds += perf_counter_ns() - start
        # (an early flush in the batch, a message to this client over the
        # limit, reset the count: it may over-count, flushing early once more)
        self._out_bytes += queued
        if deferred and out:
            if done == 1 and started == start and not sliced:
                # one request, the first work of this turn (the unpipelined
                # client): written now, without an end-of-turn callback; the
                # turn's budget restarts, after one request's worth of work
                self.flush()
            else:
                self.node.schedule_flush(self)
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
        if self.transport is not None and not self.extras.slicing:
            self.extras.slicing = True
            self.node.stats.parse_slices += 1
            self.transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._next_slice)

    def _next_slice(self) -> None:
        self.extras.slicing = False
        self._work_started = None
        if self.closed:
            return
        self._process()
        if not self.extras.slicing and self._blocked is None and self.transport is not None:
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
        """Run one request under CLIENT REPLY OFF or SKIP, or after CLIENT
        CACHING (Redis's ``resetClient`` / ``prepareClientToWrite``): SKIP
        silences the next command's reply, OFF every reply until ON or RESET;
        pub/sub confirmations and messages are pushes and always go out. The
        CACHING flag is cleared once a command that is not a CLIENT command
        has run outside MULTI (an unknown command too)."""
        skip = self.reply_skip_next
        self.reply_skip_next = False
        reply = self.execute(args)
        if (skip or self.reply_off) and args[0].lower().decode(errors="replace") not in CONFIRMING:
            # a postponed command (CLIENT PAUSE) still holds what follows back
            reply = b"" if type(reply) is bytes else self.node.after(cast(_Waited, reply), b"")
        after_command(self)
        self.update_quiet()
        return reply

    def update_quiet(self) -> None:
        """Requests take :meth:`execute_quietly` while CLIENT REPLY OFF / SKIP
        or a CLIENT CACHING flag is on."""
        caching = self.extras.tracking is not None and self.extras.tracking.caching
        self.quiet = self.reply_off or self.reply_skip_next or caching

    def execute(self, args: list[bytes]) -> Reply:
        """Run one request; returns reply bytes or a future of them, checked
        in Redis's ``processCommand`` order (module doc); a rejection in MULTI
        aborts the transaction (``flagTransaction``), CROSSSLOT of EXEC discards it."""
        node = self.node
        top = LOOKUP.get(args[0]) or COMMANDS.get(args[0].lower())
        if top is None:
            found = elsewhere(self, args, resp.unknown_command_text(args))
            if isinstance(found, bytes):
                return found
            top = found
        cmd = top
        argc = len(args)
        if cmd.subcommands is not None and argc >= 2:
            sub = cmd.subcommands.get(args[1].lower())
            if sub is None:
                shown = resp.c_string(args[1][:128])
                text = f"ERR unknown subcommand '{shown}'. Try {cmd.name.upper()} HELP."
                found = elsewhere(self, args, text)
                if isinstance(found, bytes):
                    return found
                top = sub = found
            cmd = sub
        self.last_command = cmd.name
        arity = cmd.arity
        if argc != arity and (arity > 0 or argc < -arity):
            return self.reject(cmd, f"ERR wrong number of arguments for '{cmd.name}' command")
        if not self.authenticated and not cmd.no_auth and node.acl.default_requires_auth():
            return self.reject(cmd, "NOAUTH Authentication required.")
        user = self.user
        if not user.unrestricted and not cmd.no_auth:
            denial = node.acl.denied(user, cmd.name, args)
            if denial is not None:  # in MULTI: refused at queue time (EXECABORT)
                node.acl.add_log(*denial, user.name, info_line(self, args), acl_context(self))
                return self.reject(cmd, noperm_text(*denial))
        if cmd.slot_checked and node.cluster_enabled and cross_slot(cmd, args, self.multi):
            if cmd.name != "exec":
                return self.reject(cmd, CROSSSLOT)
            node.stats.command_stat("exec").rejected_calls += 1
            self.multi = None  # Redis discards the transaction, then redirects
            return resp.error(CROSSSLOT)
        if (
            self.resp == 2
            and (self.channels or self.patterns or self.shard_channels)
            and top.name not in SUBSCRIBED_ALLOWED
        ):
            return self.reject(cmd, context_error(cmd.name))
        if node.pause.level and node.pause.holds(self, cmd):
            return node.pause.postpone(self, args)
        if self.multi is not None and top.name not in _MULTI_IMMEDIATE:
            if not self.multi.dirty:  # an aborted transaction keeps nothing more
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

    def reject(self, cmd: Command | None, text: str) -> bytes:
        """A command refused before it ran (Redis ``rejectCommand``)."""
        if cmd is not None:
            self.node.stats.command_stat(cmd.name).rejected_calls += 1
        if cmd is not None and cmd.name == "exec":  # execCommandAbort, in MULTI or not
            self.multi = None
            text = "EXECABORT Transaction discarded because of: " + text.removeprefix("ERR ")
        elif self.multi is not None:
            self.multi.dirty = True
        return resp.error(text)

    def close_after_reply(self) -> None:
        """QUIT: write what is pending, then close."""
        self._close_after_reply = True

    @property
    def closing(self) -> bool:
        """Closed, or to be closed once what is queued is written."""
        return self.closed or self._close_after_reply

    def set_authenticated(self, value: bool) -> None:
        self.authenticated = value
        self.parser.authenticated = value


def _free_in_slices(items: list[bytes]) -> None:
    del items[-4096:]
    if items:
        asyncio.get_running_loop().call_soon(_free_in_slices, items)
