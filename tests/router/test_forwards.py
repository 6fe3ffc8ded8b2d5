"""The node's side of a forwarded PUBLISH (``PubSub.deliver_forwarded``, the
bus's LocalDelivery): local delivery, the traffic event of the receiver, and
the registry's false-positive resize policy, whose rebuilt filter goes to the
ClusterLink with its new m; on both data planes (the ``plane`` fixture)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bloom import CountingBloomFilter
from cluster_bus.frames import Publish
from router.config import NodeConfig
from router.dataplane import Plane
from router.info import info_sections
from router.kinds import CHANNELS
from router.node import Node
from router.pubsub import FORWARDS_LOST_ORIGINS, LOSS_CHANNEL
from router.registry import FP_CHECK_EVERY, SubscriptionFilters
from spark.events import TrafficEvent
from tests.router.fakes import FakeSubscriber, RecordingLink

ORIGIN = "ab" * 20


class Recorder:
    """A traffic recorder keeping every event."""

    def __init__(self) -> None:
        self.events: list[TrafficEvent] = []

    def keeps(self, event_id: str) -> bool:
        return True

    def record(self, event: TrafficEvent) -> None:
        self.events.append(event)

    def info_fields(self) -> dict[str, int | str]:
        return {"traffic_events": len(self.events)}


@contextlib.asynccontextmanager
async def wired_node(
    plane: Plane | None = None, **config: Any
) -> AsyncIterator[tuple[Node, RecordingLink, Recorder]]:
    node = Node(NodeConfig(port=0, **config), plane=plane)
    await node.start()
    link, tap = RecordingLink(), Recorder()
    node.set_link(link)
    node.tap = tap
    try:
        yield node, link, tap
    finally:
        await node.stop()


def crowded_registry() -> tuple[SubscriptionFilters, FakeSubscriber]:
    """A registry whose 64-bit channel filter holds 40 channels: mostly ones."""
    node = Node(NodeConfig(port=0, filter_capacity=16))
    registry = node.registry
    registry.channel_filter = CountingBloomFilter(64)
    sub = FakeSubscriber("s")
    for i in range(40):
        node.pubsub.add(CHANNELS, sub, b"sub%d" % i)
    return registry, sub


def test_forwarded_publish_is_delivered_and_recorded_as_receiver(plane):
    async def scenario() -> None:
        async with wired_node(plane) as (node, link, tap):
            r, w = await asyncio.open_connection("127.0.0.1", node.port)
            w.write(b"SUBSCRIBE news\r\n")
            await asyncio.wait_for(
                r.readexactly(len(b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n")), 5
            )
            node.pubsub.deliver_forwarded(ORIGIN, 7, b"news", b"hi", False)
            frame = b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
            assert await asyncio.wait_for(r.readexactly(len(frame)), 5) == frame
            node.pubsub.deliver_forwarded(ORIGIN, 8, b"nobody", b"x", False)
            hit, miss = tap.events
            assert (hit.event_id, hit.role, hit.receivers, hit.false_positive) == (
                f"{ORIGIN}-7",
                "receiver",
                1,
                False,
            )
            assert (miss.event_id, miss.receivers, miss.false_positive) == (f"{ORIGIN}-8", 0, True)
            assert hit.forwarded == 0 and hit.node == node.node_id
            assert node.registry.false_positives_received == 1
            assert node.cluster_info()["cluster_stats_false_positives_received"] == 1
            assert node.stats.publish_received == 0  # a forward is not a client PUBLISH
            assert len(link.calls) == 1  # the SUBSCRIBE's change; forwards announce nothing
            w.close()

    asyncio.run(scenario())


def test_origin_event_shares_the_event_id_scheme(plane):
    async def scenario() -> None:
        async with wired_node(plane) as (node, _, tap):
            node.pubsub.publish(b"ch", b"payload", False)
            (event,) = tap.events
            assert event.event_id == f"{node.node_id}-1" and event.role == "origin"
            assert event.bytes == 7 and not event.false_positive

    asyncio.run(scenario())


def test_mostly_false_positive_window_rebuilds_the_filter_at_twice_m():
    registry, _ = crowded_registry()
    for _ in range(FP_CHECK_EVERY - 1):
        assert registry.forward_received(True) == []
    (change,) = registry.forward_received(True)
    cf = registry.channel_filter
    assert change.filter == "channels" and change.m == cf.m == 128
    assert change.fingerprint == cf.fingerprint()
    assert all(b"sub%d" % i in cf for i in range(40))  # rebuilt from the exact names
    assert registry.false_positives_received == FP_CHECK_EVERY
    assert registry.filter_epoch == 1


def test_a_resize_is_logged_at_notice(caplog):
    registry, _ = crowded_registry()
    with caplog.at_level(logging.INFO, logger="bloomcast.node"):
        for _ in range(FP_CHECK_EVERY):
            registry.forward_received(True)
    (record,) = [r for r in caplog.records if "resized" in r.getMessage()]
    assert record.levelno == logging.INFO  # bloomcast/node_log.py shows it as notice (*)
    assert record.getMessage().startswith(
        f"Channel filter resized to m=128 bits: {FP_CHECK_EVERY} of the last "
        f"{FP_CHECK_EVERY} forwards received had no receiver, estimated FP rate "
    )


def test_true_hits_on_a_sparse_filter_do_not_rebuild():
    node = Node(NodeConfig(port=0, filter_capacity=1024, filter_fp_rate=0.01))
    registry = node.registry
    node.pubsub.add(CHANNELS, FakeSubscriber("s"), b"only")
    for _ in range(4 * FP_CHECK_EVERY):
        assert registry.forward_received(False) == []
    assert registry.channel_filter.m == SubscriptionFilters(1024, 0.01).channel_filter.m


def test_rebuild_stops_at_max_m():
    registry, _ = crowded_registry()
    registry.max_m = 64
    for _ in range(2 * FP_CHECK_EVERY):
        assert registry.forward_received(True) == []
    assert registry.channel_filter.m == 64


def test_node_hands_a_rebuilt_filter_to_its_link(plane):
    async def scenario() -> None:
        async with wired_node(plane) as (node, link, _):
            sub = FakeSubscriber("s")
            node.registry.channel_filter = CountingBloomFilter(64)
            for i in range(40):
                node.pubsub.add(CHANNELS, sub, b"sub%d" % i)
            for i in range(FP_CHECK_EVERY):
                node.pubsub.deliver_forwarded(ORIGIN, i, b"other%d" % i, b"x", False)
            assert [[c.m for c in call] for call in link.calls] == [[128]]

    asyncio.run(scenario())


@pytest.mark.parametrize("tapped", [True, False], ids=["tap", "no-tap"])
def test_a_run_of_forwards_is_delivered_counted_and_recorded_as_each_forward(tapped, plane):
    # the run the bus hands over for a read (PubSub.deliver_forwarded_run)
    async def scenario() -> None:
        async with wired_node(plane) as (node, link, tap):
            node.registry.check_every = 4
            if not tapped:
                node.tap = None
            r, w = await subscribed(node.port, b"news")
            channels = [b"news", b"nobody", b"nobody", b"news", b"x", b"y", b"news", b"z"]
            run = [Publish(i, 10 + i, False, ch, b"m%d" % i) for i, ch in enumerate(channels)]
            node.pubsub.deliver_forwarded_run(ORIGIN, run, 7)  # the eighth is not in order
            frames = [b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nm%d\r\n" % i for i in (0, 3, 6)]
            got = await asyncio.wait_for(r.readexactly(sum(map(len, frames))), 5)
            assert got == b"".join(frames)
            assert [(e.event_id, e.receivers) for e in tap.events] == [
                (f"{ORIGIN}-{10 + i}", int(ch == b"news")) for i, ch in enumerate(channels[:7])
            ] * tapped
            registry = node.registry
            assert registry.false_positives_received == 4
            assert (registry._window_received, registry._window_false) == (7 % 4, 2)
            assert node.stats.messages_delivered == 3
            with pytest.raises(IndexError):  # one past the run: after its frames
                node.pubsub.deliver_forwarded_run(ORIGIN, run[7:], 2)
            assert registry.false_positives_received == 5 and len(tap.events) == 8 * tapped
            assert len(link.calls) == 1  # the SUBSCRIBE's change only
            w.close()

    asyncio.run(scenario())


def test_a_frame_of_a_run_that_does_not_unpack_fails_after_the_frames_before_it(plane):
    # (the message is the interpreter's on the pure-Python data plane, "not enough
    # values to unpack (expected 5, got 4)", and Cython's compiled: "need
    # more than 4 values to unpack")
    async def scenario() -> None:
        async with wired_node(plane) as (node, _, tap):
            run: list[Any] = [Publish(1, 7, False, b"a", b"x"), (1, 8, False, b"b")]
            with pytest.raises(ValueError, match=r"values to unpack"):
                node.pubsub.deliver_forwarded_run(ORIGIN, run, 2)
            assert [e.event_id for e in tap.events] == [f"{ORIGIN}-7"]  # the first, then the error
            assert node.registry.false_positives_received == 1

    asyncio.run(scenario())


async def subscribed(
    port: int, channel: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"SUBSCRIBE %b\r\n" % channel)
    reply = b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%b\r\n:1\r\n" % (len(channel), channel)
    assert await asyncio.wait_for(r.readexactly(len(reply)), 5) == reply
    return r, w


async def loss_note(r: asyncio.StreamReader) -> dict:
    """The payload of one ``message`` frame on the loss channel, as JSON."""
    lines = [await asyncio.wait_for(r.readline(), 5) for _ in range(7)]
    assert lines[:5] == [b"*3\r\n", b"$7\r\n", b"message\r\n", b"$18\r\n", LOSS_CHANNEL + b"\r\n"]
    return json.loads(lines[6])


def test_lost_forwards_are_counted_and_announced_on_the_loss_channel(plane):
    async def scenario() -> None:
        async with wired_node(plane) as (node, _, _):
            watch_r, watch_w = await subscribed(node.port, LOSS_CHANNEL)
            news_r, news_w = await subscribed(node.port, b"news")
            node.pubsub.forwards_lost(ORIGIN, 7, 1_700_000_000_000, 1_700_000_004_250)
            note = await loss_note(watch_r)
            assert note["node"] == ORIGIN and note["lost"] == 7
            # the sender's bounds on when the lost PUBLISHes were made, in seconds
            assert note["from"] == 1_700_000_000.0 and note["to"] == 1_700_000_004.25
            info = info_sections(node)
            assert info["stats"]["total_forwards_lost"] == 7
            assert info["forwards_lost"] == {f"from_{ORIGIN}": 7}
            # notify mode closes nobody
            news_w.write(b"PING\r\n")
            assert await asyncio.wait_for(news_r.readline(), 5) == b"*2\r\n"
            for w in (watch_w, news_w):
                w.close()

    asyncio.run(scenario())


def test_disconnect_mode_closes_the_affected_subscribers_only(plane):
    async def scenario() -> None:
        async with wired_node(plane, on_publish_loss="disconnect") as (node, _, _):
            watch_r, watch_w = await subscribed(node.port, LOSS_CHANNEL)
            news_r, news_w = await subscribed(node.port, b"news")
            plain_r, plain_w = await asyncio.open_connection("127.0.0.1", node.port)
            node.pubsub.forwards_lost(ORIGIN, 2, 0, 0)
            assert (await loss_note(watch_r))["lost"] == 2
            assert await asyncio.wait_for(news_r.read(), 5) == b""  # closed
            plain_w.write(b"PING\r\n")
            assert await asyncio.wait_for(plain_r.readline(), 5) == b"+PONG\r\n"
            watch_w.write(b"PING\r\n")
            assert await asyncio.wait_for(watch_r.readline(), 5) == b"*2\r\n"
            assert info_sections(node)["stats"]["loss_disconnections"] == 1
            for w in (watch_w, news_w, plain_w):
                w.close()

    asyncio.run(scenario())


def test_losses_per_origin_are_bounded_the_rest_summed_under_others(plane):
    """Node ids come and go (each restart is a new one): INFO counts the
    first FORWARDS_LOST_ORIGINS origins one by one and sums any further one
    under ``from_others``; the total stays exact (issue 41)."""
    node = Node(NodeConfig(port=0), plane=plane)
    extra = 5
    for i in range(FORWARDS_LOST_ORIGINS + extra):
        node.pubsub.forwards_lost(f"{i:040x}", 2, 0, 0)
    node.pubsub.forwards_lost(f"{0:040x}", 1, 0, 0)  # a known origin keeps its own line
    lost = info_sections(node)["forwards_lost"]
    assert len(lost) == FORWARDS_LOST_ORIGINS + 1
    assert lost["from_others"] == 2 * extra
    assert lost[f"from_{0:040x}"] == 3
    total = 2 * (FORWARDS_LOST_ORIGINS + extra) + 1
    assert info_sections(node)["stats"]["total_forwards_lost"] == total
