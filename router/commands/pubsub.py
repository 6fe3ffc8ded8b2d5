"""PUBSUB CHANNELS | NUMSUB | NUMPAT | SHARDCHANNELS | SHARDNUMSUB | HELP (this node only).

Redis's replies (``pubsubCommand``); the listings and the counts of many
names run under the node's shared per-loop-iteration budget (:mod:`router.pubsub`),
the client blocked while a big one goes on over several iterations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from router import resp
from router.budget import Work
from router.commands.base import Command, Reply, subcommand_table
from router.glob import Glob
from router.kinds import CHANNELS, SHARD_CHANNELS, Kind

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext, PubSubView

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


class _Channels(Work):
    """PUBSUB (SHARD)CHANNELS: the names as they were when the command ran
    (one copy of the table's keys, in C), matched and encoded in slices."""

    __slots__ = ("found", "glob", "names", "per_name")

    def __init__(
        self, pubsub: PubSubView, client: CommandClient, names: list[bytes], glob: Glob | None
    ) -> None:
        # a long pattern may cost more per name (bounded by its length)
        self.per_name = 1 if glob is None else 1 + len(glob.pattern) // 64
        super().__init__(pubsub.after, client, len(names) * self.per_name)
        names.reverse()
        self.names = names
        self.glob = glob
        self.found = 0

    def step(self, ops: int) -> int:
        take = max(1, ops // self.per_name)
        names = self.names  # reversed: the next ones at the end, each freed once done
        chunk = names[-take:][::-1]
        del names[-take:]
        if self.glob is not None:
            chunk = self.glob.filter(chunk)
        self.found += len(chunk)
        self.parts.append(b"".join([resp.bulk(name) for name in chunk]))
        if not self.names:
            self.parts.insert(0, resp.array_header(self.found))
            self.finish()
        return take * self.per_name


class _Numsub(Work):
    """PUBSUB (SHARD)NUMSUB: ``[name, count, ...]`` in slices."""

    __slots__ = ("kind", "names", "pubsub")

    def __init__(
        self, pubsub: PubSubView, client: CommandClient, kind: Kind, names: list[bytes]
    ) -> None:
        super().__init__(pubsub.after, client, len(names))
        self.pubsub = pubsub
        self.kind = kind
        names.reverse()  # taken with pop(): each name is freed once done
        self.names = names
        self.parts.append(resp.array_header(2 * len(names)))

    def step(self, ops: int) -> int:
        count = self.pubsub.count
        kind = self.kind
        names = self.names
        pop = names.pop
        out = []
        for _ in range(min(ops, len(names))):
            name = pop()
            out.append(resp.bulk(name) + resp.integer(count(kind, name)))
        self.parts.append(b"".join(out))
        if not names:
            self.finish()
        return ops


def _list(ctx: CommandContext, client: CommandClient, kind: Kind, args: list[bytes]) -> Reply:
    if len(args) > 3:
        sub = args[1].decode(errors="replace")
        return resp.error(
            f"ERR unknown subcommand or wrong number of arguments for '{sub}'. Try PUBSUB HELP."
        )
    glob = Glob(args[2]) if len(args) == 3 else None
    names = list(ctx.pubsub.tables[kind.slot])
    return ctx.subscriptions.run(_Channels(ctx.pubsub, client, names, glob))


def channels(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return _list(ctx, client, CHANNELS, args)


def shardchannels(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return _list(ctx, client, SHARD_CHANNELS, args)


def numsub(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return ctx.subscriptions.run(_Numsub(ctx.pubsub, client, CHANNELS, args[2:]))


def shardnumsub(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return ctx.subscriptions.run(_Numsub(ctx.pubsub, client, SHARD_CHANNELS, args[2:]))


def numpat(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.integer(len(ctx.pubsub.patterns))


def help_(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.array_header(len(_HELP)) + b"".join(resp.simple(line) for line in _HELP)


def _container(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
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
