"""What is hot now (issue 51): the bounded summary (router/hotchannels.py)
held to an exact oracle, on both data planes; BLOOMCAST.HOTCHANNELS on a real
node (RESP2 and RESP3 bytes, errors, ACL, CONFIG, the three kinds, forwarded
PUBLISH); Prometheus series bounded; a hostile node process (RSS bounded)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import re
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import pytest

from bloomcast.metrics import HOT_SERIES, hot_channel_metrics
from bloomcast.testing import free_port
from cluster_bus.frames import Publish
from router import hotchannels
from router.commands.hot import parse
from router.config import NodeConfig
from router.dataplane import Plane
from router.node import Node
from tests.procs import bloomcast_node, connect, read_quiet
from tests.router.fakes import RecordingLink

A1 = math.log(2.0) / 60.0


@pytest.fixture
def hot(plane: Plane) -> ModuleType:
    """The summary's module of ``plane`` (compiled: ``router._hotchannels``)."""
    if plane.name == "python":
        return hotchannels
    from router import _hotchannels  # type: ignore[attr-defined]

    return _hotchannels


def exact(events: list[tuple[float, bytes]], a: float, now: float) -> dict[bytes, float]:
    """The oracle: every name's decayed count at ``now`` (per second: times ``a``)."""
    out: dict[bytes, float] = {}
    for t, name in events:
        out[name] = out.get(name, 0.0) + math.exp(-a * (now - t)) * a
    return out


def test_held_counts_are_exact_while_the_summary_has_room(hot: ModuleType) -> None:
    s = hot.Summary(8, 1000.0)
    events = []
    for i in range(200):
        t = 1000.0 + i * 0.25
        s.tick(t)
        name = b"ch%d" % (i % 5)
        s.add(name, 10, 2, 1)
        events.append((t, name))
    now = 1060.0
    for h, half_life in enumerate(hotchannels.HALF_LIVES):
        truth = exact(events, math.log(2.0) / half_life, now)
        rows = {r[0]: r for r in s.rows(h, now)}
        assert set(rows) == set(truth)
        for name, rate in truth.items():
            r = rows[name]
            assert r[1] == pytest.approx(rate, rel=1e-9)
            assert r[2] == pytest.approx(10 * rate, rel=1e-9)  # bytes
            assert r[3] == pytest.approx(2 * rate, rel=1e-9)  # deliveries
            assert r[4] == pytest.approx(rate, rel=1e-9)  # forwards
            assert r[5] == 0.0  # received
            assert r[6] == 0.0  # no error: never replaced
        assert s.total(h, now) == pytest.approx(sum(truth.values()), rel=1e-9)


def test_heavy_channels_above_the_error_bound_are_exactly_the_top(hot: ModuleType) -> None:
    """A skewed workload through a summary of 64: 5 heavy channels among 3,000
    publishes to 2,500 distinct light ones. Every held count is within its
    error of the truth, every error within N / K, and the top 5 by the
    summary are the exact top 5."""
    k = 64
    s = hot.Summary(k, 0.0)
    rng = random.Random(51)
    heavy = {b"heavy%d" % i: w for i, w in enumerate((800, 600, 450, 350, 300))}
    names = [n for n, w in heavy.items() for _ in range(w)]
    names += [b"light%d" % rng.randrange(2500) for _ in range(3000)]
    rng.shuffle(names)
    events = []
    for i, name in enumerate(names):
        t = i * 0.01
        s.tick(t)
        s.add(name, 1, 0, 0)
        events.append((t, name))
    now = len(names) * 0.01
    truth = exact(events, A1, now)
    bound = s.error_bound(now)
    assert bound == pytest.approx(sum(truth.values()) / k, rel=1e-9)
    rows = s.rows(1, now)
    assert len(rows) == k
    for name, held, *_, err, _seconds, upper in rows:
        assert upper == pytest.approx(held + err, rel=1e-9)
        assert err <= bound * (1 + 1e-9)
        assert held <= truth[name] * (1 + 1e-9) + 1e-12
        assert truth[name] <= (held + err) * (1 + 1e-9) + 1e-12
    top = [r[0] for r in sorted(rows, key=lambda r: -r[1])[:5]]
    exact_top = sorted(truth, key=lambda n: -truth[n])[:5]
    assert top == exact_top == list(heavy)
    # the heavy ones stand clearly above the bound: the test could fail
    assert min(truth[n] for n in heavy) > 2 * bound
    assert s.replacements > 0


