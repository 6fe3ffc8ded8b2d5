"""INFO, COMMAND (COUNT | DOCS | INFO | LIST), CLUSTER (INFO | MYID | NODES)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from router import resp
from router.commands.base import Command, Reply, subcommand_table

if TYPE_CHECKING:
    from router.client import Client
    from router.node import Node

_DEFAULT_SECTIONS = (
    "server",
    "clients",
    "stats",
    "filters",
    "traffic",
    "forwards_lost",
    "cluster",
)


def info(node: Node, client: Client, args: list[bytes]) -> Reply:
    sections = node.info_sections()
    wanted = [a.decode(errors="replace").lower() for a in args[1:]]
    if not wanted or any(w in ("all", "everything", "default") for w in wanted):
        wanted = list(_DEFAULT_SECTIONS)
    parts = []
    for name in wanted:
        fields = sections.get(name)
        if fields is None:
            continue
        lines = [f"# {name.capitalize()}"] + [f"{k}:{v}" for k, v in fields.items()]
        parts.append("\r\n".join(lines) + "\r\n")
    return resp.verbatim("\r\n".join(parts).encode(), client.resp)


def _table() -> dict[bytes, Command]:
    # imported late: this module is part of the table being built
    from router.commands import COMMANDS

    return COMMANDS


def _commands() -> list[Command]:
    return list(_table().values())


def command_all(node: Node, client: Client, args: list[bytes]) -> Reply:
    return resp.encode_value([c.info() for c in _commands()], client.resp)


def command_count(node: Node, client: Client, args: list[bytes]) -> Reply:
    return resp.integer(len(_commands()))


def command_list(node: Node, client: Client, args: list[bytes]) -> Reply:
    return resp.encode_value([c.name for c in _commands()], client.resp)


def command_info(node: Node, client: Client, args: list[bytes]) -> Reply:
    table = _table()
    names = args[2:]
    if not names:
        return command_all(node, client, args)
    out: list[Any] = []
    for name in names:
        cmd = table.get(name.lower())
        out.append(cmd.info() if cmd else None)
    return resp.encode_value(out, client.resp)


def command_docs(node: Node, client: Client, args: list[bytes]) -> Reply:
    table = _table()
    names = [n.lower() for n in args[2:]] or list(table)
    docs = {n.decode(): table[n].docs() for n in names if n in table}
    return resp.encode_value(docs, client.resp)


def _container(node: Node, client: Client, args: list[bytes]) -> Reply:
    return command_all(node, client, args)


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
