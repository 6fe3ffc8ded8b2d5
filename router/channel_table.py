"""ChannelTable: channel name -> its subscriber (or set of subscribers),
split over :data:`SHARDS` dicts by the name's hash.

CPython grows a dict in one step (``dictresize``): every entry is inserted
again into a table twice the size, while the loop waits. One dict of a
million channels did it at 699,051 names in 44 ms, the longest wait any
client saw while 10,000 connections subscribed 100 channels each (issue 28's
hostile row; Redis rehashes incrementally, ``dictRehash``, and waited
18-24 ms). Split 64 ways, a resize moves 1/64 of the names: under 1 ms at a
million. A lookup pays the name's hash once more (bytes cache it, so it is
the same number reused) and one list index: about 45 ns.

The table itself (not its shards) is what :mod:`router.pubsub` holds;
:meth:`shard` is the dict a name lives in, for code that changes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from typing import Any

#: how many dicts a table is split over (a power of two)
SHARDS = 64
MASK = SHARDS - 1


class ChannelTable:
    """name (bytes) -> subscriber or set of subscribers (module doc)."""

    __slots__ = ("shards",)

    def __init__(self) -> None:
        self.shards: list[dict[bytes, Any]] = [{} for _ in range(SHARDS)]

    def shard(self, name: bytes) -> dict[bytes, Any]:
        """The dict ``name`` is (or would be) in."""
        return self.shards[hash(name) & MASK]

    def get(self, name: bytes) -> Any:
        return self.shards[hash(name) & MASK].get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.shards[hash(name) & MASK]

    def __len__(self) -> int:
        return sum(map(len, self.shards))

    def __bool__(self) -> bool:
        return any(self.shards)

    def __iter__(self) -> Iterator[bytes]:
        return chain.from_iterable(self.shards)

    def items(self) -> Iterator[tuple[bytes, Any]]:
        return chain.from_iterable(shard.items() for shard in self.shards)
