"""SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, SSUBSCRIBE, SUNSUBSCRIBE.

Redis semantics (``src/pubsub.c``): one confirmation per argument,
``[kind, name, count]``, where count is the client's channels + patterns
(shard channels are counted on their own); the bare unsubscribe forms walk all
of the client's subscriptions of that kind, or reply ``[kind, nil, count]``
when there are none. In RESP3 the confirmations are push frames.

Each change to the node's filters goes to the ClusterLink; under subscribe
visibility it returns futures, and the confirmations are sent only once every
live peer acknowledged the change (see :meth:`router.ctx.Node.filters_changed`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from cluster_bus.api import FilterChange
from router import resp
from router.commands.base import Command, Reply

if TYPE_CHECKING:
    from router.connection import Connection
    from router.context import CommandContext


#: names one (P|S)SUBSCRIBE handles per loop turn (~10 ms): a bigger one (100,000
#: channels) goes on over later turns with the client blocked, so other
#: clients are served meanwhile (Redis does it in one go, holding its loop);
#: messages to the names already subscribed wait behind the confirmations
SLICE_NAMES = 1024


def _subscribe(kind: str, shard: bool) -> Command:
    kind_b = kind.encode()

    def some(
        ctx: CommandContext, client: Connection, names: list[bytes]
    ) -> tuple[bytes, list[FilterChange]]:
        replies: list[bytes] = []
        changes: list[FilterChange] = []
        registry = ctx.pubsub.registry
        for name in names:
            if kind == "psubscribe":
                changes += registry.psubscribe(client, name)
            else:
                changes += registry.subscribe(client, name, shard)
            count = len(client.shard_channels) if shard else client.subscription_count()
            replies.append(resp.confirmation(kind_b, name, count, client.resp))
        return b"".join(replies), changes

    def handler(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
        in_exec = client.in_exec
        if shard and in_exec:
            # Redis 7.0 ssubscribeCommand: EXEC runs with CLIENT_DENY_BLOCKING,
            # and unlike SUBSCRIBE / PSUBSCRIBE it makes no exception for MULTI
            return resp.error("ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client")
        if len(args) - 1 > SLICE_NAMES and not in_exec:  # EXEC's commands never wait
            return _in_slices(ctx, client, args[1:], some)
        data, changes = some(ctx, client, args[1:])
        # one announcement for the whole command: one delta round, one wait
        fut = ctx.pubsub.filters_changed(changes)
        return data if fut is None or in_exec else ctx.pubsub.after(fut, data)

    summary = f"Listens for messages published to {kind} targets."
    return Command(kind, -2, handler, summary, slot_checked=shard)


def _unsubscribe(kind: str, shard: bool) -> Command:
    kind_b = kind.encode()

    def handler(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
        registry = ctx.pubsub.registry
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
        ctx.pubsub.filters_changed(changes)  # unsubscribes never wait
        return b"".join(replies)

    summary = f"Stops listening to {kind[2:] if shard else kind} targets."
    return Command(kind, -1, handler, summary, slot_checked=shard)


def _in_slices(
    ctx: CommandContext,
    client: Connection,
    names: list[bytes],
    some: Callable[[CommandContext, Connection, list[bytes]], tuple[bytes, list[FilterChange]]],
) -> asyncio.Future[bytes]:
    """Subscribe ``names`` SLICE_NAMES per loop turn; the future of all the
    confirmations (after every announced change's wait, if any)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bytes] = loop.create_future()
    parts: list[bytes] = []
    waits: list[asyncio.Future[None]] = []

    def step(start: int) -> None:
        if done.done() or client.closed:
            return
        data, changes = some(ctx, client, names[start : start + SLICE_NAMES])
        parts.append(data)
        fut = ctx.pubsub.filters_changed(changes)
        if fut is not None:
            waits.append(fut)
        if start + SLICE_NAMES < len(names):
            loop.call_soon(step, start + SLICE_NAMES)
            return
        reply = b"".join(parts)
        if not waits:
            done.set_result(reply)
            return
        gathered = cast("asyncio.Future[None]", asyncio.gather(*waits, return_exceptions=True))
        ctx.pubsub.after(gathered, reply).add_done_callback(finish)

    def finish(confirmed: asyncio.Future[bytes]) -> None:
        if not done.done():
            done.set_result(confirmed.result())

    step(0)
    return done


COMMANDS = (
    _subscribe("subscribe", False),
    _subscribe("psubscribe", False),
    _subscribe("ssubscribe", True),
    _unsubscribe("unsubscribe", False),
    _unsubscribe("punsubscribe", False),
    _unsubscribe("sunsubscribe", True),
)
