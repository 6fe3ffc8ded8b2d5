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

from router import resp
from router.cluster_link import FilterChange
from router.commands import Command, Reply

if TYPE_CHECKING:
    from router.client import Client
    from router.node import Node

_KINDS = {
    "subscribe": b"$9\r\nsubscribe\r\n",
    "unsubscribe": b"$11\r\nunsubscribe\r\n",
    "psubscribe": b"$10\r\npsubscribe\r\n",
    "punsubscribe": b"$12\r\npunsubscribe\r\n",
    "ssubscribe": b"$10\r\nssubscribe\r\n",
    "sunsubscribe": b"$12\r\nsunsubscribe\r\n",
}


def confirmation(client: Client, kind: str, name: bytes | None, count: int) -> bytes:
    head = resp.push_header(3, client.resp) + _KINDS[kind]
    target = resp.bulk(name) if name is not None else resp.null(client.resp)
    return head + target + resp.integer(count)


def _subscribe(kind: str, shard: bool) -> Command:
    def handler(node: Node, client: Client, args: list[bytes]) -> Reply:
        replies: list[bytes] = []
        changes: list[FilterChange] = []
        registry = node.registry
        for name in args[1:]:
            if kind == "psubscribe":
                changes += registry.psubscribe(client, name)
            else:
                changes += registry.subscribe(client, name, shard)
            count = len(client.shard_channels) if shard else client.subscription_count()
            replies.append(confirmation(client, kind, name, count))
        # one announcement for the whole command: one delta round, one wait
        fut = node.filters_changed(changes)
        data = b"".join(replies)
        return data if fut is None else node.after(fut, data)

    return Command(kind, -2, handler, f"Listens for messages published to {kind} targets.")


def _unsubscribe(kind: str, shard: bool) -> Command:
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
            replies.append(confirmation(client, kind, name, count))
        if not names:
            count = len(client.shard_channels) if shard else client.subscription_count()
            replies.append(confirmation(client, kind, None, count))
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
