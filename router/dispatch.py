"""The request loop of a connection (:func:`process`, Redis's
``processInputBuffer``; :func:`resume` and :func:`unblock` go on with it) and
the run of one request (:func:`execute`), its checks in Redis 7.0.15's
``processCommand`` order: unknown command, arity, authentication, ACL,
CROSSSLOT (a cluster node), the subscribed context (RESP2 only; commands the
node lacks too: :mod:`router.command_checks`), CLIENT PAUSE
(:mod:`router.pause`), then queued if in MULTI
(:mod:`router.commands.multi`). A command that runs is counted for INFO
commandstats, its time read once per pipelined batch (:mod:`router.stats`);
MONITOR, the slow log and the latency monitor see it through
:mod:`router.hooks` (one branch per command when nothing watches: each
command timed alone through ``ctx.hooks`` when ``ctx.watch``, else a batch
over ``ctx.slow_ns`` handed over once).
CLIENT REPLY OFF / SKIP and CLIENT CACHING go through :func:`execute_quietly`.

PUBLISH, SPUBLISH and PING skip the command table's checks when the
connection passes every one of them (:func:`_open`: NORMAL, replies on,
authenticated as a user without restrictions, no CLIENT PAUSE): then they
run what their handlers run (PUBLISH and SPUBLISH: the one function
:meth:`router.pubsub.PubSub.publish_command`; PING: a PONG), counted as
:func:`execute` counts them (``tests/router/test_output_owner.py`` holds the
two paths' replies, counts and output equal).

The loop queues replies only through the connection, which owns its output
(:meth:`router.connection.Connection.begin_batch`, ``add_reply``,
``end_batch``).

The loop drives a :class:`router.connection.Connection` (the state machine,
which knows nothing of commands) and changes its state only through its
methods. Compiled on the compiled data plane (``router._dispatch``,
declared in ``router/_dispatch.pxd``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

import cython

from router import client_log, parser, resp
from router.acl.registry import noperm_text
from router.command_checks import (
    CROSSSLOT,
    SUBSCRIBED_ALLOWED,
    context_error,
    cross_slot,
    elsewhere,
    reject,
)
from router.commands import COMMANDS, LOOKUP
from router.commands.base import CONFIRMING, Command, Transaction
from router.commands.client_view import acl_context, info_line
from router.commands.tracking import after_command
from router.resp import PONG
from router.states import (
    BLOCKED,
    CLOSED,
    CLOSING,
    DONE,
    IN_MULTI,
    NORMAL,
    SLICE,
    SUBSCRIBED,
    Action,
)

#: router.connection.PREAUTH_OUTPUT_LIMIT (its flush cuts a client past it
#: before AUTH); the request loop stops reading such a client there
PREAUTH_OUTPUT = 16 * 1024

if not cython.compiled:  # (compiled: router/_dispatch.pxd cimports or defines them)
    from time import perf_counter_ns

    from router.stats import share_time

    def _is_error(reply: bytes) -> bool:
        """Whether ``reply`` is an error (compiled: one byte read in C)."""
        return reply.startswith(b"-")


if TYPE_CHECKING:
    from router.commands.base import Reply
if not cython.compiled and TYPE_CHECKING:  # (compiled: the .pxd cimports them)
    from router.connection import Connection
    from router.context import CommandContext
    from router.stats import CommandStat

#: what _in_line says a request is: the commands the loop runs without the
#: table's checks, and the names execute gives them
NOT_IN_LINE, IN_LINE_PUBLISH, IN_LINE_SPUBLISH, IN_LINE_PING = 0, 1, 2, 3
IN_LINE_NAMES = ("", "publish", "spublish", "ping")

# run at once inside MULTI, never queued (Redis ``processCommand``)
_MULTI_IMMEDIATE = frozenset({"exec", "discard", "multi", "watch", "quit", "reset"})
_QUEUED = b"+QUEUED\r\n"


def process(conn: Connection, data: bytes = b"", now: float = 0.0) -> Action:
    """``data`` read at ``now`` (monotonic seconds), if any, then the buffered
    requests run (Redis's ``readQueryFromClient`` + ``processInputBuffer``);
    returns what the event loop must do (:class:`router.states.Action`). One
    call per read (:class:`router.client.Client`)."""
    state = conn.state
    ctx = conn.ctx
    stats = ctx.stats
    if data:
        if state is CLOSED:
            return DONE  # protected mode's refusal, or cut: nothing it sends is read
        stats.net_input_bytes += len(data)
        conn.parser.feed(data)
        conn.last_interaction = now
        if state is BLOCKED:
            return DONE  # buffered until the awaited reply is written
    if state is CLOSING:
        return DONE  # QUIT or a protocol error ended this connection: read no more
    slice_ns = ctx.slice_ns
    # the loop turn's budget is shared by every read of this turn (libuv
    # may deliver several): flush(), at the end of the turn, resets it
    # commandstats usec: one clock read per batch, shared by the commands
    # that ran (router.stats.share_time), so runs of one command are counted
    start = perf_counter_ns()
    started = conn.work_started
    if not started:
        started = conn.work_started = start
    elif start - started > slice_ns:
        stats.parse_slices += 1
        return SLICE  # a read after this turn's budget was spent
    # replies go to the output queue pub/sub messages go to, so output
    # leaves in command order (a message this connection publishes to
    # itself follows the replies before it, as in Redis); the queue is
    # still written once per loop turn. When it was empty, nothing is
    # scheduled before the batch ends (Connection.end_batch)
    conn.begin_batch()
    sliced = False
    done = 0
    runs: list[tuple[CommandStat, int]] | None = None  # made when a second command's run begins
    last: CommandStat | None = None
    last_kind = NOT_IN_LINE  # the command in line that ran last, whose stat ``last`` is
    n = 0
    pubsub = ctx.pubsub
    fast = _open(conn, ctx)
    # the replies held behind a (P|S)SUBSCRIBE's confirmation that awaits the
    # peers' ACK (subscribe visibility): its work is done, so the pipeline's
    # next (P|S)(UN)SUBSCRIBEs run now, their filter changes in the same
    # loop turn's batch (one delta per filter and one ACK round per peer,
    # issue 48), their replies after it, all written once the waits end
    held: list[Reply] | None = None
    try:
        for args in conn.parser.requests():
            if held is not None and not _confirms(args):
                conn.parser.unread(args)  # runs once the held replies are written
                break
            ran: CommandStat | None = None
            reply: Reply
            kind = _in_line(conn, args) if fast else NOT_IN_LINE
            if kind != NOT_IN_LINE:
                # what execute does for them, when _open says it may skip its checks
                name = IN_LINE_NAMES[kind]
                conn.last_command = name
                if kind == IN_LINE_PING:
                    reply = PONG if len(args) == 1 else resp.bulk(args[1])
                else:  # the function PUBLISH's and SPUBLISH's handlers call
                    reply = pubsub.publish_command(conn, args, kind == IN_LINE_SPUBLISH)
                stats.commands_processed += 1
                # (a run of one command looks its stat up once: only a command
                # through execute may replace the table, CONFIG RESETSTAT)
                ran = last if kind == last_kind and last is not None else stats.commands[name]
                last_kind = kind
                ran.calls += 1
            else:
                last_kind = NOT_IN_LINE
                reply = execute_quietly(conn, args) if conn.quiet else execute(conn, args)
                ran = conn.ran
                conn.ran = None
                fast = _open(conn, ctx)  # (a command may have changed any of it)
            if ran is not None:
                if ran is last:
                    n += 1
                else:
                    if last is not None:
                        if runs is None:
                            runs = []
                        runs.append((last, n))
                    last = ran
                    n = 1
            if type(reply) is bytes:
                data = reply
                if _is_error(data):
                    stats.error_replied(data)
                    if ran is not None:
                        ran.failed_calls += 1
                if held is None:
                    conn.add_reply(data)
                else:
                    held.append(data)
                if conn.closed or conn.state is CLOSING:  # QUIT, or cut
                    break
                done += 1  # the clock is read every 4th request (hot path)
                if not done & 3 and perf_counter_ns() - started > slice_ns:
                    if conn.authenticated:
                        sliced = True  # a long pipeline: the rest after the others
                        break
                    # before AUTH, no slice: a flush between slices would send
                    # replies Redis never sends (it cuts the client whose
                    # pre-AUTH output passes the limit, its input unread): the
                    # read goes on until that limit, which bounds it
                    if conn.output_buffer_size() > PREAUTH_OUTPUT:
                        break
                continue
            if held is None:
                held = [reply]
            else:
                held.append(reply)
            if reply is ctx.subscriptions.confirming:
                continue  # only the peers' ACK awaited: the next ones join its batch
            break  # blocked until the future resolves; what follows stays buffered
    except parser.ProtocolError as exc:
        if held is not None:
            # answered after the held replies: the parser raises it again
            return _block(conn, held, runs, last, n, start)
        error = resp.error(str(exc))
        client_log.protocol_error(conn, str(exc))
        stats.error_replied(error)
        conn.write(error)
        conn.close_after_reply()
    if held is not None:
        return _block(conn, held, runs, last, n, start)
    if last is not None:
        elapsed = perf_counter_ns() - start
        if runs is not None:
            runs.append((last, n))
            share_time(runs, elapsed)
        else:  # one command in the batch (the usual case): all of the time is its
            last.timed(elapsed, n)
        if elapsed > ctx.slow_ns and ran is not None and not ctx.watch:
            # over a slow log / latency threshold, no command timed alone
            # (router.hooks): the batch's last request, with the batch's time
            ctx.hooks.slow_batch(ctx, conn, args, elapsed, done)
    # one request, the first work of this turn (the unpipelined client):
    # written now, without an end-of-turn callback; the turn's budget
    # restarts, after one request's worth of work
    conn.end_batch(done == 1 and started == start and not sliced)
    state = conn.state
    if state is CLOSING:
        conn.flush()
        conn.transport.close()
        return DONE
    if (sliced or conn.parser.backlog) and state is not CLOSED:
        # a huge request is still being parsed, or a pipeline ran past
        # SLICE_SECONDS: let the other clients run before the next slice
        stats.parse_slices += 1
        return SLICE
    return DONE


def _block(
    conn: Connection,
    held: list[Reply],
    runs: list[tuple[CommandStat, int]] | None,
    last: CommandStat | None,
    n: int,
    start: int,
) -> Action:
    """The batch ends blocked on ``held``, its replies from the first that
    waits on (a future each, or bytes), written in order once every future
    is done; later requests stay buffered until then."""
    if last is not None:
        if runs is None:
            runs = []
        runs.append((last, n))
        share_time(runs, perf_counter_ns() - start)
    conn.end_batch(False)
    if len(held) == 1:
        return conn.block(cast("asyncio.Future[bytes]", held[0]))
    return conn.block(conn.ctx.subscriptions.after_all(held))


def _confirms(args: list[bytes]) -> bool:
    """Whether a request is a (P|S)(UN)SUBSCRIBE (any case), which may run
    while the replies before it wait for subscribe visibility."""
    return args[0].lower() in _CONFIRMING


_CONFIRMING = frozenset(
    (b"subscribe", b"unsubscribe", b"psubscribe", b"punsubscribe", b"ssubscribe", b"sunsubscribe")
)


def _in_line(conn: Connection, args: list[bytes]) -> int:
    """Which of PUBLISH, SPUBLISH (three arguments) and PING (one or two) a
    request is, the name in lower or upper case as most clients send it, or
    :data:`NOT_IN_LINE`: the commands the loop may run without the table's
    lookup and checks (:func:`_open`). A RESP2 connection with a
    subscription PINGs through :func:`execute` (its reply is ``[pong, ...]``;
    such a connection is SUBSCRIBED, so this is the handler's own test)."""
    n = len(args)
    if n == 3:
        name = args[0]
        if name == b"PUBLISH" or name == b"publish":
            return IN_LINE_PUBLISH
        if name == b"SPUBLISH" or name == b"spublish":
            return IN_LINE_SPUBLISH
    elif n == 1 or n == 2:
        name = args[0]
        if name == b"PING" or name == b"ping":
            if conn.resp == 2 and (conn.channels or conn.patterns or conn.shard_channels):
                return NOT_IN_LINE
            return IN_LINE_PING
    return NOT_IN_LINE


def _open(conn: Connection, ctx: CommandContext) -> bool:
    """Whether PUBLISH, SPUBLISH and PING may skip :func:`execute`'s checks,
    which would all pass: the connection is NORMAL (not subscribed in RESP2, not in
    MULTI or EXEC, not blocked or closing), replies are on (no CLIENT REPLY
    OFF / SKIP or CACHING), it is authenticated as a user without
    restrictions (no ACL check), and no CLIENT PAUSE holds writes; and no
    MONITOR or low threshold times each command (``ctx.watch``,
    :mod:`router.hooks`). Their
    arity is checked by the caller; CROSSSLOT cannot refuse one channel."""
    return (
        conn.state is NORMAL
        and not ctx.watch
        and not conn.quiet
        and conn.authenticated
        and conn.user.unrestricted
        and not ctx.paused
    )


def resume(conn: Connection) -> Action:
    """The next loop turn after :data:`router.states.SLICE`: the turn's
    budget restarts, the buffered requests run on."""
    conn.work_started = 0
    if conn.state is CLOSED or conn.state is BLOCKED:
        return DONE
    return process(conn)


def unblock(conn: Connection) -> Action:
    """The awaited reply is ready (``conn.blocked`` is done): it is written
    with the messages held behind it, then the buffered requests run."""
    if not conn.finish_block():
        return DONE
    return process(conn)


def execute_quietly(conn: Connection, args: list[bytes]) -> Reply:
    """Run one request under CLIENT REPLY OFF or SKIP, or after CLIENT
    CACHING (Redis's ``resetClient`` / ``prepareClientToWrite``): SKIP
    silences the next command's reply, OFF every reply until ON or RESET;
    pub/sub confirmations and messages are pushes and always go out. The
    CACHING flag is cleared once a command that is not a CLIENT command
    has run outside MULTI (an unknown command too)."""
    mode = conn.take_reply_mode()
    reply = execute(conn, args)
    if conn.silenced(mode) and args[0].lower().decode(errors="replace") not in CONFIRMING:
        # a postponed command (CLIENT PAUSE) still holds what follows back
        if type(reply) is bytes:
            reply = b""
        else:
            reply = conn.ctx.pubsub.after(cast("asyncio.Future[None]", reply), b"")
    after_command(conn)
    conn.update_quiet()
    return reply


def execute_counted(conn: Connection, args: list[bytes]) -> Reply:
    """One request outside the request loop (a command CLIENT PAUSE
    postponed, run when the pause ends: :class:`router.pause.ClientPause`
    calls it), counted as the loop counts it."""
    start = perf_counter_ns()
    reply = execute(conn, args)
    ran, conn.ran = conn.ran, None
    if ran is not None:
        ran.timed(perf_counter_ns() - start, 1)
    if type(reply) is bytes and reply[:1] == b"-":
        conn.ctx.stats.error_replied(reply)
        if ran is not None:
            ran.failed_calls += 1
    return reply


def execute(conn: Connection, args: list[bytes]) -> Reply:
    """Run one request; returns reply bytes or a future of them, checked
    in Redis's ``processCommand`` order: unknown command, arity,
    authentication, ACL, CROSSSLOT (a cluster node), the subscribed
    context, CLIENT PAUSE, then queued in MULTI. A rejection in MULTI
    aborts the transaction (``flagTransaction``), CROSSSLOT of EXEC
    discards it."""
    ctx = conn.ctx
    top = LOOKUP.get(args[0]) or COMMANDS.get(args[0].lower())
    if top is None:
        found = elsewhere(conn, args, resp.unknown_command_text(args))
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
            found = elsewhere(conn, args, text)
            if isinstance(found, bytes):
                return found
            top = sub = found
        cmd = sub
    conn.last_command = cmd.name
    arity = cmd.arity
    if argc != arity and (arity > 0 or argc < -arity):
        return reject(conn, cmd, f"ERR wrong number of arguments for '{cmd.name}' command")
    if not conn.authenticated and not cmd.no_auth and ctx.acl.default_requires_auth():
        return reject(conn, cmd, "NOAUTH Authentication required.")
    if conn.multi is not None and cmd.no_multi:
        return reject(conn, cmd, "ERR Command not allowed inside a transaction")
    user = conn.user
    if not user.unrestricted and not cmd.no_auth:
        denial = ctx.acl.denied(user, cmd.name, args)
        if denial is not None:  # in MULTI: refused at queue time (EXECABORT)
            ctx.acl.add_log(*denial, user.name, info_line(conn, args), acl_context(conn))
            return reject(conn, cmd, noperm_text(*denial))
    if cmd.slot_checked and ctx.cluster_enabled and cross_slot(cmd, args, conn.multi):
        if cmd.name != "exec":
            return reject(conn, cmd, CROSSSLOT)
        ctx.stats.command_stat("exec").rejected_calls += 1
        conn.end_multi()  # Redis discards the transaction, then redirects
        return resp.error(CROSSSLOT)
    if conn.state is not NORMAL:
        held = _contextual(conn, top, cmd, args)
        if held is not None:
            return held
    elif ctx.pause.level and ctx.pause.holds(conn, cmd):
        return ctx.pause.postpone(conn, args)
    # MONITOR, SLOWLOG, LATENCY: the command timed alone (router.hooks)
    reply = ctx.hooks.call(ctx, conn, cmd, args) if ctx.watch else cmd.handler(ctx, conn, args)
    if cmd.settles:  # it may change the subscriptions, the protocol or MULTI
        conn.settle()
    # counted after it ran, as Redis's call() counts (so INFO does not
    # count itself and CONFIG RESETSTAT's call survives it); its time and
    # failure are added by the caller (_process: one clock read per batch)
    stats = ctx.stats
    stats.commands_processed += 1
    ran = conn.ran = stats.commands[cmd.name]
    ran.calls += 1
    return reply


def _contextual(conn: Connection, top: Command, cmd: Command, args: list[bytes]) -> Reply | None:
    """The checks of a connection not in NORMAL, in Redis's order: the
    subscribed context, CLIENT PAUSE, MULTI's queue; None: run it. A
    command CLIENT PAUSE postponed runs while the connection is BLOCKED
    (or CLOSING): it is checked as in the state it rests in."""
    state = conn.state
    if state is not SUBSCRIBED and state is not IN_MULTI:
        state = conn._rest()
    if state is SUBSCRIBED and top.name not in SUBSCRIBED_ALLOWED:
        return reject(conn, cmd, context_error(cmd.name))
    pause = conn.ctx.pause
    if pause.level and pause.holds(conn, cmd):
        return pause.postpone(conn, args)
    if state is IN_MULTI and top.name not in _MULTI_IMMEDIATE:
        multi = cast(Transaction, conn.multi)
        if not multi.dirty:  # an aborted transaction keeps nothing more
            multi.append((cmd, args))
        return _QUEUED
    return None
