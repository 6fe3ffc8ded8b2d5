"""Fuzz the bus's forwarding hot path: the compiled data plane against the
pure-Python data plane (issues 29, 42).

``uv run python -m tests.fuzz.fuzz_forwarding --count 500 --seed 1``

Two nodes, the pure-Python data plane and the compiled plane (the pair of
``tests/fuzz/fuzz_loop.py``), each with a bus: one on the reference
(:func:`cluster_bus.dataplane.python`: ``cluster_bus/link.py``,
``forwarding.py``, ``session.py``, ``decoder.py``, ``routing.py`` run as plain
Python), one on the same sources compiled (``cluster_bus._link``, ...) and
``cluster_bus/_codec.pyx``. Each script does one of:

- *in*: the same byte stream from one peer, cut at the same random points,
  is read by each bus's authenticated link from that peer: PUBLISH and
  SPUBLISH frames numbered mostly in order (duplicates, gaps), SESSION and
  RESEND frames, and now and then a corrupt frame (bad magic, another
  sender, an unknown type, a length past the link's limit or under
  PUBLISH's, a channel past the body) or bare bytes. After every read: the
  subscribers' output (channels, a pattern, a shard channel), the link's
  state (closed, the decoder's held bytes, what it waits for, broken), what
  the link wrote back, the session's numbers and the bus's and the node's
  counters must be the same.
- *out*: ``forward_publish`` of the same PUBLISH / SPUBLISH on buses whose
  peers' filters hold some channels, with links up, absent or not yet
  authenticated, a replay buffer small enough to evict, and ticks between:
  the frames each link got, the counters, each session's numbering and
  replay buffer, and any exception must be the same.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import random
import sys
import time
from typing import Any

from bloom import CountingBloomFilter
from cluster_bus import dataplane as bus_plane
from cluster_bus.api import BusConfig
from cluster_bus.bus import ClusterBus
from cluster_bus.codec import encode, encode_publish, short_id
from cluster_bus.forwarding import Forwarding
from cluster_bus.frames import FilterKind, Resend, Session
from cluster_bus.handshake import Handshake
from cluster_bus.link import Link
from router.registry import FP_CHECK_EVERY
from tests.fuzz.fuzz_loop import Side, nodes

PEER = "ab" * 20
OTHERS = ["cd" * 20, "ef" * 20, "12" * 20]
CHANNELS = [b"a", b"news", b"b", b"x" * 300, b""]
SUBSCRIBE = b"SUBSCRIBE a news\r\nPSUBSCRIBE n*\r\nSSUBSCRIBE a\r\n"


class Recorder:
    """A transport (or a bus link in ``mesh.out``) that keeps what is written."""

    def __init__(self, authenticated: bool = True) -> None:
        self.out: list[bytes] = []
        self.authenticated = authenticated
        self.closed = False

    def write(self, data: bytes, forward: bool = False) -> None:
        self.out.append(bytes(data))  # a forward (Link.write's flag) in order with the rest

    def get_extra_info(self, name: str) -> Any:
        return None

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def _bus(node: Any, compiled: bool, **config: Any) -> ClusterBus:
    """A bus on the compiled plane (``compiled``) or the reference, whatever
    ``BLOOMCAST_NO_EXTENSIONS`` says."""
    plane = bus_plane.compiled() if compiled else bus_plane.python()
    bus = ClusterBus(node.pubsub, BusConfig(port=0, **config), plane=plane)
    assert (type(bus.forwarding) is Forwarding) is not compiled
    return bus


# -- in ----------------------------------------------------------------------------


def _corrupt(rnd: random.Random, frame: bytearray) -> bytes:
    where = rnd.randrange(6)
    if where == 0:
        frame[0] = ord("x")  # bad magic
    elif where == 1:
        frame[10] ^= 0xFF  # another sender
    elif where == 2:
        frame[3] = 99  # an unknown type
    elif where == 3:
        frame[6:10] = (rnd.choice([3, 10, 1 << 20])).to_bytes(4, "big")  # a length past or under
    elif where == 4:
        frame[26:30] = (len(frame)).to_bytes(4, "big")  # a channel past the body
    else:
        frame[2] = 7  # an unknown version
    return bytes(frame)


def _next(seq: int, by: int = 1) -> int:
    """``seq`` + ``by`` among the u32 sequence numbers (0 is none: 2^32 - 1 + 1 is 1)."""
    return (seq - 1 + by) % 0xFFFFFFFF + 1


def stream(rnd: random.Random, sender: int, seq: int, clean: bool = False) -> bytes:
    """Frames from the peer, numbered from ``seq``: mostly the next PUBLISH,
    some out of order (``clean``: up to 120 PUBLISH, all in order); now and
    then mostly to a channel nobody here wants (false positives, which the
    resize policy counts)."""
    parts = []
    channels = CHANNELS if rnd.random() < 0.7 else [b"b"] * 9 + [b"a"]
    session = rnd.getrandbits(64) or 1
    for _ in range(rnd.randint(20, 120) if clean else rnd.randint(1, 40)):
        r = 0.0 if clean else rnd.random()
        if r < 0.8:
            shift = 0 if clean else rnd.choice([0] * 12 + [-1, -3, 1, 2])
            number = _next(seq, shift)
            payload = rnd.choice([b"hi", b"", b"p" * rnd.randint(1, 400)])
            frame = encode_publish(
                sender, number, rnd.getrandbits(rnd.choice([8, 64])),
                rnd.random() < 0.15, rnd.choice(channels), payload,
            )  # fmt: skip
            if number == seq:
                seq = _next(seq)
            if not clean and rnd.random() < 0.03:
                frame = _corrupt(rnd, bytearray(frame))
            parts.append(frame)
        elif r < 0.88:
            first = rnd.choice([1, seq, _next(seq, 2)])
            parts.append(encode(Session(session, first, _next(seq, rnd.randint(0, 3))), sender))
        elif r < 0.93:
            parts.append(encode(Resend(session, rnd.randint(1, 5), 0), sender))
        elif r < 0.96:
            parts.append(rnd.randbytes(rnd.randint(1, 20)))
        else:
            parts.append(b"")
    return b"".join(parts)


async def receiving_side(
    node: Any, compiled: bool, max_body: int, limit: bytes
) -> tuple[Side, Link, Recorder]:
    side = Side(node)
    side.send(1, b"CONFIG SET client-output-buffer-limit %s\r\n" % limit)
    side.send(0, SUBSCRIBE)
    await asyncio.sleep(0)
    bus = _bus(node, compiled)
    node.set_link(bus)  # after the SUBSCRIBE: the bus is not started, no filters to sync
    link = bus.link_class(bus, Handshake(node.node_id, None, outbound=False), None)
    transport = Recorder()
    link.connection_made(transport)  # type: ignore[arg-type]
    link.first_bytes = b"bc"  # (the handshake's frames came first)
    link.authenticate(PEER, max_body)
    bus.mesh.inbound[PEER] = link
    bus.forwarding._out(PEER).session_id = 7  # (random) what a RESEND's answer names
    return side, link, transport


def _in_session(s: Any, gap: bool) -> tuple[Any, ...]:
    return (s.expected, s.session_id, s.lost, s.session_lost, s._horizon, s._asked, gap)


def rx_state(side: Side, link: Link, transport: Recorder) -> Any:
    bus: Any = link.owner
    decoder: Any = link.decoder
    session = bus.forwarding.in_sessions.get(PEER)
    bus.forwarding.count_forwards()  # (what INFO reads: the PUBLISH frames read added)
    stats = dataclasses.asdict(bus.stats)
    node = side.node
    return (
        [bytes(wire.out) for wire in side.wires],
        link.closed,
        decoder.buffered,
        decoder._need,
        decoder._broken,
        transport.out,
        None if session is None else _in_session(session, PEER in bus.forwarding._gaps),
        stats,
        node.stats.messages_delivered,
        _registry(node.registry),
        None if node.tap is None else node.tap.seen,
        node.pubsub.iteration_output,
        [client.conn.closed for client in side.clients if client.conn is not None],
    )


class CountersTap:
    """A traffic recorder that keeps, for each event, the node's counters as
    they stand when it is recorded."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.seen: list[tuple[Any, ...]] = []

    def keeps(self, event_id: str) -> bool:
        return True

    def record(self, event: Any) -> None:
        node = self.node
        self.seen.append(
            (event.event_id, event.receivers, node.stats.messages_delivered,
             _registry(node.registry), node.pubsub.iteration_output)
        )  # fmt: skip


