"""PUBLISH and SPUBLISH: deliver locally, then let the ClusterLink forward
(:meth:`router.pubsub.PubSub.publish_command`, the one function of both).

The reply is the number of local receivers, as Redis Cluster replies (a
node cannot know the remote count without waiting). A PUBLISH that takes the
loop turn's queued messages past the fan-out limit answers on the next turn,
so a pipeline of big messages to many subscribers is written a turn at a
time (Redis bounds each client's writes per turn instead). The request loop
calls ``publish_command`` itself when the connection passes every check
(:func:`router.dispatch.process`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router.commands.base import Command, Reply

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext


def publish(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return ctx.pubsub.publish_command(client, args, False)


def spublish(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return ctx.pubsub.publish_command(client, args, True)


COMMANDS = (
    Command("publish", 3, publish, "Posts a message to a channel.", flags=("pubsub", "fast")),
    Command("spublish", 3, spublish, "Post a message to a shard channel", flags=("pubsub", "fast")),
)
