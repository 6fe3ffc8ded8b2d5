"""CLIENT TRACKING | CACHING | GETREDIR | TRACKINGINFO: client-side caching
as Redis 7.0.15 keeps it for a connection (``clientCommand`` in
``src/networking.c``, ``enableTracking`` / ``disableTracking`` /
``sendTrackingMessage`` in ``src/tracking.c``).

RESP3 caches (redis-py's, node-redis 5's ``clientSideCache``) switch
tracking on at connect. A node holds no keys, so no key is ever invalidated;
what a connection asked for is kept and shown as Redis shows it (GETREDIR,
TRACKINGINFO, CLIENT LIST's ``t`` / ``B`` / ``R`` flags and ``redir=``). The
one invalidation Redis sends without keys is FLUSHALL / FLUSHDB's "every key"
(a null, ``trackingInvalidateKeysOnFlush``): :func:`flush_invalidations`.

Redis's quirks are kept: options are checked in Redis's order; PREFIX
collisions are checked against the prefixes already held, then among the
new ones, and a collision found after the first new prefix answers its
error and still enables tracking (``checkPrefixCollisionsOrReply`` returns
the index, non-zero, as success), so two replies follow; a BCAST without
PREFIX adds the empty prefix; the CACHING flag lasts until a command that is
not a CLIENT command runs outside MULTI (``resetClient``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router import resp
from router.client_extras import Tracking
from router.commands.client_view import client_type
from router.parser import string2ll

if TYPE_CHECKING:
    from router.commands.base import Reply
    from router.context import CommandClient, CommandContext

_SYNTAX = resp.error("ERR syntax error")
_INVALIDATE = b"$10\r\ninvalidate\r\n"
#: a RESP2 redirect target that is subscribed gets it as a message on this channel
_INVALIDATE_MESSAGE = b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n"


def _overlap(a: bytes, b: bytes) -> bool:
    """Redis ``stringCheckPrefix``: one is a prefix of the other."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _collision(held: list[bytes], new: list[bytes]) -> tuple[bytes, int]:
    """Redis ``checkPrefixCollisionsOrReply``: (the error, or b"", and what
    Redis returns: 0 for a collision at the first new prefix, else non-zero)."""
    tail = "Prefixes for a single client must not overlap."
    for i, prefix in enumerate(new):
        for old in held:
            if _overlap(old, prefix):
                text = f"ERR Prefix '{resp.c_string(prefix)}' overlaps with an existing prefix"
                return resp.error(f"{text} '{resp.c_string(old)}'. {tail}"), 0
        for other in new[i + 1 :]:
            if _overlap(prefix, other):
                text = f"ERR Prefix '{resp.c_string(prefix)}' overlaps with another provided prefix"
                return resp.error(f"{text} '{resp.c_string(other)}'. {tail}"), i
    return b"", 1