def _registry(registry: Any) -> tuple[Any, ...]:
    """The resize policy's state: its counters, window and channel filter."""
    cf = registry.channel_filter
    return (
        registry.false_positives_received,
        registry._window_received,
        registry._window_false,
        registry.filter_epoch,
        cf.m,
        cf.fingerprint(),
    )


def pair() -> tuple[Any, Any]:
    """fuzz_loop's two nodes (one node id: the bus frames carry it)."""
    return nodes()


async def script_in(rnd: random.Random) -> None:
    ref, twin = pair()
    # the resize policy's window: at 3 or 20 its end falls inside the runs of a
    # read, and 16 false positives in a window of 20 resize the filter (256,
    # the node's own, is never reached here: the run counted whole)
    every = rnd.choice([FP_CHECK_EVERY, 3, 20])
    for node in (ref, twin):
        node.registry.check_every = every
    if rnd.random() < 0.3:  # a filter of another m (a resize doubles it)
        for node in (ref, twin):
            node.registry.rebuild_channel_filter(64)
    if rnd.random() < 0.3:  # a tap: it sees the node's counters as each event is recorded
        for node in (ref, twin):
            node.tap = CountersTap(node)
    clean = rnd.random() < 0.25  # long runs in order: the resize policy's windows end in them
    max_body = 1 << 20 if clean else rnd.choice([1 << 20, 200, 40, -1])
    # a subscriber over a small pubsub limit is closed mid-delivery
    limit = rnd.choice([b'"pubsub 0 0 0"', b'"pubsub 0 0 0"', b'"pubsub 300 0 0"'])
    sides = [
        await receiving_side(ref, False, max_body, limit),
        await receiving_side(twin, True, max_body, limit),
    ]
    start = rnd.choice([1, 1, 0xFFFFFFFF - rnd.randint(0, 20)])  # and across the wrap
    odd = (
        not clean and rnd.random() < 0.05
    )  # an expected number no frame has: the reference's in_order
    for _, link, _ in sides:
        link.owner.forwarding._in(PEER).expected = 0 if odd else start  # type: ignore[attr-defined]
    data = stream(rnd, short_id(PEER), start, clean)
    cuts = sorted(rnd.sample(range(1, len(data)), max(0, min(len(data) - 1, rnd.randint(0, 8)))))
    for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
        results = []
        for _, link, _ in sides:
            try:
                link.data_received(data[a:b])
                results.append(None)
            except Exception as exc:
                results.append(repr(exc))
        if rnd.random() < 0.7:
            await asyncio.sleep(0)
        one, two = (rx_state(*s) for s in sides)
        if results[0] != results[1] or one != two:
            raise AssertionError(
                f"read {a}:{b} of {data!r}:\n reference {results[0]} {one!r}\n"
                f" twin {results[1]} {two!r}"
            )


