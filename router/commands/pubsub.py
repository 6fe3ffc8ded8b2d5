"""PUBSUB CHANNELS | NUMSUB | NUMPAT | SHARDCHANNELS | SHARDNUMSUB | HELP (this node only)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from router import resp
from router.commands.base import Command, Reply, subcommand_table
from router.glob import Glob

if TYPE_CHECKING:
    from router.connection import Connection
    from router.context import CommandContext

_HELP = (
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help.",  # Redis 7.0's addReplyHelp (Valkey says "Print")
)


def _list(table: Mapping[bytes, object], args: list[bytes], sub: str) -> bytes:
    if len(args) > 3:
        return resp.error(
            f"ERR unknown subcommand or wrong number of arguments for '{sub}'. Try PUBSUB HELP."
        )
    names = list(table)
    if len(args) == 3:
        names = Glob(args[2]).filter(names)
    return resp.bulk_array(names)


def _numsub(table: Mapping[bytes, Collection[object]], args: list[bytes]) -> bytes:
    out = [resp.array_header(2 * (len(args) - 2))]
    for name in args[2:]:
        out.append(resp.bulk(name) + resp.integer(len(table.get(name, ()))))
    return b"".join(out)


def channels(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
    return _list(ctx.pubsub.registry.channels, args, args[1].decode(errors="replace"))


def shardchannels(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
    return _list(ctx.pubsub.registry.shard_channels, args, args[1].decode(errors="replace"))


def numsub(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
    return _numsub(ctx.pubsub.registry.channels, args)


def shardnumsub(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
    return _numsub(ctx.pubsub.registry.shard_channels, args)


def numpat(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
    return resp.integer(len(ctx.pubsub.registry.patterns))


def help_(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
    return resp.array_header(len(_HELP)) + b"".join(resp.simple(line) for line in _HELP)


def _container(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
    raise AssertionError("PUBSUB always dispatches to a subcommand")  # arity -2


COMMANDS = (
    Command(
        "pubsub",
        -2,
        _container,
        "A container for Pub/Sub commands.",
        subcommands=subcommand_table(
            Command("pubsub|channels", -2, channels, "Returns the active channels."),
            Command("pubsub|numsub", -2, numsub, "Returns a count of subscribers to channels."),
            Command("pubsub|numpat", 2, numpat, "Returns a count of unique pattern subscriptions."),
            Command(
                "pubsub|shardchannels", -2, shardchannels, "Returns the active shard channels."
            ),
            Command(
                "pubsub|shardnumsub",
                -2,
                shardnumsub,
                "Returns the count of subscribers of shard channels.",
            ),
            Command(
                "pubsub|help", 2, help_, "Returns helpful text about the different subcommands."
            ),
        ),
    ),
)