def test_any_number_of_names_hold_k_entries(hot: ModuleType) -> None:
    """5,000 distinct names of each kind (a million at a node process:
    ``bench.hot_channels --million``): K held, the rest replaced in place."""
    n = 5_000
    s = hot.HotChannels(64, 0.0)
    for i in range(n):
        if i % 250 == 0:
            s.tick(i / 250)
        s.published(b"c%d" % i, 1, 0, 0, False)
        s.published(b"s%d" % i, 1, 0, 0, True)
    assert len(s.channels) == 64
    assert sum(slot is not None for slot in s.channels.slots) == 64
    assert all(s.channels.holds(e.name) for e in s.channels.heap)
    assert len(s.shards) == 64 and len(s.patterns) == 0
    assert s.channels.replacements == n - 64
    # the entries counted since the last tick: one each at most, K at most
    assert len(s.channels.touched) <= 64
    assert s.memory() <= 2 * 64 * (hotchannels.ENTRY_BYTES + 8)


def test_the_landmark_moves_and_counts_stay_finite(hot: ModuleType) -> None:
    s = hot.Summary(4, 0.0)
    s.add(b"a", 1, 0, 0)
    s.tick(20_000.0)  # 2,000 half-lives of 10 s: exp() would overflow at a fixed landmark
    s.add(b"a", 1, 0, 0)
    assert s.landmark == 20_000.0
    rows = s.rows(0, 20_000.0)
    assert rows[0][1] == pytest.approx(math.log(2.0) / 10.0, rel=1e-9)
    assert all(math.isfinite(x) for x in rows[0][1:])


def test_a_smaller_size_keeps_the_largest(hot: ModuleType) -> None:
    s = hot.Summary(8, 0.0)
    for i in range(8):
        for _ in range(i + 1):
            s.add(b"n%d" % i, 1, 0, 0)
    s.resize(3)
    assert sorted(r[0] for r in s.rows(1, 0.0)) == [b"n5", b"n6", b"n7"]
    s.add(b"new", 1, 0, 0)  # the heap still works: replaces the smallest
    assert len(s) == 3 and s.holds(b"new") and not s.holds(b"n5")


def test_options_are_checked_with_redis_wording() -> None:
    def err(*words: bytes) -> Any:
        return parse([b"bloomcast.hotchannels", *words])

    assert err(b"COUNT", b"x") == b"-ERR value is not an integer or out of range\r\n"
    assert err(b"COUNT", b"0") == b"-ERR value is out of range, must be positive\r\n"
    assert err(b"COUNT") == b"-ERR syntax error\r\n"
    assert err(b"NOPE", b"1") == b"-ERR syntax error\r\n"
    assert err(b"HALFLIFE", b"5m") == b"-ERR HALFLIFE must be one of 10s, 1m, 10m\r\n"
    assert err(b"BY", b"x").startswith(b"-ERR BY must be one of publishes")
    assert err(b"KIND", b"x").startswith(b"-ERR KIND must be one of channel")
    q = err(b"count", b"3", b"by", b"BYTES", b"halflife", b"10S", b"kind", b"shard", b"TRENDING")
    assert (q.count, q.measure, q.half_life, q.kind, q.trending) == (3, 1, 0, "shard", True)


# -- a real node ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def node_on(plane: Plane, **config: Any) -> AsyncIterator[Node]:
    node = Node(NodeConfig(port=free_port(), **config), plane=plane)
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


