"""The Python cluster clients people pick today, beside redis-py
(test_cluster_clients.py), against bloomcast and against the anchor, the same
script for both (issue 27 item 7): valkey-py (RESP2 and RESP3), coredis
(RESP3) and valkey-glide (RESP3 push; subscriptions given at client creation,
and glide 2's blocking subscribe calls).

Each client runs standalone (one node; redis-server 7.0.15) with the default
user's password and in cluster mode (a 3-node bloomcast cluster; a 3-master
Redis Cluster 7.0.15) with an ACL user. It subscribes to a channel, a pattern
and a shard channel where it can (binary names where it takes bytes), waits for
the confirmation it gives, and must then receive exactly the round of
``client_servers.publish_round``: all 256 byte values and 1 MiB, published on
the other nodes. Wrong and missing credentials must fail as they fail against
redis-server, with the same text.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import coredis
import coredis.exceptions
import glide
import pytest
import valkey
from glide import (
    GlideClient,
    GlideClientConfiguration,
    GlideClusterClient,
    GlideClusterClientConfiguration,
    NodeAddress,
    ServerCredentials,
)
from valkey.cluster import ClusterNode, ValkeyCluster

from bloomcast.testing import LOOPBACK
from tests.integration.client_servers import (
    BINARY,
    PASSWORD,
    TEXT,
    USER,
    USER_PASSWORD,
    Names,
    Record,
    Round,
    Target,
    assert_round,
    digest,
    publish_round,
)
from tests.integration.client_servers import bloomcast as bloomcast  # the fixtures
from tests.integration.client_servers import redis_anchor as redis_anchor
from tests.integration.client_servers import redis_single as redis_single

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def _quiet_glide_legacy_modules() -> None:
    """glide 2.6 puts proxies of its old module paths in sys.modules, each
    warning (DeprecationWarning) on its first attribute access; pytest walks
    sys.modules for the traceback of any failing or xfailing test later in the
    session, so touch each once here, quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for module in list(sys.modules.values()):
            if type(module).__name__ == "_LegacyModule":
                hasattr(module, "__file__")


_quiet_glide_legacy_modules()

WAIT = 10.0  # seconds for a confirmation or a whole round to arrive

TARGETS = ["bloomcast standalone", "bloomcast cluster", "redis standalone", "redis cluster"]


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest) -> Target:
    server, mode = request.param.split()
    if server == "bloomcast":
        ports = request.getfixturevalue("bloomcast").ports
    elif mode == "standalone":
        ports = [request.getfixturevalue("redis_single")]
    else:
        ports = request.getfixturevalue("redis_anchor")
    return Target(server, mode, ports)


def credentials(target: Target) -> tuple[str | None, str]:
    """Standalone: the default user's password; cluster: the ACL user."""
    return (None, PASSWORD) if target.mode == "standalone" else (USER, USER_PASSWORD)


def collect(get: Callable[[], Any], want: int) -> list[Any]:
    """Up to ``want`` non-empty results of ``get`` (which waits a little itself)
    within WAIT seconds."""
    out: list[Any] = []
    deadline = time.monotonic() + WAIT
    while len(out) < want and time.monotonic() < deadline:
        if m := get():
            out.append(m)
    return out


# -- valkey-py -----------------------------------------------------------------------


def valkey_client(target: Target, protocol: int) -> Any:
    user, password = credentials(target)
    kwargs = {"username": user, "password": password, "protocol": protocol}
    if target.mode == "cluster":
        return ValkeyCluster(startup_nodes=[ClusterNode(LOOPBACK, target.ports[0])], **kwargs)
    return valkey.Valkey(host=LOOPBACK, port=target.ports[0], **kwargs)


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
def test_valkey_py_pubsub(target: Target, protocol: int) -> None:
    names = BINARY
    client = valkey_client(target, protocol)
    p = client.pubsub()
    if target.mode == "cluster":  # shard channels have their own connections

        def get() -> Any:
            return p.get_message(timeout=0.05) or p.get_sharded_message()
    else:

        def get() -> Any:
            return p.get_message(timeout=0.05)

    try:
        p.subscribe(names.channel)
        p.psubscribe(names.pattern)
        p.ssubscribe(names.shard)
        confirmed = [(m["type"], m["channel"]) for m in collect(get, 3)]
        assert sorted(confirmed) == [
            ("psubscribe", names.pattern),
            ("ssubscribe", names.shard),
            ("subscribe", names.channel),
        ]
        rnd = publish_round(target, names, sharded=True)
        got = [
            (m["type"], m["channel"], m["pattern"], digest(m["data"]))
            for m in collect(get, len(rnd.expected))
        ]
    finally:
        p.close()
        client.close()
    assert_round(target, names, rnd, got)


