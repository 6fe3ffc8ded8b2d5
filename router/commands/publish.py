"""PUBLISH and SPUBLISH: deliver locally, then let the ClusterLink forward.

The reply is the number of local receivers, as Redis Cluster replies (a
node cannot know the remote count without waiting).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router import resp
from router.commands.base import Command, Reply
from router.resp import SMALL_INTEGERS

if TYPE_CHECKING:
    from router.connection import Connection
    from router.context import CommandContext


def publish(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
    receivers = ctx.pubsub.publish(args[1], args[2], False)
    return SMALL_INTEGERS[receivers] if receivers < 1024 else resp.integer(receivers)


def spublish(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
    return resp.integer(ctx.pubsub.publish(args[1], args[2], shard=True))


COMMANDS = (
    Command("publish", 3, publish, "Posts a message to a channel.", flags=("pubsub", "fast")),
    Command("spublish", 3, spublish, "Post a message to a shard channel", flags=("pubsub", "fast")),
)