class Conn:
    """A raw RESP connection: requests out, replies read until quiet."""

    def __init__(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.r, self.w = r, w

    @classmethod
    async def open(cls, port: int) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def send(self, *commands: list[bytes]) -> bytes:
        for args in commands:
            self.w.write(b"*%d\r\n" % len(args))
            for a in args:
                self.w.write(b"$%d\r\n%b\r\n" % (len(a), a))
        await self.w.drain()
        out = b""
        while True:
            try:
                out += await asyncio.wait_for(self.r.read(1 << 20), 0.3)
            except TimeoutError:
                return out

    def close(self) -> None:
        self.w.close()


def test_the_command_answers_each_kind_in_resp2_and_resp3(plane: Plane) -> None:
    async def scenario() -> None:
        async with node_on(plane) as node:
            sub = await Conn.open(node.port)
            await sub.send([b"SUBSCRIBE", b"news"], [b"PSUBSCRIBE", b"ne*"])
            sub2 = await Conn.open(node.port)
            await sub2.send([b"SSUBSCRIBE", b"orders"])
            pub = await Conn.open(node.port)
            pubs = [[b"PUBLISH", b"news", b"x" * 10]] * 30 + [[b"PUBLISH", b"other", b"y"]] * 3
            pubs += [[b"SPUBLISH", b"orders", b"zz"]] * 7
            await pub.send(*pubs)
            reply2 = await pub.send([b"BLOOMCAST.HOTCHANNELS", b"COUNT", b"1"])
            head2 = b"*1\r\n*16\r\n$4\r\nname\r\n$4\r\nnews\r\n$9\r\npublishes\r\n$"
            assert reply2.startswith(head2), reply2
            fields2 = re.findall(rb"\$\d+\r\n([a-z]+)\r\n\$\d+\r\n([0-9.e+-]+)\r\n", reply2)
            values = {k.decode(): float(v) for k, v in fields2}
            assert set(values) == {
                "publishes",
                "bytes",
                "deliveries",
                "forwards",
                "received",
                "error",
                "seconds",
            }
            # each news PUBLISH reached 2 receivers (the channel and the pattern), 10 bytes
            assert values["deliveries"] == pytest.approx(2 * values["publishes"], rel=1e-9)
            assert values["bytes"] == pytest.approx(10 * values["publishes"], rel=1e-9)
            assert values["forwards"] == values["received"] == values["error"] == 0.0
            # 30 publishes, decayed a few hundred ms at most under 1 m: rate ~ 30 ln2 / 60
            assert 30 * A1 * 0.98 < values["publishes"] <= 30 * A1
            await pub.send([b"HELLO", b"3"])
            reply3 = await pub.send([b"BLOOMCAST.HOTCHANNELS", b"COUNT", b"5"])
            head3 = b"*2\r\n%8\r\n$4\r\nname\r\n$4\r\nnews\r\n$9\r\npublishes\r\n,"
            assert reply3.startswith(head3), reply3
            assert b"$4\r\nname\r\n$5\r\nother\r\n" in reply3
            shard = await pub.send([b"BLOOMCAST.HOTCHANNELS", b"KIND", b"shard"])
            assert shard.startswith(b"*1\r\n%8\r\n$4\r\nname\r\n$6\r\norders\r\n")
            pattern = await pub.send([b"BLOOMCAST.HOTCHANNELS", b"KIND", b"pattern"])
            assert pattern.startswith(b"*1\r\n%8\r\n$4\r\nname\r\n$3\r\nne*\r\n")
            trending = await pub.send([b"BLOOMCAST.HOTCHANNELS", b"TRENDING"])
            assert b"$9\r\nshare-10s\r\n," in trending and b"$5\r\nratio\r\n," in trending
            for c in (sub, sub2, pub):
                c.close()

    asyncio.run(scenario())


def test_forwarded_publishes_are_counted_as_received(plane: Plane) -> None:
    async def scenario() -> None:
        async with node_on(plane) as node:
            node.set_link(RecordingLink())
            run = [Publish(0, i, False, b"fwd", b"abc") for i in range(1, 6)]
            node.pubsub.deliver_forwarded_run("ab" * 20, run, 5)
            hot = node.pubsub.hot
            assert hot is not None
            rows = {r[0]: r for r in hot.channels.rows(1, hot.channels.now)}
            # counted as received, not published: its origin counts the publish
            assert rows[b"fwd"][5] == pytest.approx(5 * A1, rel=1e-9)
            assert rows[b"fwd"][1] == rows[b"fwd"][2] == rows[b"fwd"][4] == 0.0
            assert rows[b"fwd"][3] == 0.0  # no subscriber here
            assert rows[b"fwd"][8] == pytest.approx(5 * A1, rel=1e-9)  # upper: handled

    asyncio.run(scenario())


def test_the_setting_turns_it_off_and_on_and_acl_covers_the_command(plane: Plane) -> None:
    async def scenario() -> None:
        async with node_on(plane, hot_channels_size=4) as node:
            c = await Conn.open(node.port)
            got = await c.send([b"CONFIG", b"GET", b"hot-channels-size"])
            assert got == b"*2\r\n$17\r\nhot-channels-size\r\n$1\r\n4\r\n"
            assert await c.send([b"CONFIG", b"SET", b"hot-channels-size", b"0"]) == b"+OK\r\n"
            assert node.pubsub.hot is None
            off = await c.send([b"BLOOMCAST.HOTCHANNELS"])
            assert off.startswith(b"-ERR the hot-channels summary is off")
            bad = await c.send([b"CONFIG", b"SET", b"hot-channels-size", b"65537"])
            assert bad == (
                b"-ERR CONFIG SET failed (possibly related to argument 'hot-channels-size') "
                b"- argument must be between 0 and 65536 inclusive\r\n"
            )
            assert await c.send([b"CONFIG", b"SET", b"hot-channels-size", b"8"]) == b"+OK\r\n"
            assert await c.send([b"PUBLISH", b"a", b"b"]) == b":0\r\n"
            assert (await c.send([b"BLOOMCAST.HOTCHANNELS"])).startswith(b"*1\r\n*16\r\n")
            setuser = [b"ACL", b"SETUSER", b"watcher", b"on", b"nopass", b"+@pubsub", b"-@slow"]
            assert await c.send(setuser) == b"+OK\r\n"
            setuser = [b"ACL", b"SETUSER", b"op", b"on", b"nopass", b"+bloomcast.hotchannels"]
            assert await c.send(setuser) == b"+OK\r\n"
            w = await Conn.open(node.port)
            assert await w.send([b"AUTH", b"watcher", b"x"]) == b"+OK\r\n"
            denied = await w.send([b"BLOOMCAST.HOTCHANNELS"])
            assert denied == (
                b"-NOPERM this user has no permissions to run the "
                b"'bloomcast.hotchannels' command\r\n"
            )
            assert await w.send([b"AUTH", b"op", b"x"]) == b"+OK\r\n"
            assert (await w.send([b"BLOOMCAST.HOTCHANNELS"])).startswith(b"*1\r\n*16\r\n")
            info = await c.send([b"COMMAND", b"INFO", b"bloomcast.hotchannels"])
            assert info.startswith(b"*1\r\n*10\r\n$21\r\nbloomcast.hotchannels\r\n:-1\r\n")
            for conn in (c, w):
                conn.close()

    asyncio.run(scenario())


def test_prometheus_series_stay_bounded_under_many_channels(plane: Plane) -> None:
    async def scenario() -> None:
        async with node_on(plane, hot_channels_size=32) as node:
            c = await Conn.open(node.port)
            for batch in range(10):
                await c.send(
                    *([b"PUBLISH", b"ch%d-%d" % (batch, i), b"m"] for i in range(500)),
                    *([b"PUBLISH", b"x" * 70_000 + b"%d" % i, b"m"] for i in range(3)),
                )
            families = list(hot_channel_metrics(node))
            series = sum(len(f.samples) for f in families)
            # 4 measures x HOT_SERIES names x 3 kinds (only one kind here has
            # names), plus 3 gauges x 3 kinds; counters add a _created series
            assert series <= 4 * HOT_SERIES * 3 + 3 * 3 * 2
            labels = {
                s.labels["channel"] for f in families for s in f.samples if "channel" in s.labels
            }
            assert 0 < len(labels) <= HOT_SERIES
            assert all(len(label) <= 128 for label in labels)
            c.close()

    asyncio.run(scenario())


def test_a_hostile_stream_of_distinct_channels_keeps_the_rss_bounded() -> None:
    """40,160 distinct channels (160 of 64 KiB) at a node process: the
    summary holds K of each kind, and the RSS grows by far less than the
    names sent (what a summary keeping every name would hold)."""
    with bloomcast_node("--hot-channels-size", "64") as port:
        s = connect(port)

        def rss() -> int:
            s.sendall(b"INFO memory\r\n")
            text, _ = read_quiet(s)
            return int(re.search(rb"used_memory_rss:(\d+)", text)[1])  # type: ignore[index]

        s.sendall(b"PUBLISH warm up\r\n")
        read_quiet(s)
        before = rss()
        sent = 0
        s.settimeout(10)
        for batch in range(20):
            names = [b"c%d-%d" % (batch, i) for i in range(2_000)]
            names += [b"L%d-%d-" % (batch, i) + b"x" * 65_536 for i in range(8)]
            sent += sum(len(n) for n in names)
            s.sendall(
                b"".join(
                    b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%b\r\n$1\r\nm\r\n" % (len(n), n) for n in names
                )
            )
            want, got = 4 * len(names), b""  # ":0\r\n" each (no wait for a quiet)
            while len(got) < want:
                chunk = s.recv(1 << 20)
                assert chunk, "the node closed the connection"
                got += chunk
            assert got == b":0\r\n" * len(names)
        grown = rss() - before
        s.sendall(b"BLOOMCAST.HOTCHANNELS COUNT 1000\r\n")
        reply, _ = read_quiet(s)
        assert reply.startswith(b"*64\r\n")
        # K x (entry + the longest name) per kind, twice over for the allocator
        assert grown < 2 * 64 * (hotchannels.ENTRY_BYTES + 65_600) + (8 << 20)
        assert grown < sent / 4
        s.close()


def test_a_peer_answer_is_bounded_and_its_floor_covers_what_it_left_out(plane: Plane) -> None:
    """A node's part over the bus (router.commands.hot.serve): within its byte
    budget whatever the names' length; a held name left out raises the floor
    to its upper bound, which the merge adds to the error of a name the node
    did not send."""
    from router.commands.hot import REPLY_BUDGET, Part, decode_part, encode_query, merge, serve

    async def scenario() -> None:
        async with node_on(plane, hot_channels_size=64) as node:
            c = await Conn.open(node.port)
            # 8 channels of 20 KiB names, the heavier first: 3 fit in 64 KiB
            await c.send(
                *(
                    [b"PUBLISH", b"%d" % i + b"n" * 20_000, b"m"]
                    for i in range(8)
                    for _ in range(10 - i)
                )
            )
            c.close()
            q = parse([b"x", b"COUNT", b"2"])
            assert not isinstance(q, bytes)
            raw = serve(node.context, encode_query(q))
            assert len(raw) <= REPLY_BUDGET + 64
            part = decode_part(raw)
            assert part is not None
            sent = part.rows[1]
            assert [r[0][:1] for r in sent] == [b"0", b"1", b"2"]
            assert part.floor == pytest.approx(7 * A1, rel=0.02)  # "3": 7 publishes, left out
            assert decode_part(raw[:-1]) is None and decode_part(b"") is None
            # merged with a node that sent a name this one did not
            other = Part()
            other.rows[1] = [(b"elsewhere", 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0, 1.0)]
            other.floor = 0.25
            merged = {r[0]: (r, n) for r, n in merge([part, other], 1)}
            assert merged[b"elsewhere"][0][6] == pytest.approx(part.floor)  # its error
            assert merged[sent[0][0]][0][6] == pytest.approx(0.25)
            assert merged[b"elsewhere"][1] == 1

    asyncio.run(scenario())


def test_the_table_and_the_heap_agree_under_churn(hot: ModuleType) -> None:
    """Names come and go (replacements, backward-shift deletions in the
    table): every held name is found, no other, and the heap stays a heap."""
    s = hot.Summary(16, 0.0)
    rng = random.Random(7)
    for i in range(20_000):
        s.add(b"n%d" % int(rng.paretovariate(1.2) * 10 % 300), 1, 0, 0)
        if i % 97 == 0:
            held = {e.name for e in s.heap}
            assert held == {e.name for e in s.slots if e is not None}
            assert all(s.holds(n) for n in held)
            assert not any(s.holds(b"n%d" % j) for j in range(300) if b"n%d" % j not in held)
            keys = [e.key for e in s.heap]
            assert all(keys[(j - 1) // 2] <= keys[j] for j in range(1, len(keys)))
            assert all(e.pos == j for j, e in enumerate(s.heap))
