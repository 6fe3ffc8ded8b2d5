"""Stand-ins for the router tests: a client as router.pubsub sees it, and a
ClusterLink that records what the node announces."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from cluster_bus.api import FilterChange, NoPeers


class FakeSubscriber:
    """Implements ``router.pubsub.Subscriber``: the client's own subscription
    sets, its protocol version, and a ``write`` that records what was sent.
    Hashed by identity, as the node's clients are."""

    def __init__(self, name: str, resp: int = 2) -> None:
        self.name = name
        self.channels: dict[bytes, None] = {}
        self.patterns: dict[bytes, None] = {}
        self.shard_channels: dict[bytes, None] = {}
        self.resp = resp
        self.closed = False
        self.extras = SimpleNamespace(in_exec=False)
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def __repr__(self) -> str:
        return f"FakeSubscriber({self.name!r})"


class RecordingLink(NoPeers):
    """A ClusterLink that records every ``filters_changed`` call and never waits."""

    def __init__(self) -> None:
        super().__init__("0" * 40, "127.0.0.1", 0)
        self.calls: list[list[FilterChange]] = []

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        self.calls.append(changes)
        return None
