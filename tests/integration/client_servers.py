"""The servers the client-library tests (issue 27 item 7) run every client
against, and the one publishing round every client must receive.

Servers, all with a password on the default user and one ACL user:

- a 3-node bloomcast cluster (``--requirepass``, subscribe visibility on by default);
- the anchors: Debian's redis-server 7.0.15 standalone and a 3-master Redis
  Cluster of it (``bench/redis_cluster.py``), the password set with CONFIG SET
  once they are up (their launchers probe readiness with a bare PING).

Every port comes from :func:`bloomcast.testing.free_ports`, below the
kernel's ephemeral range, bus ports included.

The round (:func:`publish_round`): after the client under test has its
subscriptions confirmed, every node it is not connected to (standalone) or
every node (cluster) publishes all 256 byte values and a 1 MiB payload on a
channel (matched by a pattern too) and on a shard channel. A message is
compared as (kind, channel, pattern, length and SHA-256 of its payload).
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from bench import redis_cluster
from bloomcast.testing import REDIS, LocalCluster, redis_server_path, start_anchor

PASSWORD = "bc-pass-27"
USER = "client27"
USER_PASSWORD = "user-pass-27"
#: every key and channel, every command: what a pub/sub application user needs
USER_RULES = ("on", f">{USER_PASSWORD}", "~*", "&*", "+@all")
#: every byte value, and 1 MiB that no shifted copy of itself matches
ALL_BYTES = bytes(range(256))
BIG = random.Random(27).randbytes(1 << 20)
PAYLOADS = (ALL_BYTES, BIG)

#: (kind, channel, pattern or None, "length:sha256 prefix")
Record = tuple[str, bytes, bytes | None, str]


def digest(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return f"{len(raw)}:{hashlib.sha256(raw).hexdigest()[:16]}"


@dataclass(frozen=True)
class Names:
    """A channel, a pattern matching it and a shard channel (hash tag {27})."""

    channel: bytes
    pattern: bytes
    shard: bytes

    def received(self, channel: bytes, pattern: bytes | None, data: bytes | str) -> Record:
        """A message as a record, its kind told by what it matched (for clients
        that do not say whether a message came from SSUBSCRIBE)."""
        kind = "pmessage" if pattern else "smessage" if channel == self.shard else "message"
        return (kind, channel, pattern, digest(data))


#: not UTF-8, with NUL, CR LF and a space: for clients that take bytes
BINARY = Names(b"bin:\xff\x00\r\n chan", b"bin:\xff*", b"shard:\xfe\x00{27}")
#: UTF-8 (with NUL): for clients that take channel names as str only
TEXT = Names("bin:é\x00 chan".encode(), "bin:é*".encode(), "shard:é{27}".encode())


class AuthCluster(LocalCluster):
    """A :class:`LocalCluster` whose nodes require ``PASSWORD``; its own clients
    (readiness included) authenticate."""

    def client(self, i: int, **kwargs: Any) -> redis.Redis:
        kwargs.setdefault("password", PASSWORD)
        return super().client(i, **kwargs)


@dataclass
class Target:
    """A server (``bloomcast`` or ``redis``) in one mode: ``standalone`` (the
    client is given ``ports[0]``) or ``cluster`` (the client discovers the rest)."""

    server: str
    mode: str
    ports: list[int]
    owners: dict[int, int] = field(default_factory=dict)  # slot -> port (cluster anchor)

    @property
    def name(self) -> str:
        return f"{self.server} {self.mode}"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, password=PASSWORD, socket_timeout=10)

    @property
    def publish_ports(self) -> list[int]:
        """Where the round is published: every bloomcast node but the one a
        standalone client uses; every server of the anchor (one when standalone)."""
        if self.server == "bloomcast" and self.mode == "standalone":
            return self.ports[1:]
        return self.ports

    def spublish_refusals(self, shard: bytes) -> list[tuple[int, str]]:
        """The SPUBLISH errors the round must see: Redis Cluster's MOVED from
        every node but the slot's owner; none from bloomcast, whose nodes take
        any channel (README, "Redis Cluster clients")."""
        if self.server == "bloomcast" or self.mode == "standalone":
            return []
        with self.client(self.ports[0]) as r:
            slot = r.execute_command("CLUSTER", "KEYSLOT", shard)
            ranges = r.execute_command("CLUSTER", "SLOTS")
        owner = next(int(node[1]) for lo, hi, node, *_ in ranges if lo <= slot <= hi)
        return [(port, "MOVED") for port in self.publish_ports if port != owner for _ in PAYLOADS]


@dataclass
class Round:
    """What one round published: the records every subscriber must receive,
    and the SPUBLISH calls refused (port, error code)."""

    expected: list[Record] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)


def publish_round(target: Target, names: Names, sharded: bool) -> Round:
    """PUBLISH (and SPUBLISH when ``sharded``) both payloads on each of
    ``target.publish_ports`` with redis-py."""
    out = Round()
    for port in target.publish_ports:
        with target.client(port) as r:
            for data in PAYLOADS:
                r.publish(names.channel, data)
                out.expected.append(("message", names.channel, None, digest(data)))
                out.expected.append(("pmessage", names.channel, names.pattern, digest(data)))
                if not sharded:
                    continue
                try:
                    r.spublish(names.shard, data)
                except redis.exceptions.MovedError:
                    out.refused.append((port, "MOVED"))  # redis-py drops the word
                    continue
                out.expected.append(("smessage", names.shard, None, digest(data)))
    return out


def assert_round(target: Target, names: Names, rnd: Round, got: list[Record]) -> None:
    """The round's SPUBLISH refusals were the server's, and every message
    arrived exactly once."""
    refusals = target.spublish_refusals(names.shard)
    assert rnd.refused == refusals, f"{target.name}: SPUBLISH refused {rnd.refused}, not {refusals}"
    missing = Counter(rnd.expected) - Counter(got)
    extra = Counter(got) - Counter(rnd.expected)
    assert not missing and not extra, (
        f"{target.name}: missing {sorted(missing.items(), key=repr)}, "
        f"unexpected {sorted(extra.items(), key=repr)}"
    )


def add_user(ports: list[int]) -> None:
    """The ACL user on every server: ACLs are per node in Redis Cluster and in bloomcast."""
    for port in ports:
        with redis.Redis(port=port, password=PASSWORD) as r:
            r.execute_command("ACL", "SETUSER", USER, *USER_RULES)


def require_password(ports: list[int]) -> None:
    for port in ports:
        with redis.Redis(port=port) as r:
            r.config_set("requirepass", PASSWORD)


# -- module-scoped fixtures (import them into a test module to use them) -------------


@pytest.fixture(scope="module")
def bloomcast() -> Iterator[AuthCluster]:
    """Three nodes with ``--requirepass`` and default flags (so subscribe
    visibility is on: a confirmed SUBSCRIBE is visible on every peer), the ACL
    user added on each."""
    args = ["--requirepass", PASSWORD]
    with AuthCluster(3, extra_args=args) as c:  # started, ready
        add_user(c.ports)
        yield c


def need_redis_server() -> None:
    if redis_server_path() is None:
        pytest.skip("Debian's redis-server (the anchor) is not installed")


@pytest.fixture(scope="module")
def redis_single() -> Iterator[int]:
    """redis-server standalone with the password and the ACL user; its port."""
    need_redis_server()
    with start_anchor(REDIS) as server:
        require_password([server.port])
        add_user([server.port])
        yield server.port


@pytest.fixture(scope="module")
def redis_anchor() -> Iterator[list[int]]:
    """A 3-master Redis Cluster of redis-server with the password and the ACL
    user; its client ports."""
    need_redis_server()
    anchor = redis_cluster.RedisCluster(3, binary=redis_server_path())
    try:
        anchor.start()
        require_password(anchor.ports)
        add_user(anchor.ports)
        yield anchor.ports
    finally:
        anchor.stop()
