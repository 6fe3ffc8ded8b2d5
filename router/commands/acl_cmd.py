"""ACL SETUSER | GETUSER | DELUSER | LIST | USERS | WHOAMI | CAT | LOG | LOAD |
SAVE as Redis 7.0.15 answers them (``aclCommand``, ``src/acl.c``); the rules
are :mod:`router.acl.user`'s, the users :mod:`router.acl.registry`'s.

SETUSER applies every rule to a copy and keeps it only if all are valid;
the existing user object is then updated in place, so connected clients see
the new rules at once. A change that takes channels away disconnects the
user's subscribed clients whose subscriptions are no longer allowed, and
DELUSER disconnects every client of the deleted user (Redis's
``ACLKillPubsubClientsIfNeeded`` / ``ACLFreeUserAndKillClients``).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from router import resp
from router.acl import AclError, User
from router.acl.aclfile import load_file, save_file
from router.acl.registry import revoked
from router.acl.user import (
    CATEGORIES,
    COMMAND_CATEGORIES,
    SUBCOMMANDS,
    describe,
    describe_channels,
    describe_commands,
    describe_keys,
    flags,
)
from router.commands.base import Command, Reply, subcommand_table
from router.resp import Set

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext


def setuser(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    name = args[2]
    if b" " in name or b"\x00" in name:
        return resp.error("ERR Usernames can't contain spaces or null characters")
    acl = ctx.acl
    existing = acl.users.get(name)
    temp = existing.copy() if existing is not None else User(name)
    for rule in args[3:]:
        try:
            temp.apply(rule)
        except AclError as exc:
            shown = rule.decode(errors="replace")
            return resp.error(f"ERR Error in ACL SETUSER modifier '{shown}': {exc}")
    if existing is None:
        acl.users[name] = temp
        acl.users = dict(sorted(acl.users.items()))
        return resp.OK
    before = existing.copy()
    existing.__dict__.update(temp.__dict__)
    if not existing.allchannels and (
        before.allchannels or not set(before.channels) <= set(existing.channels)
    ):
        for other in list(ctx.clients.values()):
            if other.user is existing and revoked(
                other.channels, other.patterns, other.shard_channels, existing
            ):
                other.kill()
    return resp.OK


def deluser(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if any(name == b"default" for name in args[2:]):
        return resp.error("ERR The 'default' user cannot be removed")
    deleted = 0
    for name in args[2:]:
        user = ctx.acl.users.pop(name, None)
        if user is not None:
            deleted += 1
            for other in list(ctx.clients.values()):
                if other.user is user:
                    other.kill()
    return resp.integer(deleted)


def getuser(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    user = ctx.acl.users.get(args[2])
    if user is None:
        return resp.encode_value(None, client.resp)
    fields: dict[str, Any] = {
        "flags": Set(flags(user)),
        "passwords": list(user.passwords),
        "commands": describe_commands(user).encode(),
        "keys": describe_keys(user).encode(errors="surrogateescape"),
        "channels": describe_channels(user, reset=False).encode(errors="surrogateescape"),
        "selectors": [],
    }
    return resp.encode_value(fields, client.resp)


def list_(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    lines = [describe(u).encode(errors="surrogateescape") for u in ctx.acl.users.values()]
    return resp.bulk_array(lines)


def users(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.bulk_array(list(ctx.acl.users))


def whoami(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.bulk(client.user.name)


def cat(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if len(args) > 3:
        return _syntax(args)
    if len(args) == 2:
        return resp.bulk_array([c.encode() for c in CATEGORIES])
    category = args[2].lower().decode(errors="replace")
    if category not in CATEGORIES:
        shown = resp.c_string(args[2][:128])
        return resp.error(f"ERR Unknown category '{shown}'")
    names = [n.encode() for n, cats in COMMAND_CATEGORIES.items() if category in cats]
    return resp.bulk_array(names)


def log(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    acl = ctx.acl
    count = 10
    if len(args) > 3:
        return _syntax(args)
    if len(args) == 3:
        if args[2].lower() == b"reset":
            acl.log.clear()
            return resp.OK
        from router.parser import string2ll

        parsed = string2ll(args[2])
        if parsed is None:
            return resp.error("ERR value is not an integer or out of range")
        count = max(parsed, 0)
    now = int(time.time() * 1000)
    entries = [
        {
            "count": e.count,
            "reason": e.reason,
            "context": e.context,
            "object": e.object,
            "username": e.username,
            "age-seconds": (now - e.ctime_ms) / 1000,
            "client-info": e.client_info,
        }
        for e in acl.log[:count]
    ]
    return resp.encode_value(entries, client.resp)


_HELP = (
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help.",
)


def help_(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.array_header(len(_HELP)) + b"".join(resp.simple(line) for line in _HELP)


def _syntax(args: list[bytes]) -> bytes:
    """Redis's addReplySubcommandSyntaxError."""
    shown = resp.c_string(args[1][:128])
    return resp.error(
        f"ERR unknown subcommand or wrong number of arguments for '{shown}'. Try ACL HELP."
    )


