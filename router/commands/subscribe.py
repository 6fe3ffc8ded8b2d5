"""SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, SSUBSCRIBE, SUNSUBSCRIBE.

Redis semantics (``src/pubsub.c``): one confirmation per argument,
``[kind, name, count]``, where count is the client's channels + patterns
(shard channels are counted on their own); the bare unsubscribe forms walk all
of the client's subscriptions of that kind, or reply ``[kind, nil, count]``
when there are none. In RESP3 the confirmations are push frames.

Each change to the node's filters goes to the ClusterLink; under subscribe
visibility it returns futures, and the confirmations are sent only once every
live peer acknowledged the change (see :meth:`router.node.Node.filters_changed`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster_bus.api import FilterChange
from router import resp
from router.commands.base import Command, Reply

if TYPE_CHECKING:
    from router.client import Client
    from router.node import Node


def _subscribe(kind: str, shard: bool) -> Command:
    kind_b = kind.encode()

    def handler(node: Node, client: Client, args: list[bytes]) -> Reply:
        if shard and client.extras.in_exec:
            # Redis 7.0 ssubscribeCommand: EXEC runs with CLIENT_DENY_BLOCKING,
            # and unlike SUBSCRIBE / PSUBSCRIBE it makes no exception for MULTI
            return resp.error("ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client")
        replies: list[bytes] = []
        changes: list[FilterChange] = []
        registry = node.registry
        for name in args[1:]:
            if kind == "psubscribe":
                changes += registry.psubscribe(client, name)
            else:
                changes += registry.subscribe(client, name, shard)
            count = len(client.shard_channels) if shard else client.subscription_count()
            replies.append(resp.confirmation(kind_b, name, count, client.resp))
        # one announcement for the whole command: one delta round, one wait
        fut = node.filters_changed(changes)
        data = b"".join(replies)
        return data if fut is None or client.extras.in_exec else node.after(fut, data)

    return Command(kind, -2, handler, f"Listens for messages published to {kind} targets.")


def _unsubscribe(kind: str, shard: bool) -> Command:
    kind_b = kind.encode()

    def handler(node: Node, client: Client, args: list[bytes]) -> Reply:
        registry = node.registry
        patterns = kind == "punsubscribe"
        if len(args) > 1:
            names = args[1:]
        elif patterns:
            names = list(client.patterns)
        else:
            names = list(client.shard_channels if shard else client.channels)
        replies: list[bytes] = []
        changes: list[FilterChange] = []
        for name in names:
            if patterns:
                changes += registry.punsubscribe(client, name)
            else:
                changes += registry.unsubscribe(client, name, shard)
            count = len(client.shard_channels) if shard else client.subscription_count()
            replies.append(resp.confirmation(kind_b, name, count, client.resp))
        if not names:
            count = len(client.shard_channels) if shard else client.subscription_count()
            replies.append(resp.confirmation(kind_b, None, count, client.resp))
        node.filters_changed(changes)  # unsubscribes never wait
        return b"".join(replies)

    return Command(kind, -1, handler, f"Stops listening to {kind[2:] if shard else kind} targets.")


COMMANDS = (
    _subscribe("subscribe", False),
    _subscribe("psubscribe", False),
    _subscribe("ssubscribe", True),
    _unsubscribe("unsubscribe", False),
    _unsubscribe("punsubscribe", False),
    _unsubscribe("sunsubscribe", True),
)
