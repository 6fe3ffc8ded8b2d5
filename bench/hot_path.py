"""The node's hot path in-process: microseconds per pipelined PUBLISH, no sockets.

``uv run python -m bench.hot_path`` feeds batches of 16 ``PUBLISH`` requests
(the shape redis-benchmark ``-P 16`` sends) to

- the request parser alone: the pure-Python reference path (``fast=False``),
  the hiredis fast path and the compiled twin (issue 29), side by side;
- a whole :class:`router.client.Client` (parse, dispatch, PUBLISH, replies
  queued and flushed once per loop turn) with 0, 1 and 10 subscribers, on
  uvloop, with transports that only count bytes;
- ``ClusterBus.forward_publish`` to one peer whose filter matches, over a
  link that only counts bytes: routing, the session's numbering and replay
  buffer, the frame (the forwarding path that ``bloomcast bench cluster``
  measures end to end);
- the other end: a bus :class:`cluster_bus.link.Link` fed batches of 16
  numbered PUBLISH frames from one peer (decode, the session's in-order
  check, delivery to 1 subscriber, flushed once per loop turn).

It isolates the Python cost per command from the system calls that the
socket benchmark (``bloomcast bench single``) adds; it is a tool for working on
the hot path, not a comparison with Redis. Best of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import time
from collections.abc import Callable
from struct import Struct
from typing import Any

from router import dataplane
from router.client import Client
from router.config import NodeConfig
from router.node import Node
from router.parser import RequestParser

#: the hot-channels summary's size on the nodes built here (issue 51: the
#: same case with it on and off; ``bench.hot_path_cg --hot-channels-size``)
HOT_CHANNELS_ENV = "BENCH_HOT_CHANNELS_SIZE"


def bench_config() -> NodeConfig:
    """The config of a node built here: port 0 (no socket is bound), and the
    hot-channels size from :data:`HOT_CHANNELS_ENV` (the default without it)."""
    size = os.environ.get(HOT_CHANNELS_ENV)
    if size is None:
        return NodeConfig(port=0)
    return NodeConfig(port=0, hot_channels_size=int(size))


CHANNEL = b"bench:ch"
REQUEST = b"*3\r\n$7\r\nPUBLISH\r\n$8\r\nbench:ch\r\n$5\r\nhello\r\n"
PIPELINE = 16


class CountingTransport:
    """The transport calls a Client makes, keeping only a byte count."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def get_extra_info(self, name: str) -> Any:
        return None

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def parser_us(fast: bool, batches: int, cls: type = RequestParser) -> float:
    """Microseconds per request to parse ``batches`` pipelined batches."""
    parser = cls(512 * 1024 * 1024, 1024 * 1024, fast=fast)
    batch = REQUEST * PIPELINE
    start = time.perf_counter()
    for _ in range(batches):
        parser.feed(batch)
        for _req in parser.requests():
            pass
    return (time.perf_counter() - start) / (batches * PIPELINE) * 1e6


async def publisher_and_subscribers(
    subscribers: int, slice_ns: int | None = None
) -> tuple[Client, CountingTransport, list[CountingTransport]]:
    """A node (no bus) with ``subscribers`` clients subscribed to ``bench:ch``
    and one more client to publish: (that client, its transport, the
    subscribers' transports). ``slice_ns``: the node's loop-turn budget per
    connection (router.context.SLICE_SECONDS when None); given, the slow log
    is off too (a batch under valgrind passes its 10 ms of wall time: it
    would log every batch, which a node at full speed does not)."""
    node = Node(bench_config())
    if slice_ns is not None:
        node.context.slice_ns = slice_ns
        settings = node.context.settings
        node.context.swap_settings(dataclasses.replace(settings, slowlog_log_slower_than=-1))
    sub_transports = [CountingTransport() for _ in range(subscribers)]
    for transport in sub_transports:
        sub = node.client_class(node)
        sub.connection_made(transport)  # type: ignore[arg-type]
        sub.data_received(b"SUBSCRIBE bench:ch\r\n")
    await asyncio.sleep(0)
    client = node.client_class(node)
    publisher = CountingTransport()
    client.connection_made(publisher)  # type: ignore[arg-type]
    return client, publisher, sub_transports


