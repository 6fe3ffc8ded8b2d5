"""PUBLISH and SPUBLISH: deliver locally, then let the ClusterLink forward.

The reply is the number of local receivers, as Redis Cluster replies (a
node cannot know the remote count without waiting).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router import resp
from router.commands.base import Command, Reply
from router.pubsub import CHANNELS, SHARD_CHANNELS
from router.resp import SMALL_INTEGERS

if TYPE_CHECKING:
    from router.client import Client
    from router.node import Node


def publish(node: Node, client: Client, args: list[bytes]) -> Reply:
    receivers = node.publish(args[1], args[2], CHANNELS)
    return SMALL_INTEGERS[receivers] if receivers < 1024 else resp.integer(receivers)


def spublish(node: Node, client: Client, args: list[bytes]) -> Reply:
    return resp.integer(node.publish(args[1], args[2], SHARD_CHANNELS))


COMMANDS = (
    Command("publish", 3, publish, "Posts a message to a channel.", flags=("pubsub", "fast")),
    Command("spublish", 3, spublish, "Post a message to a shard channel", flags=("pubsub", "fast")),
)
