"""CLIENT ID | SETNAME | GETNAME | SETINFO | LIST | INFO | REPLY | HELP, and the
table of CLIENT's subcommands (KILL, NO-EVICT, PAUSE, UNPAUSE are in
:mod:`router.commands.client_admin`; TRACKING, CACHING, GETREDIR,
TRACKINGINFO in :mod:`router.commands.tracking`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from router import resp
from router.commands import client_admin, tracking
from router.commands.base import Command, Reply, subcommand_table
from router.commands.client_view import CLIENT_TYPES, client_type, info_line
from router.commands.connection import valid_client_name
from router.parser import string2ll
from router.states import ReplyMode

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext


def client_id(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.integer(client.id)


def setname(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if not valid_client_name(args[2]):
        return resp.error("ERR Client names cannot contain spaces, newlines or special characters.")
    client.name = args[2]
    return resp.OK


def getname(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.bulk(client.name) if client.name else resp.null(client.resp)


def setinfo(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    attr = args[2].lower()
    if attr not in (b"lib-name", b"lib-ver"):
        return resp.error(f"ERR Unrecognized option '{resp.c_string(args[2])}'")
    if not all(33 <= c <= 126 for c in args[3]):
        return resp.error(
            f"ERR {attr.decode()} cannot contain spaces, newlines or special characters."
        )
    if attr == b"lib-name":
        client.extras.lib_name = args[3]
    else:
        client.extras.lib_ver = args[3]
    return resp.OK


def client_list(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """CLIENT LIST [TYPE type | ID id [id ...]] (Redis 7.0 clientCommand)."""
    listed: list[CommandClient]
    option = args[2].lower() if len(args) > 2 else b""
    if len(args) == 4 and option == b"type":
        kind = args[3].lower()
        if kind not in CLIENT_TYPES:
            return resp.error(f"ERR Unknown client type '{resp.c_string(args[3])}'")
        listed = [c for c in ctx.clients.values() if client_type(c) == kind]
    elif len(args) > 3 and option == b"id":
        listed = []
        for raw in args[3:]:  # in argument order, a repeated id repeated
            cid = string2ll(raw)
            if cid is None:
                return resp.error("ERR Invalid client ID")
            found = ctx.clients.get(cid)
            if found is not None:
                listed.append(found)
    elif len(args) != 2:
        return resp.error("ERR syntax error")
    else:
        listed = list(ctx.clients.values())
    text = "".join(info_line(c, args if c is client else None) + "\n" for c in listed)
    return resp.verbatim(text.encode(), client.resp)


def client_info(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.verbatim((info_line(client, args) + "\n").encode(), client.resp)


#: Redis 7.0.15's CLIENT HELP lines for the subcommands the node has, in its
#: order (not UNBLOCK: a node has no command that blocks), and SETINFO's lines
#: from Redis 7.2 (7.0 has no SETINFO)
_HELP = (
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CACHING (YES|NO)",
    "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    "GETREDIR",
    "    Return the client ID we are redirecting to when tracking is enabled.",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETINFO <option> <value>",
    "    Set client meta attr. Options are:",
    "    * LIB-NAME: the client lib name.",
    "    * LIB-VER: the client lib version.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    "         [OPTIN] [OPTOUT] [NOLOOP]",
    "    Control server assisted client side caching.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "HELP",
    "    Prints this help.",
)


def reply(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """CLIENT REPLY ON|OFF|SKIP (Redis's clientCommand): ON answers OK; OFF and
    SKIP answer nothing (their own reply is already silenced)."""
    mode = args[2].lower()
    if mode == b"on":
        client.set_reply_mode(ReplyMode.ON)
        return resp.OK
    if mode == b"off":
        client.set_reply_mode(ReplyMode.OFF)
        return b""
    if mode == b"skip":
        client.set_reply_mode(ReplyMode.SKIP)
        return b""
    return resp.error("ERR syntax error")


def help_(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.array_header(len(_HELP)) + b"".join(resp.simple(line) for line in _HELP)


def _container(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    raise AssertionError("CLIENT always dispatches to a subcommand")


COMMANDS = (
    Command(
        "client",
        -2,
        _container,
        "A container for client connection commands.",
        "connection",
        subcommands=subcommand_table(
            Command(
                "client|id",
                2,
                client_id,
                "Returns the unique client ID of the connection.",
                "connection",
            ),
            Command("client|setname", 3, setname, "Sets the connection name.", "connection"),
            Command(
                "client|getname", 2, getname, "Returns the name of the connection.", "connection"
            ),
            Command(
                "client|setinfo",
                4,
                setinfo,
                "Sets information specific to the client.",
                "connection",
            ),
            Command("client|list", -2, client_list, "Lists open connections.", "connection"),
            Command(
                "client|reply",
                3,
                reply,
                "Instructs the server whether to reply to commands.",
                "connection",
            ),
            Command(
                "client|info",
                2,
                client_info,
                "Returns information about the connection.",
                "connection",
            ),
            Command(
                "client|kill", -3, client_admin.kill, "Terminates open connections.", "connection"
            ),
            Command(
                "client|no-evict",
                3,
                client_admin.no_evict,
                "Sets the client eviction mode of the connection.",
                "connection",
            ),
            Command(
                "client|pause",
                -3,
                client_admin.pause_,
                "Suspends commands processing.",
                "connection",
            ),
            Command(
                "client|unpause",
                2,
                client_admin.unpause,
                "Resumes processing commands from paused clients.",
                "connection",
            ),
            Command(
                "client|tracking",
                -3,
                tracking.tracking,
                "Controls server-assisted client-side caching for the connection.",
                "connection",
            ),
            Command(
                "client|caching",
                3,
                tracking.caching,
                "Instructs the server whether to track the keys in the next request.",
                "connection",
            ),
            Command(
                "client|getredir",
                2,
                tracking.getredir,
                "Returns the client ID to which the connection's tracking notifications "
                "are redirected.",
                "connection",
            ),
            Command(
                "client|trackinginfo",
                2,
                tracking.trackinginfo,
                "Returns information about server-assisted client-side caching for the connection.",
                "connection",
            ),
            Command(
                "client|help",
                2,
                help_,
                "Returns helpful text about the different subcommands.",
                "connection",
            ),
        ),
    ),
)
