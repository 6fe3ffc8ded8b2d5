"""INFO, COMMAND (COUNT | DOCS | INFO | LIST), CLUSTER (INFO | MYID | NODES)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from router import resp
from router.commands.base import Command, Reply, subcommand_table

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext

#: Redis 7's default sections in its order, then bloomcast's
_DEFAULT_SECTIONS = (
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "errorstats",
    "cluster",
    "keyspace",
    "filters",
    "forwards_lost",
    "traffic",
)
_ALL_SECTIONS = (
    *_DEFAULT_SECTIONS[: _DEFAULT_SECTIONS.index("errorstats")],
    "commandstats",
    *_DEFAULT_SECTIONS[_DEFAULT_SECTIONS.index("errorstats") :],
)


def info(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """INFO [section ...]: ``default`` (or none) = Redis's default sections and
    bloomcast's; ``all`` / ``everything`` add ``commandstats`` where Redis
    puts it (Redis 7.0 ``genRedisInfoString``)."""
    sections = ctx.view.info_sections()
    wanted: list[str] = []
    for arg in args[1:] or [b"default"]:
        name = arg.decode(errors="replace").lower()
        if name == "default":
            wanted += _DEFAULT_SECTIONS
        elif name in ("all", "everything"):
            wanted += _ALL_SECTIONS
        else:
            wanted.append(name)
    parts = []
    for name in dict.fromkeys(wanted):  # each once, in the order asked
        fields = sections.get(name)
        if fields is None:
            continue
        title = "CPU" if name == "cpu" else name.capitalize()
        lines = [f"# {title}"] + [f"{k}:{v}" for k, v in fields.items()]
        parts.append("\r\n".join(lines) + "\r\n")
    return resp.verbatim("\r\n".join(parts).encode(), client.resp)


def _table(ctx: CommandContext) -> dict[bytes, Command]:
    """The node's command table (this module is part of it: the node hands
    it over in its context)."""
    table: dict[bytes, Command] = ctx.commands
    return table


def _commands(ctx: CommandContext) -> list[Command]:
    return list(_table(ctx).values())


def command_all(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.encode_value([c.info() for c in _commands(ctx)], client.resp)


def command_count(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.integer(len(_commands(ctx)))


def command_list(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.encode_value([c.name for c in _commands(ctx)], client.resp)


def lookup(ctx: CommandContext, name: bytes) -> Command | None:
    """Redis ``lookupCommandBySds``: ``name`` or ``container|subcommand``,
    any case; None for anything else."""
    parts = name.lower().split(b"|")
    cmd = _table(ctx).get(parts[0])
    if cmd is None or len(parts) == 1:
        return cmd
    if len(parts) > 2 or cmd.subcommands is None:
        return None
    return cmd.subcommands.get(parts[1])


def command_info(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    names = args[2:]
    if not names:
        return command_all(ctx, client, args)
    out: list[Any] = []
    for name in names:
        cmd = lookup(ctx, name)
        out.append(cmd.info() if cmd else None)
    return resp.encode_value(out, client.resp)


def command_docs(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """A map of full name -> docs, one entry per name given (a repeated name
    repeated), unknown names left out (Redis 7.0 ``commandDocsCommand``)."""
    found = [lookup(ctx, n) for n in args[2:]] if len(args) > 2 else _commands(ctx)
    cmds = [c for c in found if c is not None]
    return resp.map_header(len(cmds), client.resp) + b"".join(
        resp.bulk(c.name.encode()) + resp.encode_value(c.docs(), client.resp) for c in cmds
    )


def _container(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return command_all(ctx, client, args)


COMMANDS = (
    Command("info", -1, info, "Returns information and statistics about the server.", "server"),
    Command(
        "command",
        -1,
        _container,
        "Returns detailed information about all commands.",
        "server",
        subcommands=subcommand_table(
            Command("command|count", 2, command_count, "Returns a count of commands.", "server"),
            Command(
                "command|docs",
                -2,
                command_docs,
                "Returns documentary information about commands.",
                "server",
            ),
            Command(
                "command|info", -2, command_info, "Returns information about commands.", "server"
            ),
            Command("command|list", -2, command_list, "Returns a list of command names.", "server"),
        ),
    ),
)