# -- out ---------------------------------------------------------------------------


def sending_side(node: Any, compiled: bool, setup: random.Random) -> tuple[ClusterBus, dict]:
    replay = setup.choice([64 << 20, 300])
    bus = _bus(node, compiled, replay_bytes=replay)
    links = {}
    for peer in setup.sample(OTHERS, setup.choice([0, 1, 2, 3, 3, 3])):  # 0: a lone node
        bus.routing.add_peer(peer)
        if setup.random() < 0.3:  # a session about to wrap
            bus.forwarding._out(peer).next_seq = 0xFFFFFFFF - setup.randint(0, 5)
        if setup.random() < 0.8:
            theirs = CountingBloomFilter(1024)
            for channel in setup.sample(CHANNELS, setup.randint(0, 3)):
                theirs.add(channel)
            bits = theirs.exported.bits.tobytes()
            bus.routing.set_filter(
                peer, FilterKind.CHANNELS, theirs.m, theirs.k, bits, theirs.fingerprint(), 1
            )
        r = setup.random()
        if r < 0.6:
            links[peer] = bus.mesh.out[peer] = Recorder()  # type: ignore[assignment]
        elif r < 0.75:
            links[peer] = bus.mesh.out[peer] = Recorder(authenticated=False)  # type: ignore[assignment]
            if setup.random() < 0.5:
                links[peer + "in"] = bus.mesh.inbound[peer] = Recorder()  # type: ignore[assignment]
    return bus, links


