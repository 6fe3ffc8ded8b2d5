"""Instructions per command on the node's hot path, counted with callgrind
(the method of docs/benchmarks.md, "Method": instructions from callgrind).

``uv run python -m bench.hot_path_cg`` runs every case under
``valgrind --tool=callgrind`` twice, with a long and a short run (``-P 16``:
220 and 20 batches of 16 PUBLISH; ``-P 1``: 1200 and 200 PUBLISH, one per
read and loop turn), ``PYTHONHASHSEED=0``, and prints (long - short) / the
commands between them: the start-up, imports and set-up cancel out. The
5 ms slice budget is disabled (under valgrind a batch takes longer than 5 ms
of wall time, so slicing would depend on the machine's load). Each case runs
on the compiled data plane and with ``BLOOMCAST_NO_EXTENSIONS=1`` (the
pure-Python data plane), on uvloop with transports that only count bytes
(:mod:`bench.hot_path`).

``python -m bench.hot_path_cg --one CASE N`` is one run (what valgrind runs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Coroutine
from typing import Any

#: case -> (pipeline depth, subscribers): a client's PUBLISH requests
CASES = {
    "P16-0": (16, 0),
    "P16-1": (16, 1),
    "P16-10": (16, 10),
    "P1-0": (1, 0),
    "P1-1": (1, 1),
    "P1-10": (1, 10),
    # the bus (issue 29): ``forward_publish`` to one peer whose filter
    # matches, per forward (one read of ``depth`` forwards a loop turn);
    # forwarded PUBLISH frames read from a peer's link, ``depth`` a read,
    # delivered to the one subscriber
    "fwd": (16, 0),
    # issue 48: a client's PUBLISH on a node with a bus and one peer whose
    # channel filter holds the channel, forwarded on its (compiled) link,
    # one read of ``depth`` PUBLISH a loop turn: the whole origin's path
    "FWD1": (1, 0),
    "FWD16": (16, 0),
    "rx16": (16, 1),
    "rx1": (1, 1),
    # the other commands run in line (issue 29): SPUBLISH to no subscriber, PING
    "SPUB16": (16, 0),
    "SPUB1": (1, 0),
    "PING16": (16, 0),
    "PING1": (1, 0),
    # issue 48: SUBSCRIBE + UNSUBSCRIBE of a fresh channel, one request a
    # read and loop turn, per request (a cycle is two), on a node without a
    # bus: the local part (reply, tables, counting filter, filter change)
    "SUB1": (1, 0),
    # the same on a node with a bus and two peers (subscribe visibility on,
    # each delta acked by both peers, their ACK frames read from their links):
    # the origin's whole part; and a peer's part of one remote subscribe
    # change: a FILTER_DELTA frame read, applied to its copy, the ACK written
    "SUBBUS1": (1, 2),
    "DELTA1": (1, 0),
}
#: the request and its reply of a case that is not PUBLISH's (``_drive``)
OTHER_REQUESTS = {
    "SPUB": (b"*3\r\n$8\r\nSPUBLISH\r\n$8\r\nbench:ch\r\n$5\r\nhello\r\n", b":0\r\n"),
    "PING": (b"*1\r\n$4\r\nPING\r\n", b"+PONG\r\n"),
}
#: pipeline depth -> (long run, short run) in reads
RUNS = {16: (220, 20), 1: (1200, 200)}


async def _drive(depth: int, subscribers: int, reads: int, other: str = "") -> None:
    """``reads`` reads of ``depth`` PUBLISH each (``other``: the request of
    :data:`OTHER_REQUESTS`), one loop turn per read."""
    from bench.hot_path import REQUEST, publisher_and_subscribers

    # no slicing under valgrind (module doc; both loops)
    client, publisher, _ = await publisher_and_subscribers(subscribers, slice_ns=1 << 62)
    request, reply = OTHER_REQUESTS.get(other, (REQUEST, b":%d\r\n" % subscribers))
    batch = request * depth
    for _ in range(reads):
        client.data_received(batch)
        await asyncio.sleep(0)
    if publisher.written != reads * depth * len(reply):
        raise RuntimeError(f"lost replies: {publisher.written} B")


async def _forward(depth: int, reads: int) -> None:
    from bench.hot_path import CHANNEL, forwarder

    forward, link = forwarder()
    seq = 0
    for _ in range(reads):
        for _ in range(depth):
            seq += 1
            forward(CHANNEL, b"hello", False, seq)
        await asyncio.sleep(0)
    if link.frames != seq:
        raise RuntimeError(f"lost forwards: {link.frames} of {seq}")


async def _subscribe(reads: int) -> None:
    """``reads`` requests, alternately SUBSCRIBE and UNSUBSCRIBE of a fresh
    channel, one a read and loop turn."""
    from bench.hot_path import publisher_and_subscribers

    client, transport, _ = await publisher_and_subscribers(0, slice_ns=1 << 62)
    want = 0
    for i in range(reads):
        request, reply = _plain_subscribe(i)
        client.data_received(request)
        want += len(reply)
        await asyncio.sleep(0)
    if transport.written != want:
        raise RuntimeError(f"lost replies: {transport.written} B of {want}")


def _plain_subscribe(i: int) -> tuple[bytes, bytes]:
    """The ``i``-th request of a SUBSCRIBE / UNSUBSCRIBE run and its reply."""
    verb = b"UNSUBSCRIBE" if i & 1 else b"SUBSCRIBE"
    name = b"sub:%d" % (i >> 1)
    reply = b"*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n:%d\r\n" % (
        len(verb),
        verb.lower(),
        len(name),
        name,
        1 - (i & 1),
    )
    return b"%s %s\r\n" % (verb, name), reply


#: the frames a bus case builds, whatever its length: so their building
#: cancels out of (long - short)
FRAMES = max(long for long, _ in RUNS.values())


async def _bus_node(peers: int) -> tuple[Any, Any, list[tuple[str, Any]]]:
    """A node with a bus (not listening: its loop set as a start would) and
    ``peers`` peers, each with an authenticated inbound link whose transport
    only counts bytes: (the node, the bus, [(peer id, link)])."""
    from bench.hot_path import CountingTransport
    from cluster_bus.api import BusConfig
    from cluster_bus.bus import ClusterBus
    from cluster_bus.filter_sync import KIND_OF
    from cluster_bus.handshake import Handshake
    from router.config import NodeConfig
    from router.node import Node

    node = Node(NodeConfig(port=0))
    node.context.slice_ns = 1 << 62  # no slicing under valgrind (module doc)
    bus = ClusterBus(node.pubsub, BusConfig(port=0, visibility_timeout_ms=60_000))
    bus._loop = asyncio.get_running_loop()
    for name, kind in KIND_OF.items():
        bus.sync.start(kind, node.pubsub.filter_snapshot(name))
    node.set_link(bus)
    links = []
    for p in range(peers):
        peer = f"{p + 1:02x}" * 20
        bus.membership.learn(peer, "127.0.0.1", 7000 + p, 17000 + p, 0, direct=True)
        link = bus.link_class(bus, Handshake(node.node_id, None, outbound=False), None)
        link.connection_made(CountingTransport())  # type: ignore[arg-type]
        link.authenticate(peer, 64 * 1024 * 1024)
        bus.mesh.inbound[peer] = link
        links.append((peer, link))
    return node, bus, links


async def _subscribe_bus(reads: int) -> None:
    """:func:`_subscribe` on a node with a bus and two peers: each request's
    delta is acked by both (an ACK frame read on each peer's link), the
    SUBSCRIBE's reply written once both ACKs are in."""
    from bench.hot_path import CountingTransport
    from cluster_bus.codec import encode, short_id
    from cluster_bus.frames import Ack, MsgType

    node, bus, links = await _bus_node(2)
    acks = [[encode(Ack(d + 1), short_id(peer)) for d in range(FRAMES)] for peer, _ in links]
    client = node.client_class(node)
    transport = CountingTransport()
    client.connection_made(transport)
    want = 0
    for i in range(reads):
        request, reply = _plain_subscribe(i)
        sent = bus.stats.sent[MsgType.FILTER_DELTA]
        client.data_received(request)
        await asyncio.sleep(0)  # the turn's announcement
        if bus.stats.sent[MsgType.FILTER_DELTA] != sent:  # (an UNSUBSCRIBE's is held)
            delta_id = bus.sync._next_delta_id - 1
            for (_, link), frames in zip(links, acks, strict=True):
                link.data_received(frames[delta_id - 1])
        await asyncio.sleep(0)  # the reply's write
        want += len(reply)
    await asyncio.sleep(0)
    if transport.written != want:
        raise RuntimeError(f"lost replies: {transport.written} B of {want}")


async def _delta(reads: int) -> None:
    """A peer's FILTER_DELTA frames read on its link, one a loop turn: each
    applied to our copy of its channel filter, acked."""
    from bloom import CountingBloomFilter
    from cluster_bus.codec import encode, short_id
    from cluster_bus.frames import FilterDelta, FilterKind

    _, bus, links = await _bus_node(1)
    peer, link = links[0]
    theirs = CountingBloomFilter.for_capacity(1024, 0.01)
    bus.routing.add_peer(peer)
    empty = theirs.exported.bits.tobytes()
    bus.routing.set_filter(
        peer, FilterKind.CHANNELS, theirs.m, theirs.k, empty, theirs.fingerprint(), 1
    )
    frames = []
    for i in range(FRAMES):
        name = b"sub:%d" % (i >> 1)
        base = theirs.fingerprint()
        flipped = theirs.remove(name) if i & 1 else theirs.add(name)
        set_p, cleared = ((), flipped) if i & 1 else (flipped, ())
        delta = FilterDelta(
            FilterKind.CHANNELS, i + 1, theirs.m, base, theirs.fingerprint(), set_p, cleared, i + 2
        )
        frames.append(encode(delta, short_id(peer)))
    ack_bytes = link.transport.written
    for i in range(reads):
        link.data_received(frames[i])
        await asyncio.sleep(0)  # the ACK's write
    acks = (link.transport.written - ack_bytes) // 18  # an ACK frame: 14 + 4 bytes
    if acks != reads or bus.routing.fingerprint(peer, FilterKind.CHANNELS) is None:
        raise RuntimeError(f"deltas not acked or not applied: {acks} ACKs of {reads}")


async def _drive_forwarded(depth: int, reads: int) -> None:
    """:func:`_drive` on a node with a bus and one peer whose channel filter
    holds the channel: each PUBLISH forwarded on the peer's link (a
    transport that only counts bytes)."""
    from bench.hot_path import CHANNEL, REQUEST, CountingTransport
    from bloom import CountingBloomFilter
    from cluster_bus.frames import FilterKind

    node, bus, links = await _bus_node(1)
    peer, link = links[0]
    theirs = CountingBloomFilter(1024)
    theirs.add(CHANNEL)
    bits = theirs.exported.bits.tobytes()
    bus.routing.add_peer(peer)
    bus.routing.set_filter(
        peer, FilterKind.CHANNELS, theirs.m, theirs.k, bits, theirs.fingerprint(), 1
    )
    client = node.client_class(node)
    publisher = CountingTransport()
    client.connection_made(publisher)
    sent = link.transport.written
    batch = REQUEST * depth
    for _ in range(reads):
        client.data_received(batch)
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    frame = 30 + len(CHANNEL) + len(b"hello")  # a PUBLISH frame (cluster_bus.codec)
    forwarded = link.transport.written - sent
    if publisher.written != reads * depth * len(b":0\r\n") or forwarded < reads * depth * frame:
        raise RuntimeError(f"lost replies or forwards: {publisher.written} B, {forwarded} B")


def one(case: str, reads: int) -> None:
    import uvloop

    from bench.hot_path import receive

    depth, subscribers = CASES[case]
    work: Coroutine[Any, Any, object]
    if case == "fwd":
        work = _forward(depth, reads)
    elif case.startswith("FWD"):
        work = _drive_forwarded(depth, reads)
    elif case.startswith("rx"):
        work = receive(reads, depth)
    elif case == "SUB1":
        work = _subscribe(reads)
    elif case == "SUBBUS1":
        work = _subscribe_bus(reads)
    elif case == "DELTA1":
        work = _delta(reads)
    else:
        work = _drive(depth, subscribers, reads, case.rstrip("0123456789"))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(work)


def _instructions(case: str, reads: int, compiled: bool, hot: int | None = None) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if hot is not None:  # hot-channels-size of the node (issue 51): on and off
        env["BENCH_HOT_CHANNELS_SIZE"] = str(hot)
    env.pop("BLOOMCAST_NO_EXTENSIONS", None)
    if not compiled:
        env["BLOOMCAST_NO_EXTENSIONS"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        cmd += [sys.executable, "-m", "bench.hot_path_cg", "--one", case, str(reads)]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        with open(out) as f:
            text = f.read()
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    if m is None:
        raise RuntimeError("no totals in the callgrind output")
    return int(m.group(1))


def per_command(case: str, compiled: bool, hot: int | None = None) -> float:
    """Instructions per command of ``case``: (long - short) / commands
    (``hot``: the node's hot-channels-size; its default when None)."""
    depth = CASES[case][0]
    long_run, short_run = RUNS[depth]
    diff = _instructions(case, long_run, compiled, hot) - _instructions(
        case, short_run, compiled, hot
    )
    return diff / ((long_run - short_run) * depth)


def label(case: str) -> str:
    depth, subs = CASES[case]
    if case == "fwd":
        return f"forward_publish to 1 peer, {depth} a turn"
    if case.startswith("FWD"):
        return f"PUBLISH, -P {depth}, forwarded to 1 peer's subscriber (its link)"
    if case.startswith("rx"):
        return f"forwarded PUBLISH received, {depth} a read, 1 subscriber"
    if case.startswith("SPUB"):
        return f"SPUBLISH, -P {depth}, 0 subscribers"
    if case.startswith("PING"):
        return f"PING, -P {depth}"
    if case == "SUB1":
        return "SUBSCRIBE / UNSUBSCRIBE of a fresh channel, alternately, no bus"
    if case == "SUBBUS1":
        return "the same with a bus and 2 peers, visibility on, their ACKs read"
    if case == "DELTA1":
        return "a peer's FILTER_DELTA read, applied, acked (one remote change)"
    return f"PUBLISH, -P {depth}, {subs} subscriber{'' if subs == 1 else 's'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--one", nargs=2, metavar=("CASE", "READS"), help="one run (for valgrind)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated")
    ap.add_argument(
        "--hot-channels",
        action="store_true",
        help="each case compiled with hot-channels-size 0 (off) and 128 (issue 51)",
    )
    args = ap.parse_args(argv)
    if args.one:
        one(args.one[0], int(args.one[1]))
        return 0
    if args.hot_channels:
        print("| case (per command, compiled) | hot channels off | on (K = 128) | change |")
        print("|---|---|---|---|")
        for case in args.cases.split(","):
            off = per_command(case, compiled=True, hot=0)
            on = per_command(case, compiled=True, hot=128)
            print(
                f"| {label(case)} | {off:,.0f} | {on:,.0f} | {(on - off) / off * 100:+.1f}% |",
                flush=True,
            )
        return 0
    print("| case (per command) | pure-Python data plane | compiled | change |")
    print("|---|---|---|---|")
    for case in args.cases.split(","):
        py = per_command(case, compiled=False)
        cy = per_command(case, compiled=True)
        print(
            f"| {label(case)} | {py:,.0f} | {cy:,.0f} | {(cy - py) / py * 100:+.1f}% |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