async def client_us(subscribers: int, batches: int) -> float:
    """Microseconds per PUBLISH through a Client, one loop turn per batch.

    Raises RuntimeError unless every reply and every message was written."""
    client, publisher, sub_transports = await publisher_and_subscribers(subscribers)
    batch = REQUEST * PIPELINE
    confirmed = [t.written for t in sub_transports]
    start = time.perf_counter()
    for _ in range(batches):
        client.data_received(batch)
        await asyncio.sleep(0)  # the loop turn that flushes the output queues
    elapsed = time.perf_counter() - start
    commands = batches * PIPELINE
    reply = b":%d\r\n" % subscribers
    frame = b"*3\r\n$7\r\nmessage\r\n$8\r\nbench:ch\r\n$5\r\nhello\r\n"
    got = [t.written - c for t, c in zip(sub_transports, confirmed, strict=True)]
    if publisher.written != commands * len(reply) or got != [commands * len(frame)] * subscribers:
        raise RuntimeError(f"hot path lost output: replies {publisher.written} B, messages {got}")
    return elapsed / commands * 1e6


class CountingLink:
    """An authenticated bus link that only counts what is written to it."""

    authenticated = True
    closed = False

    def __init__(self) -> None:
        self.frames = 0

    def write(self, data: bytes, forward: bool = False) -> None:
        self.frames += 1


def forwarder(
    replay_bytes: int = 64 << 20,
) -> tuple[Callable[[bytes, bytes, bool, int], int], CountingLink]:
    """A bus with one peer whose channel filter holds ``bench:ch``, linked by a
    :class:`CountingLink`, keeping ``replay_bytes`` for replay: (its
    ``forwarder()``: what the node calls for each PUBLISH, that link)."""
    from bloom import CountingBloomFilter
    from cluster_bus.api import BusConfig
    from cluster_bus.bus import ClusterBus
    from cluster_bus.frames import FilterKind

    node = Node(bench_config())
    bus = ClusterBus(node.pubsub, BusConfig(port=0, replay_bytes=replay_bytes))
    peer = "ab" * 20
    bus.routing.add_peer(peer)
    theirs = CountingBloomFilter(1024)
    theirs.add(CHANNEL)
    bits = theirs.exported.bits.tobytes()
    bus.routing.set_filter(
        peer, FilterKind.CHANNELS, theirs.m, theirs.k, bits, theirs.fingerprint(), 1
    )
    link = CountingLink()
    bus.mesh.out[peer] = link  # type: ignore[assignment]
    return bus.forwarder(), link


def forward_us(forwards: int) -> float:
    """Microseconds per ``forward_publish`` to one matching peer.

    Raises RuntimeError unless every forward reached the link."""
    forward, link = forwarder()
    start = time.perf_counter()
    for i in range(forwards):
        forward(CHANNEL, b"hello", False, i)
    elapsed = time.perf_counter() - start
    if link.frames != forwards:
        raise RuntimeError(f"forward path lost frames: {link.frames} of {forwards}")
    return elapsed / forwards * 1e6


#: a PUBLISH frame's seq (u32) at byte 14 and origin_seq (u64) at 18 (cluster_bus.codec)
_NUMBERS = Struct(">IQ").pack_into


def numbered(one: bytes, count: int, first: int) -> bytes:
    """``count`` copies of the PUBLISH frame ``one``, numbered ``first``,
    ``first`` + 1, ... (seq and origin_seq alike): a few hundred
    instructions a frame, against thousands for encoding each."""
    buf = bytearray(one * count)
    for i in range(count):
        _NUMBERS(buf, i * len(one) + 14, first + i, first + i)
    return bytes(buf)


def publish_frames(peer: str, batches: int, depth: int = PIPELINE) -> list[bytes]:
    """``batches`` batches of ``depth`` PUBLISH frames from ``peer``, numbered
    from 1 (:func:`numbered`; the callgrind cases of bench/hot_path_cg.py
    count that with the receive path)."""
    from cluster_bus.codec import encode_publish, short_id

    one = encode_publish(short_id(peer), 1, 0, False, CHANNEL, b"hello")
    frames = numbered(one, batches * depth, 1)
    size = depth * len(one)
    return [frames[b * size : (b + 1) * size] for b in range(batches)]


#: the message frame a subscriber of ``bench:ch`` gets for each PUBLISH
MESSAGE_FRAME = b"*3\r\n$7\r\nmessage\r\n$8\r\nbench:ch\r\n$5\r\nhello\r\n"