def _session(s: Any) -> tuple[Any, ...]:
    """An out session's numbering, replay buffer and period marks."""
    marks = (list(s._marks), s._marked, list(s._gone), s._gone_to, s in s.period.active)
    return (s.next_seq, s.first_seq, s.held, s.buffered_bytes, list(s._frames), *marks)


def tx_state(bus: ClusterBus, links: dict) -> Any:
    sessions = {peer: _session(s) for peer, s in sorted(bus.forwarding.out_sessions.items())}
    bus.forwarding.count_forwards()  # (what INFO reads: forward's counts added)
    return {k: v.out for k, v in sorted(links.items())}, sessions, dataclasses.asdict(bus.stats)


def same_ids(sides: list[tuple[ClusterBus, dict]]) -> None:
    """A session's id is random: the twin's sessions take the reference's."""
    mine, theirs = (bus.forwarding.out_sessions for bus, _ in sides)
    for peer, session in mine.items():
        if peer in theirs:
            theirs[peer].session_id = session.session_id


async def script_out(rnd: random.Random) -> None:
    ref, twin = pair()
    seed = rnd.getrandbits(64)
    sides = [sending_side(node, node is twin, random.Random(seed)) for node in (ref, twin)]
    now = 1_000_000
    for bus, _ in sides:
        bus.forwarding._period.now = now  # the script's clock, not each bus's start
    same_ids(sides)
    for _ in range(rnd.randint(1, 40)):
        if rnd.random() < 0.1:
            now += rnd.choice([10, 5_000, 20_000])
            for bus, _ in sides:
                bus.forwarding.tick(now)
            continue
        channel = rnd.choice(CHANNELS)
        message = rnd.choice([b"m", b"", b"q" * rnd.randint(1, 200)])
        shard = rnd.random() < 0.15
        origin_seq = rnd.choice([rnd.getrandbits(16), (1 << 64) - 1, 1 << 64, -1])
        results = []
        for bus, _ in sides:
            try:
                results.append(bus.forward_publish(channel, message, shard, origin_seq))
            except Exception as exc:
                results.append(repr(exc))
        same_ids(sides)
        one, two = (tx_state(*s) for s in sides)
        if results[0] != results[1] or one != two:
            raise AssertionError(
                f"forward {channel!r} {origin_seq}: reference {results[0]} {one!r}\n"
                f" twin {results[1]} {two!r}"
            )
    await asyncio.sleep(0)


def run(count: int, seed: int) -> int:
    logging.disable(logging.WARNING)  # the corrupt frames' warnings, one per script
    rnd = random.Random(seed)
    for i in range(count):
        script = script_in if i % 2 == 0 else script_out
        asyncio.run(script(random.Random(rnd.getrandbits(64))))
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="scripts (in and out alternate)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    start = time.monotonic()
    run(args.count, args.seed)
    print(
        f"fuzz_forwarding: {args.count} scripts agree (seed {args.seed}, "
        f"{time.monotonic() - start:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
