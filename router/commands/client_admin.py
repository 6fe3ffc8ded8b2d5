"""CLIENT KILL | NO-EVICT | PAUSE | UNPAUSE (Redis 7.0 ``clientCommand``).

KILL has Redis's two forms: ``CLIENT KILL ip:port`` (OK, or "No such
client"; it may kill the caller) and the filter form ``CLIENT KILL <filter>
<value> ...`` with ID, ADDR, LADDR, TYPE, USER and SKIPME (the number killed;
the caller is skipped unless SKIPME no). Filters are parsed in order and the
first bad one answers its error. A killed connection is closed once its
pending output is written (the caller after this reply, like Redis's
``CLIENT_CLOSE_AFTER_REPLY``; others at once, like ``freeClientAsync``).
USER names an ACL user (:mod:`router.acl`; an unknown one: "No such user").

NO-EVICT is accepted and shown in CLIENT LIST (flag ``e``): a node never
evicts clients for memory (it has no ``maxmemory-clients``).
PAUSE / UNPAUSE: :mod:`router.pause`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from router import pause, resp
from router.commands.client_view import CLIENT_TYPES, client_type
from router.parser import string2ll

if TYPE_CHECKING:
    from router.acl.user import User
    from router.commands.base import Reply
    from router.context import CommandClient, CommandContext

_LONG_MAX = 2**63 - 1


def _kill(ctx: CommandContext, caller: CommandClient, victim: CommandClient) -> None:
    if victim is caller:
        caller.close_after_reply()
        return
    victim.close_now()


def kill(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if len(args) == 3:  # old form: CLIENT KILL ip:port
        for c in list(ctx.clients.values()):
            if c.addr.encode() == args[2] and not c.closed:
                _kill(ctx, client, c)
                return resp.OK
        return resp.error("ERR No such client")
    cid = 0
    kind: bytes | None = None
    addr = laddr = None
    user: User | None = None
    skipme = True
    i = 2
    while i < len(args):
        option = args[i].lower()
        if i + 1 >= len(args):
            return resp.error("ERR syntax error")
        value = args[i + 1]
        if option == b"id":
            parsed = string2ll(value)
            if parsed is None or not 1 <= parsed <= _LONG_MAX:
                return resp.error("ERR client-id should be greater than 0")
            cid = parsed
        elif option == b"type":
            kind = value.lower()
            if kind not in CLIENT_TYPES:
                return resp.error(f"ERR Unknown client type '{resp.c_string(value)}'")
        elif option == b"addr":
            addr = value
        elif option == b"laddr":
            laddr = value
        elif option == b"user":
            user = ctx.acl.users.get(value)
            if user is None:
                return resp.error(f"ERR No such user '{resp.c_string(value)}'")
        elif option == b"skipme":
            if value.lower() not in (b"yes", b"no"):
                return resp.error("ERR syntax error")
            skipme = value.lower() == b"yes"
        else:
            return resp.error("ERR syntax error")
        i += 2
    killed = 0
    for c in list(ctx.clients.values()):
        if c.closed:  # killed already, not yet gone (Redis: CLIENT_CLOSE_ASAP)
            continue
        if addr is not None and c.addr.encode() != addr:
            continue
        if laddr is not None and c.extras.laddr.encode() != laddr:
            continue
        if kind is not None and client_type(c) != kind:
            continue
        if cid and c.id != cid:
            continue
        if user is not None and c.user is not user:
            continue
        if c is client and skipme:
            continue
        _kill(ctx, client, c)
        killed += 1
    return resp.integer(killed)


def no_evict(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    mode = args[2].lower()
    if mode not in (b"on", b"off"):
        return resp.error("ERR syntax error")
    client.extras.no_evict = mode == b"on"
    return resp.OK


def pause_(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """CLIENT PAUSE timeout [WRITE|ALL] (Redis ``getTimeoutFromObjectOrReply``)."""
    ms = string2ll(args[2])
    if ms is None:
        return resp.error("ERR timeout is not an integer or out of range")
    if ms < 0:
        return resp.error("ERR timeout is negative")
    level = pause.ALL
    if len(args) == 4:
        mode = args[3].lower()
        if mode not in (b"write", b"all"):
            return resp.error("ERR CLIENT PAUSE mode must be WRITE or ALL")
        level = pause.WRITE if mode == b"write" else pause.ALL
    elif len(args) > 4:
        return resp.error(
            f"ERR unknown subcommand or wrong number of arguments for "
            f"'{resp.c_string(args[1])}'. Try CLIENT HELP."
        )
    # Redis adds the time now in ms to a positive timeout, and an end that
    # overflows (or 0) lies in the past: the pause is over at once
    if 0 < ms <= _LONG_MAX - int(time.time() * 1000):
        ctx.pause.pause(ms, level)
    return resp.OK


def unpause(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    ctx.pause.unpause()
    return resp.OK