# -- coredis -------------------------------------------------------------------------


async def coredis_round(target: Target, names: Names) -> tuple[Round, list[Record]]:
    user, password = credentials(target)
    cluster = target.mode == "cluster"
    kind = coredis.RedisCluster if cluster else coredis.Redis
    client = kind(LOOPBACK, target.ports[0], username=user, password=password)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(client)
        # subscribe() returns once the server confirmed, within subscription_timeout
        ps = await stack.enter_async_context(client.pubsub(subscription_timeout=WAIT))
        await ps.subscribe(names.channel)
        await ps.psubscribe(names.pattern)
        confirmed = [await ps.get_message(timeout=WAIT) for _ in range(2)]
        assert [(m["type"], m["channel"]) for m in confirmed if m] == [
            ("subscribe", names.channel),
            ("psubscribe", names.pattern),
        ]
        sp = None
        if cluster:  # coredis.Redis has no sharded pub/sub
            sp = await stack.enter_async_context(client.sharded_pubsub(subscription_timeout=WAIT))
            await sp.subscribe(names.shard)
            m = await sp.get_message(timeout=WAIT)
            assert m is not None and (m["type"], m["channel"]) == ("ssubscribe", names.shard)
        rnd = await asyncio.to_thread(publish_round, target, names, cluster)
        sharded = sum(1 for r in rnd.expected if r[0] == "smessage")

        async def read(pubsub: Any, want: int, shard: bool) -> list[Record]:
            out: list[Record] = []
            deadline = time.monotonic() + WAIT
            while len(out) < want and (left := deadline - time.monotonic()) > 0:
                m = await pubsub.get_message(timeout=left)
                if m is None:
                    continue
                # coredis types a shard channel's message "message" (on Redis too)
                kind = "smessage" if shard and m["type"] == "message" else m["type"]
                out.append((kind, m["channel"], m["pattern"], digest(m["data"])))
            return out

        reads = [read(ps, len(rnd.expected) - sharded, False)]
        if sp is not None:
            reads.append(read(sp, sharded, True))
        got = [r for part in await asyncio.gather(*reads) for r in part]
    return rnd, got


def test_coredis_pubsub(target: Target) -> None:
    rnd, got = asyncio.run(coredis_round(target, BINARY))
    assert_round(target, BINARY, rnd, got)


# -- valkey-glide --------------------------------------------------------------------


async def glide_client(target: Target, subscriptions: dict[str, set[str]] | None = None) -> Any:
    """A glide client for ``target`` (its credentials), subscribed at creation
    to ``subscriptions`` ({"Exact" | "Pattern" | "Sharded": names}) if given."""
    cluster = target.mode == "cluster"
    config: Any = GlideClusterClientConfiguration if cluster else GlideClientConfiguration
    user, password = credentials(target)
    pubsub = None
    if subscriptions is not None:
        modes = config.PubSubChannelModes
        pubsub = config.PubSubSubscriptions(
            {modes[mode]: names for mode, names in subscriptions.items()}, None, None
        )
    conf = config(
        [NodeAddress(LOOPBACK, target.ports[0])],
        credentials=ServerCredentials(password, user),
        request_timeout=int(WAIT * 1000),
        pubsub_subscriptions=pubsub,
    )
    return await (GlideClusterClient if cluster else GlideClient).create(conf)


