"""PUBLISH and SPUBLISH: deliver locally, then let the ClusterLink forward.

The reply is the number of local receivers, as Redis Cluster replies (a
node cannot know the remote count without waiting). A PUBLISH that takes the
loop turn's queued messages past ``FANOUT_BYTES_PER_TURN`` answers on the
next turn, so a pipeline of big messages to many subscribers is written a
turn at a time (Redis bounds each client's writes per turn instead).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router import resp
from router.commands.base import Command, Reply
from router.kinds import CHANNELS, SHARD_CHANNELS
from router.pubsub import FANOUT_BYTES_PER_TURN
from router.resp import SMALL_INTEGERS

if TYPE_CHECKING:
    from router.connection import Connection
    from router.context import CommandContext


def publish(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
    pubsub = ctx.pubsub
    receivers = pubsub.publish(args[1], args[2], CHANNELS)
    reply = SMALL_INTEGERS[receivers] if receivers < 1024 else resp.integer(receivers)
    if pubsub.node.turn_output > FANOUT_BYTES_PER_TURN and not client.in_exec:
        return pubsub.after_turn(reply)  # the rest of its pipeline next turn
    return reply


def spublish(ctx: CommandContext, client: Connection, args: list[bytes]) -> Reply:
    pubsub = ctx.pubsub
    reply = resp.integer(pubsub.publish(args[1], args[2], SHARD_CHANNELS))
    if pubsub.node.turn_output > FANOUT_BYTES_PER_TURN and not client.in_exec:
        return pubsub.after_turn(reply)
    return reply


COMMANDS = (
    Command("publish", 3, publish, "Posts a message to a channel.", flags=("pubsub", "fast")),
    Command("spublish", 3, spublish, "Post a message to a shard channel", flags=("pubsub", "fast")),
)
