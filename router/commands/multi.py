"""MULTI, EXEC, DISCARD, WATCH, UNWATCH (Redis 7.0 ``src/multi.c``).

MULTI starts queueing: every later command but EXEC, DISCARD, MULTI, WATCH,
QUIT and RESET is checked as usual and answered ``+QUEUED``
(:func:`router.dispatch.execute`); a command refused while queueing
(unknown, wrong arity, NOAUTH, ...) makes EXEC answer ``EXECABORT``. EXEC
answers an array with one reply per queued command, written as Redis writes
it: the header first, then each command's output, so what a command writes
besides its reply (the confirmations of a SUBSCRIBE, a message a PUBLISH
delivers to this very connection) sits inside the array where Redis puts it,
and the array's length counts commands, not frames. A SUBSCRIBE inside EXEC
never waits for subscribe visibility (Redis never blocks inside EXEC).

ACL: a queued command is checked when it is queued (NOPERM, then EXECABORT,
by :func:`router.dispatch.execute`) and again when EXEC runs it, since
the user's rules may have changed meanwhile: then it is not run and its reply
is Redis 7.0.15's NOPERM "ACLs rules changed ..." (logged in ACL LOG with
context ``multi``; counted in errorstats only, as Redis's ``execCommand``).

WATCH and UNWATCH answer as Redis does for keys that never change: a node
holds no keys, so no watched key is ever touched and EXEC always runs (Redis
touches a watched key on FLUSHALL / FLUSHDB only if it existed).
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import TYPE_CHECKING

from router import resp
from router.commands.base import CONFIRMING, Command, Reply, Transaction
from router.commands.client_view import info_line

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext


def multi(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if client.multi is not None:
        return resp.error("ERR MULTI calls can not be nested")
    client.begin_multi(Transaction())
    return resp.OK


def discard(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if client.multi is None:
        return resp.error("ERR DISCARD without MULTI")
    client.end_multi()
    return resp.OK


def exec_(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if client.multi is None:
        return resp.error("ERR EXEC without MULTI")
    if client.multi.dirty:
        client.end_multi()
        return resp.error("EXECABORT Transaction discarded because of previous errors.")
    # output the commands write while they run (a message to this client)
    # goes into the EXEC reply, after the replies before it, as in Redis
    parts: list[bytes] = []
    saved = client.swap_output(parts)
    queued = client.start_exec(saved)
    parts.append(resp.array_header(len(queued)))
    try:
        for cmd, argv in queued:
            mode = client.take_reply_mode()
            closing = client.closing  # CLIENT KILL of itself: no reply after its own
            denied = _acl_changed(ctx, client, cmd, argv)
            reply = denied or _call(ctx, client, cmd, argv)
            assert isinstance(reply, bytes), "commands in EXEC never wait"
            if reply[:1] == b"-":
                ctx.stats.error_replied(reply)
            if client.silenced(mode) and cmd.name.split("|")[0] not in CONFIRMING:
                continue
            if not closing:
                parts.append(reply)
    finally:
        client.end_exec()
        client.swap_output(saved)
        tracking = client.extras.tracking
        if tracking is not None:  # Redis's resetClient after EXEC clears CACHING
            tracking.caching = False
            parts += tracking.after_exec  # a FLUSHALL's invalidation, after the reply
            tracking.after_exec.clear()
        client.update_quiet()
    return b"".join(parts)


def _acl_changed(
    ctx: CommandContext, client: CommandClient, cmd: Command, args: list[bytes]
) -> bytes:
    """EXEC's check of a queued command against the user's rules now: b"" if
    allowed, else Redis's error."""
    user = client.user
    if user.unrestricted:
        return b""
    denial = ctx.acl.denied(user, cmd.name, args)
    if denial is None:
        return b""
    ctx.acl.add_log(*denial, user.name, info_line(client, args), "multi")
    reason = (
        "no permission to execute the command or subcommand"
        if denial[0] == "command"
        else "no permission to access one of the channels used as arguments"
    )
    return resp.error(
        "NOPERM ACLs rules changed between the moment the transaction was accumulated "
        f"and the EXEC call. This command is no longer allowed for the following reason: {reason}"
    )


def _call(ctx: CommandContext, client: CommandClient, cmd: Command, args: list[bytes]) -> Reply:
    """Run a queued command and count it (calls, time, failed calls), as the
    request loop does for the others (:func:`router.dispatch.execute`)."""
    start = perf_counter_ns()
    # MONITOR, SLOWLOG, LATENCY see it as Redis's call() does (router.hooks)
    reply = ctx.hooks.call(ctx, client, cmd, args) if ctx.watch else cmd.handler(ctx, client, args)
    stats = ctx.stats
    stats.commands_processed += 1
    stat = stats.commands[cmd.name]
    stat.calls += 1
    stat.timed(perf_counter_ns() - start, 1)
    if type(reply) is bytes and reply[:1] == b"-":
        stat.failed_calls += 1
    return reply


def watch(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if client.multi is not None:
        return resp.error("ERR WATCH inside MULTI is not allowed")
    return resp.OK


def unwatch(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.OK


COMMANDS = (
    Command("multi", 1, multi, "Starts a transaction.", "transactions"),
    Command(
        "exec",
        1,
        exec_,
        "Executes all commands in a transaction.",
        "transactions",
        slot_checked=True,
    ),
    Command("discard", 1, discard, "Discards a transaction.", "transactions"),
    Command("watch", -2, watch, "Monitors changes to keys.", "transactions"),
    Command("unwatch", 1, unwatch, "Forgets about watched keys.", "transactions"),
)
