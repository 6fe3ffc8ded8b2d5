"""A client as router.registry sees it, for the registry and pattern-index tests."""

from __future__ import annotations


class FakeSubscriber:
    """Implements ``router.registry.Subscriber``: the client's own subscription
    sets, its protocol version, and a ``write`` that records what was sent.
    Hashed by identity, as the node's clients are."""

    def __init__(self, name: str, resp: int = 2) -> None:
        self.name = name
        self.channels: set[bytes] = set()
        self.patterns: set[bytes] = set()
        self.shard_channels: set[bytes] = set()
        self.resp = resp
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def __repr__(self) -> str:
        return f"FakeSubscriber({self.name!r})"