async def glide_round(target: Target, at_creation: bool) -> tuple[Names, Round, list[Record]]:
    cluster = target.mode == "cluster"
    if at_creation:  # the configuration takes str names only (it encodes them as UTF-8)
        names = TEXT
        wanted = {"Exact": {names.channel.decode()}, "Pattern": {names.pattern.decode()}}
        if cluster:
            wanted["Sharded"] = {names.shard.decode()}
        client = await glide_client(target, wanted)
        # the client's own account of what the servers confirmed
        deadline = time.monotonic() + WAIT
        while True:
            state = await client.get_subscriptions()
            actual = {mode.name: names for mode, names in state.actual_subscriptions.items()}
            if {k: v for k, v in actual.items() if v} == wanted:
                break
            assert time.monotonic() < deadline, f"glide never confirmed {wanted}: {state}"
            await asyncio.sleep(0.02)
    else:  # subscribe() and friends wait for the server's confirmation; bytes work
        names = BINARY
        client = await glide_client(target)
        await client.subscribe({names.channel}, timeout_ms=int(WAIT * 1000))
        await client.psubscribe({names.pattern}, timeout_ms=int(WAIT * 1000))
        if cluster:
            await client.ssubscribe({names.shard}, timeout_ms=int(WAIT * 1000))
    try:
        rnd = await asyncio.to_thread(publish_round, target, names, cluster)
        got: list[Record] = []
        deadline = time.monotonic() + WAIT
        while len(got) < len(rnd.expected) and (left := deadline - time.monotonic()) > 0:
            try:
                m = await asyncio.wait_for(client.get_pubsub_message(), left)
            except TimeoutError:
                break
            got.append(names.received(m.channel, m.pattern, m.message))
    finally:
        await client.close()
    return names, rnd, got


@pytest.mark.parametrize("at_creation", [True, False], ids=["at-creation", "subscribe-call"])
def test_valkey_glide_pubsub(target: Target, at_creation: bool) -> None:
    names, rnd, got = asyncio.run(glide_round(target, at_creation))
    assert_round(target, names, rnd, got)


# -- credentials ---------------------------------------------------------------------

AUTH_CASES = {
    "wrong-password": (None, "not-the-password"),
    "wrong-acl-password": (USER, "not-the-password"),
    "no-credentials": (None, None),
}


def valkey_py_error(port: int, user: str | None, password: str | None, protocol: int) -> str:
    client = valkey.Valkey(
        host=LOOPBACK, port=port, username=user, password=password, protocol=protocol
    )
    with pytest.raises(valkey.exceptions.AuthenticationError) as exc, client:
        client.ping()
    return str(exc.value)


def coredis_error(port: int, user: str | None, password: str | None) -> str:
    async def connect() -> None:
        async with coredis.Redis(LOOPBACK, port, username=user, password=password) as c:
            await c.ping()

    with pytest.raises((BaseExceptionGroup, coredis.exceptions.AuthenticationError)) as exc:
        asyncio.run(connect())
    err: BaseException = exc.value
    while isinstance(err, BaseExceptionGroup):  # coredis fails inside an anyio task group
        err = err.exceptions[0]
    assert isinstance(err, coredis.exceptions.AuthenticationError), repr(err)
    return str(err)


def glide_error(port: int, user: str | None, password: str | None) -> str:
    creds = ServerCredentials(password, user) if password else None

    async def connect() -> None:
        conf = GlideClientConfiguration([NodeAddress(LOOPBACK, port)], credentials=creds)
        client = await GlideClient.create(conf)
        await client.close()

    with pytest.raises(glide.ClosingError) as exc:
        asyncio.run(connect())
    return str(exc.value)  # "Received error for address `127.0.0.1:<port>`: <the error>"


ERRORS: dict[str, Callable[[int, str | None, str | None], str]] = {
    "valkey-py-resp2": lambda port, u, p: valkey_py_error(port, u, p, 2),
    "valkey-py-resp3": lambda port, u, p: valkey_py_error(port, u, p, 3),
    "coredis": coredis_error,
    "valkey-glide": glide_error,
}


@pytest.mark.parametrize(
    ("client", "case"),
    [(client, case) for client in ERRORS for case in AUTH_CASES],
)
def test_bad_credentials_fail_as_on_redis(bloomcast, redis_single, client: str, case: str) -> None:
    """The client's error for bad or missing credentials reads as against redis-server."""
    user, password = AUTH_CASES[case]
    node = ERRORS[client](bloomcast.ports[0], user, password)
    anchor = ERRORS[client](redis_single, user, password)
    assert node.replace(str(bloomcast.ports[0]), "<port>") == anchor.replace(
        str(redis_single), "<port>"
    )