def genpass(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if len(args) > 3:
        return _syntax(args)
    bits = 256
    if len(args) == 3:
        from router.parser import string2ll

        parsed = string2ll(args[2])
        if parsed is None:
            return resp.error("ERR value is not an integer or out of range")
        bits = parsed
        if bits <= 0 or bits > 4096:
            return resp.error(
                "ERR ACL GENPASS argument must be the number of bits for the output "
                "password, a positive number up to 4096"
            )
    chars = (bits + 3) // 4
    return resp.bulk(os.urandom((chars + 1) // 2).hex()[:chars].encode())


def dryrun(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    user = ctx.acl.users.get(args[2])
    if user is None:
        return resp.error(f"ERR User '{args[2].decode(errors='replace')}' not found")
    name = args[3].lower().decode(errors="replace")
    if name in SUBCOMMANDS and len(args) > 4:
        sub = f"{name}|{args[4].lower().decode(errors='replace')}"
        name = sub if sub in COMMAND_CATEGORIES else name
    if name not in COMMAND_CATEGORIES:
        return resp.error(f"ERR Command '{args[3].decode(errors='replace')}' not found")
    top = ctx.commands.get(name.split("|")[0].encode())
    cmd = top
    if top is not None and top.subcommands and "|" in name:
        cmd = top.subcommands.get(name.split("|")[1].encode())
    argc = len(args) - 3
    if cmd is not None and (argc != cmd.arity if cmd.arity > 0 else argc < -cmd.arity):
        return resp.error(f"ERR wrong number of arguments for '{name}' command")
    denial = ctx.acl.denied(user, name, args[3:])
    if denial is None:
        return resp.OK
    reason, obj = denial
    if reason == "command":
        return resp.bulk(f"This user has no permissions to run the '{name}' command".encode())
    return resp.bulk(b"This user has no permissions to access the '" + obj + b"' channel")


_NO_FILE = (
    "ERR This Redis instance is not configured to use an ACL file. You may want to specify "
    "users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a "
    "Redis configuration file set) in order to store users in the Redis configuration."
)


def load(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    path = ctx.config.aclfile
    if not path:
        return resp.error(_NO_FILE)
    error = load_file(ctx, path)
    return resp.error(f"ERR {error}") if error else resp.OK


def save(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    path = ctx.config.aclfile
    if not path:
        return resp.error(_NO_FILE)
    try:
        save_file(ctx.acl, path)
    except OSError:
        return resp.error(
            "ERR There was an error trying to save the ACLs. Please check the server logs "
            "for more information"
        )
    return resp.OK


def _container(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    raise AssertionError("ACL always dispatches to a subcommand")  # arity -2


def _sub(name: str, arity: int, handler: Any) -> Command:
    return Command(f"acl|{name}", arity, handler, group="server")


COMMANDS = (
    Command(
        "acl",
        -2,
        _container,
        "A container for Access List Control commands.",
        group="server",
        subcommands=subcommand_table(
            _sub("setuser", -3, setuser),
            _sub("getuser", 3, getuser),
            _sub("deluser", -3, deluser),
            _sub("list", 2, list_),
            _sub("users", 2, users),
            _sub("whoami", 2, whoami),
            _sub("cat", -2, cat),
            _sub("log", -2, log),
            _sub("load", 2, load),
            _sub("save", 2, save),
            _sub("genpass", -2, genpass),
            _sub("dryrun", -4, dryrun),
            _sub("help", 2, help_),
        ),
    ),
)
