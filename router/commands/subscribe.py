"""SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, SSUBSCRIBE, SUNSUBSCRIBE.

Redis semantics (``src/pubsub.c``), carried out by :mod:`router.pubsub`:
one confirmation per argument, ``[kind, name, count]``, where count is the
client's channels + patterns (shard channels are counted on their own); the
bare unsubscribe forms walk all of the client's subscriptions of that kind,
or reply ``[kind, nil, count]`` when there are none. In RESP3 the
confirmations are push frames.

Each handler names its kind (a :class:`router.pubsub.Kind` descriptor) and
hands its names over. Many names run under the node's shared per-loop-turn
budget, over several turns, the client blocked meanwhile (its replies leave
in order, its later commands wait; Redis does it in one go, holding its loop).
Each change to the node's filters goes to the ClusterLink; under subscribe
visibility the confirmations are sent only once every live peer acknowledged
it (see :meth:`router.node.Node.filters_changed`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router import resp
from router.commands.base import Command, Reply
from router.kinds import CHANNELS, PATTERNS, SHARD_CHANNELS, Kind

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext


def _subscribe(name: str, kind: Kind) -> Command:
    def handler(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
        if kind is SHARD_CHANNELS and client.in_exec:
            # Redis 7.0 ssubscribeCommand: EXEC runs with CLIENT_DENY_BLOCKING,
            # and unlike SUBSCRIBE / PSUBSCRIBE it makes no exception for MULTI
            return resp.error("ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client")
        return ctx.subscriptions.subscribe(kind, client, args[1:])

    summary = f"Listens for messages published to {name} targets."
    return Command(name, -2, handler, summary, slot_checked=kind is SHARD_CHANNELS)


def _unsubscribe(name: str, kind: Kind) -> Command:
    def handler(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
        return ctx.subscriptions.unsubscribe(kind, client, args[1:])

    target = name[2:] if kind is SHARD_CHANNELS else name
    summary = f"Stops listening to {target} targets."
    return Command(name, -1, handler, summary, slot_checked=kind is SHARD_CHANNELS)


COMMANDS = (
    _subscribe("subscribe", CHANNELS),
    _subscribe("psubscribe", PATTERNS),
    _subscribe("ssubscribe", SHARD_CHANNELS),
    _unsubscribe("unsubscribe", CHANNELS),
    _unsubscribe("punsubscribe", PATTERNS),
    _unsubscribe("sunsubscribe", SHARD_CHANNELS),
)
