"""Kinds of subscription: Redis's ``pubsubtype`` as descriptors.

Redis 7.0.15 (``src/pubsub.c``) has one set of functions for channels and
shard channels, told apart by a ``pubsubType`` struct: which dict, which
reply names, which message, which count. :data:`CHANNELS` and
:data:`SHARD_CHANNELS` are those two; :data:`PATTERNS` is the third kind a
client holds (its own functions in Redis, the same shape here). Code that
handles subscriptions takes a :class:`Kind`, never a ``shard`` flag; the bus
seam keeps its flag (``cluster_bus.api``) and :func:`kind_of` maps it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from router import resp


class Subscriber(Protocol):
    """What subscriptions and delivery need of a client."""

    channels: dict[bytes, None]  # {name: None}: never tracked by the collector
    patterns: dict[bytes, None]
    shard_channels: dict[bytes, None]
    resp: int
    closed: bool

    def write(self, data: bytes) -> None: ...


def _channel_count(client: Subscriber) -> int:
    """Redis ``clientSubscriptionsCount``: channels + patterns."""
    return len(client.channels) + len(client.patterns)


def _shard_count(client: Subscriber) -> int:
    """Redis ``clientShardSubscriptionsCount``."""
    return len(client.shard_channels)


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of subscription (Redis's ``pubsubtype``)."""

    own: str  # the client's set of names of this kind
    subscribe: bytes  # reply names
    unsubscribe: bytes
    count: Callable[[Subscriber], int]  # the count in confirmations
    frame: Callable[[bytes, bytes], bytes]  # the message frame (RESP2)
    slot: int  # 0, 1: PubSub.tables; 2: the pattern index
    patterned: bool  # pattern subscribers receive its messages too
    shard: bool  # at the bus seam


CHANNELS = Kind(
    "channels", b"subscribe", b"unsubscribe", _channel_count, resp.message, 0, True, False
)
SHARD_CHANNELS = Kind(
    "shard_channels", b"ssubscribe", b"sunsubscribe", _shard_count, resp.smessage, 1, False, True
)
PATTERNS = Kind(
    "patterns", b"psubscribe", b"punsubscribe", _channel_count, resp.message, 2, False, False
)
#: what a gone (or RESET) client drops, in Redis's order (``pubsubUnsubscribeAll*``)
ALL_KINDS = (CHANNELS, SHARD_CHANNELS, PATTERNS)
#: a pattern's budget weight (its prefix, its filter entry, its Glob if any)
PATTERN_WEIGHT = 4


def weight(kind: Kind) -> int:
    """A name's cost in budget operations."""
    return PATTERN_WEIGHT if kind is PATTERNS else 1


#: the kind the bus seam's ``shard`` flag stands for, indexed by it (a
#: forwarded PUBLISH looks it up: cheaper than a call)
KIND_OF = (CHANNELS, SHARD_CHANNELS)


def kind_of(shard: bool) -> Kind:
    """The kind the bus seam's flag stands for."""
    return KIND_OF[shard]