async def receiver(more: tuple[bytes, ...] = ()) -> tuple[Any, CountingTransport, str]:
    """A node with a bus, one client subscribed to ``bench:ch`` (and a
    client for each of ``more``, the requests it sends first) and an
    authenticated bus link from a peer: (the link, the subscriber's
    transport with the SUBSCRIBE's confirmation already counted, the peer)."""
    from cluster_bus.api import BusConfig
    from cluster_bus.bus import ClusterBus
    from cluster_bus.handshake import Handshake

    node = Node(bench_config())
    bus = ClusterBus(node.pubsub, BusConfig(port=0))
    sub = node.client_class(node)
    sub_transport = CountingTransport()
    sub.connection_made(sub_transport)  # type: ignore[arg-type]
    sub.data_received(b"SUBSCRIBE bench:ch\r\n")
    for requests in more:
        other = node.client_class(node)
        other.connection_made(CountingTransport())  # type: ignore[arg-type]
        other.data_received(requests)
    await asyncio.sleep(0)
    sub_transport.written = 0
    node.set_link(bus)  # after the SUBSCRIBE: the bus is not started, it has no filters to sync
    peer = "ab" * 20
    link = bus.link_class(bus, Handshake(node.node_id, None, outbound=False), None)
    link.connection_made(CountingTransport())  # type: ignore[arg-type]
    link.authenticate(peer, 64 * 1024 * 1024)
    return link, sub_transport, peer


async def receive(batches: int, depth: int) -> float:
    """Feed ``batches`` reads of ``depth`` forwarded PUBLISH frames to a bus
    link, one loop turn per read: seconds taken.

    Raises RuntimeError unless every frame was delivered once."""
    link, sub_transport, peer = await receiver()
    frames = publish_frames(peer, batches, depth)
    start = time.perf_counter()
    for batch in frames:
        link.data_received(batch)
        await asyncio.sleep(0)  # the loop turn that flushes the subscriber
    elapsed = time.perf_counter() - start
    expected = batches * depth * len(MESSAGE_FRAME)
    if sub_transport.written != expected or link.closed:
        raise RuntimeError(f"receive path lost messages: {sub_transport.written} B of {expected}")
    return elapsed


async def receive_us(batches: int) -> float:
    """Microseconds per forwarded PUBLISH received on a bus link and delivered
    to one subscriber, one loop turn per batch of 16 frames."""
    return await receive(batches, PIPELINE) / (batches * PIPELINE) * 1e6


def run(batches: int = 5000, repeats: int = 5) -> dict[str, float]:
    """Best-of-``repeats`` microseconds per command for each case."""
    new_loop: Callable[[], asyncio.AbstractEventLoop]
    try:
        import uvloop

        new_loop = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        new_loop = asyncio.new_event_loop
    out = {
        "parse, reference (pure Python)": min(parser_us(False, batches) for _ in range(repeats)),
        "parse, hiredis fast path": min(parser_us(True, batches) for _ in range(repeats)),
    }
    plane = dataplane.load()
    if plane is not dataplane.python():  # the compiled twin (issue 29)
        cls = plane.RequestParser
        out["parse, compiled twin"] = min(parser_us(True, batches, cls) for _ in range(repeats))
    for subs in (0, 1, 10):
        with asyncio.Runner(loop_factory=new_loop) as runner:
            out[f"Client, PUBLISH, {subs} subscribers"] = min(
                runner.run(client_us(subs, batches)) for _ in range(repeats)
            )
    out["ClusterBus.forward_publish, 1 peer"] = min(
        forward_us(batches * PIPELINE) for _ in range(repeats)
    )
    with asyncio.Runner(loop_factory=new_loop) as runner:
        out["bus link, PUBLISH received, 1 subscriber"] = min(
            runner.run(receive_us(batches)) for _ in range(repeats)
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=5000, help="batches of 16 per run")
    ap.add_argument("--repeats", type=int, default=5, help="runs per case, best kept")
    args = ap.parse_args(argv)
    result = run(args.batches, args.repeats)
    ref = result["parse, reference (pure Python)"]
    for name, us in result.items():
        extra = f"  ({ref / us:.1f}x the reference)" if name.startswith("parse, ") else ""
        print(f"{name:40s} {us:6.3f} us/command{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