def tracking(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """CLIENT TRACKING (ON|OFF) [REDIRECT id] [BCAST] [PREFIX p ...] [OPTIN]
    [OPTOUT] [NOLOOP]: every option read first, then ON's checks."""
    redirect = 0
    bcast = optin = optout = noloop = False
    prefixes: list[bytes] = []
    i = 3
    while i < len(args):
        option = args[i].lower()
        more = i + 1 < len(args)
        if option == b"redirect" and more:
            i += 1
            if redirect:
                return resp.error("ERR A client can only redirect to a single other client")
            parsed = string2ll(args[i])
            if parsed is None:
                return resp.error("ERR value is not an integer or out of range")
            redirect = parsed
            if redirect not in ctx.clients:
                return resp.error("ERR The client ID you want redirect to does not exist")
        elif option == b"bcast":
            bcast = True
        elif option == b"optin":
            optin = True
        elif option == b"optout":
            optout = True
        elif option == b"noloop":
            noloop = True
        elif option == b"prefix" and more:
            i += 1
            prefixes.append(args[i])
        else:
            return _SYNTAX
        i += 1
    mode = args[2].lower()
    if mode == b"off":
        client.extras.tracking = None
        client.update_quiet()
        return resp.OK
    if mode != b"on":
        return _SYNTAX
    state = client.extras.tracking
    if prefixes and not bcast:
        return resp.error("ERR PREFIX option requires BCAST mode to be enabled")
    if state is not None and state.bcast != bcast:
        return resp.error(
            "ERR You can't switch BCAST mode on/off before disabling tracking for this "
            "client, and then re-enabling it with a different mode."
        )
    if bcast and (optin or optout):
        return resp.error("ERR OPTIN and OPTOUT are not compatible with BCAST")
    if optin and optout:
        return resp.error("ERR You can't specify both OPTIN mode and OPTOUT mode")
    if state is not None and ((optin and state.optout) or (optout and state.optin)):
        return resp.error(
            "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this "
            "client, and then re-enabling it with a different mode."
        )
    error = b""
    if bcast:
        error, ok = _collision(state.prefixes if state is not None else [], prefixes)
        if not ok:
            return error
    if state is None:
        state = client.extras.tracking = Tracking()
    state.redirect = redirect
    state.bcast, state.optin, state.optout, state.noloop = bcast, optin, optout, noloop
    state.broken_redirect = False
    if bcast:
        held = set(state.prefixes)
        held.update(prefixes or [b""])
        state.prefixes = sorted(held)
    return error + resp.OK


def caching(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """CLIENT CACHING (YES|NO): the next command's keys are (not) tracked."""
    state = client.extras.tracking
    if state is None:
        return resp.error(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode "
            "with OPTIN or OPTOUT mode enabled"
        )
    answer = args[2].lower()
    if answer == b"yes":
        if not state.optin:
            return resp.error(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
            )
    elif answer == b"no":
        if not state.optout:
            return resp.error(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
            )
    else:
        return _SYNTAX
    state.caching = True
    client.update_quiet()  # the next command that is not CLIENT clears it
    return resp.OK


def after_command(client: CommandClient) -> None:
    """After a tracking client's command: the CACHING flag is cleared once a
    command that is not a CLIENT subcommand ran outside MULTI (an unknown
    command, or CLIENT alone, too: Redis's ``resetClient``)."""
    tracking = client.extras.tracking
    if tracking is not None and client.multi is None and client.last_command[:7] != "client|":
        tracking.caching = False


def getredir(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """CLIENT GETREDIR: the redirect id, 0 for none, -1 when not tracking."""
    state = client.extras.tracking
    return resp.integer(-1 if state is None else state.redirect)


def trackinginfo(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """CLIENT TRACKINGINFO: flags (a set), redirect, prefixes."""
    state = client.extras.tracking
    if state is None:
        info: dict[str, object] = {"flags": resp.Set(("off",)), "redirect": -1, "prefixes": []}
        return resp.encode_value(info, client.resp)
    flags = ["on"]
    if state.bcast:
        flags.append("bcast")
    if state.optin:
        flags += ["optin", "caching-yes"] if state.caching else ["optin"]
    if state.optout:
        flags += ["optout", "caching-no"] if state.caching else ["optout"]
    if state.noloop:
        flags.append("noloop")
    if state.broken_redirect:
        flags.append("broken_redirect")
    info = {"flags": resp.Set(flags), "redirect": state.redirect, "prefixes": state.prefixes}
    return resp.encode_value(info, client.resp)


def flush_invalidations(ctx: CommandContext, client: CommandClient) -> bytes:
    """FLUSHALL / FLUSHDB: every tracking client is told that every key is
    invalid (``trackingInvalidateKeysOnFlush``, a null in the client's own
    RESP). Other clients get it now; the caller's goes after its reply: it is
    returned, or kept for after EXEC's reply when the flush runs in one."""
    mine = b""
    for other in list(ctx.clients.values()):
        state = other.extras.tracking
        if state is None:
            continue
        frame = _invalidation(ctx, other, state)
        if other is not client:
            if frame:
                other.write(frame)
        elif other.in_exec:
            state.after_exec.append(frame)
        else:
            mine += frame
    return mine


def _invalidation(ctx: CommandContext, client: CommandClient, state: Tracking) -> bytes:
    """Redis ``sendTrackingMessage`` with the null of ``client``'s RESP:
    what to write to ``client`` (b"" when it goes elsewhere or nowhere)."""
    null = resp.null(client.resp)
    if not state.redirect:
        return b">2\r\n" + _INVALIDATE + null if client.resp == 3 else b""
    target = ctx.clients.get(state.redirect)
    if target is None or target.closed:
        state.broken_redirect = True
        if client.resp == 3:
            return b">2\r\n$21\r\ntracking-redir-broken\r\n" + resp.integer(state.redirect)
        return b""
    if target.resp == 3:
        frame = b">2\r\n" + _INVALIDATE + null
    elif client_type(target) == b"pubsub":
        frame = _INVALIDATE_MESSAGE + null
    else:
        return b""
    if target is client:
        return frame
    target.write(frame)
    return b""
