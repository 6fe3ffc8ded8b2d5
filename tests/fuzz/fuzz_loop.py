"""Fuzz the request loop: the compiled data plane against the pure-Python data plane
(issues 29, 42).

``uv run python -m tests.fuzz.fuzz_loop --count 2000 --seed 1``

Two in-process nodes on one event loop: the reference on the pure-Python data plane
(:func:`router.dataplane.python`: ``router/connection.py``, ``dispatch.py``,
``pubsub.py`` ... run as plain Python, and :class:`router.parser.RequestParser`)
and the twin on the compiled plane (the same sources compiled,
``router._connection``, ``router._dispatch``, ..., and ``router/_parser.pyx``).
Each gets the same clients and, script by script, the same requests, split at
the same random points: PUBLISH, SPUBLISH and PING (the commands the loop runs
in line) in every casing and arity and with names one letter off, RESP2
subscribers PINGing, CONFIG RESETSTAT, the slow log on for every command
and off again (the loop's watched path) and SLOWLOG RESET (not LEN: a
batch may pass 10 ms on one plane only),
(P|S)(UN)SUBSCRIBE, MULTI /
EXEC / DISCARD, CLIENT REPLY, HELLO 2/3, RESET, AUTH as a restricted ACL
user (no PUBLISH, or no channel) and as the default user, CLIENT PAUSE
WRITE / UNPAUSE (postponed PUBLISH), QUIT, protocol errors, and PUBLISH
and SPUBLISH forwarded by a peer (``PubSub.deliver_forwarded``, and runs of
them). After every
step, each client's output so far must be the same bytes on both nodes,
and at the end of a script so must each connection's state, reply mode,
subscriptions and the node's counters (commandstats calls / failed /
rejected, errorstats, publish and delivery counts).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from cluster_bus.frames import Publish
from router import dataplane
from router.client import Client
from router.config import NodeConfig
from router.node import Node
from router.registry import FP_CHECK_EVERY

CHANNELS = [b"a", b"b", b"news", b"x{1}", b"L" * 1100]
PATTERNS = [b"a*", b"*", b"n?ws", b"[ab]"]
CLIENTS = 3
PEER = "f" * 40  # the origin of forwarded PUBLISH


class Wire:
    """A transport that keeps what is written and obeys pause/resume."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.taken = 0  # how much of out the socket took
        self.drains = False  # the socket takes each write (the client reads; a step sets it)
        self.reading = True
        self.closed = False

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.out += data
            if self.drains:
                self.taken = len(self.out)

    def get_extra_info(self, name: str) -> Any:
        return None

    def get_write_buffer_size(self) -> int:
        """What the socket did not take: a client that does not read keeps
        everything written buffered (so a small pubsub limit, set by some
        scripts, cuts it); one that reads has 0 (the limits' first case)."""
        return len(self.out) - self.taken

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def write_eof(self) -> None:
        self.closed = True


class Side:
    """One node and its clients (their wires and unread input)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.clients: list[Client] = []
        self.wires: list[Wire] = []
        self.inbox: list[bytearray] = []
        for _ in range(CLIENTS):
            self.open()

    def open(self, at: int | None = None) -> None:
        client, wire = self.node.client_class(self.node), Wire()
        client.connection_made(wire)  # type: ignore[arg-type]
        if at is None:
            self.clients.append(client)
            self.wires.append(wire)
            self.inbox.append(bytearray())
        else:
            self.clients[at], self.wires[at], self.inbox[at] = client, wire, bytearray()

    def send(self, i: int, data: bytes) -> None:
        self.inbox[i] += data
        self.pump()

    def pump(self) -> None:
        """Deliver unread input to every client that reads; reopen the closed."""
        for i, client in enumerate(self.clients):
            wire = self.wires[i]
            if wire.closed:
                continue
            if wire.reading and self.inbox[i]:
                data, self.inbox[i] = bytes(self.inbox[i]), bytearray()
                client.data_received(data)


def forwarded_run(rnd: random.Random, step: int) -> tuple[list[Publish], int]:
    """The decoder's ``Publish`` tuples of a read, and how many of them are
    in order (now and then one more than the run: IndexError after the run);
    one in 20 has ``shard`` 0 (not a bool: the reference's own path)."""
    run = []
    for i in range(rnd.randint(1, 6)):
        shard: Any = rnd.random() < 0.2 if rnd.random() < 0.95 else 0
        run.append(Publish(step, step * 100 + i, shard, rnd.choice(CHANNELS), message(rnd)))
    return run, rnd.choice([len(run), len(run), rnd.randint(0, len(run) + 1)])


def nodes() -> tuple[Node, Node]:
    """(reference, twin): a node on the pure-Python data plane and one on the compiled
    data plane, with one node id, whatever ``BLOOMCAST_NO_EXTENSIONS`` says;
    ImportError if the extension is not built."""
    twin = dataplane.compiled()
    node_id = os.urandom(20).hex()  # one id: traffic events and bus frames carry it
    return (
        Node(NodeConfig(port=0), node_id, plane=dataplane.python()),
        Node(NodeConfig(port=0), node_id, plane=twin),
    )


def case(rnd: random.Random, name: bytes) -> bytes:
    r = rnd.random()
    if r < 0.4:
        return name.lower()
    if r < 0.8:
        return name.upper()
    return bytes(c ^ 32 if rnd.random() < 0.5 and chr(c).isalpha() else c for c in name)


def message(rnd: random.Random) -> bytes:
    return rnd.choice([b"hi", b"", b"x" * rnd.randint(1, 300), b"-err", b"\r\n", b"y" * 1500])


#: the commands run in line (router/dispatch.py ``_in_line``), PUBLISH weighted most
IN_LINE: list[Callable[[bytes, bytes], list[bytes]]] = [
    lambda ch, msg: [b"publish", ch, msg],
    lambda ch, msg: [b"publish", ch, msg],
    lambda ch, msg: [b"publish", ch, msg],
    lambda ch, msg: [b"spublish", ch, msg],
    lambda ch, msg: [b"ping"],
    lambda ch, msg: [b"ping", msg],
]
NEAR_NAMES = [
    b"publis", b"publishx", b"pub\x00ish", b"p\xd5blish", b"spublis", b"xpublish",
    b"spublishx", b"pin", b"pingx", b"p\xc9ng", b"pong", b"ping\x00",
]  # fmt: skip


def request(rnd: random.Random) -> list[bytes]:
    """One request's arguments, weighted towards PUBLISH and what gates it."""
    ch, pat = rnd.choice(CHANNELS), rnd.choice(PATTERNS)
    msg = message(rnd)
    r = rnd.random()
    if r < 0.45:
        # the commands the loop runs in line, at every count of arguments
        # around theirs and with names one letter off
        args = rnd.choice(IN_LINE)(ch, msg)
        if rnd.random() < 0.1:
            args = args[: rnd.randint(1, 2)] if rnd.random() < 0.5 else [*args, b"extra"]
        if rnd.random() < 0.03:
            args[0] = rnd.choice(NEAR_NAMES)
    else:
        args = rnd.choice(
            [
                [b"subscribe", ch],
                [b"subscribe", ch, rnd.choice(CHANNELS)],
                [b"psubscribe", pat],
                [b"ssubscribe", ch],
                [b"unsubscribe"],
                [b"unsubscribe", ch],
                [b"punsubscribe"],
                [b"sunsubscribe"],
                [b"spublish", ch, msg],
                [b"multi"],
                [b"exec"],
                [b"discard"],
                [b"client", b"reply", rnd.choice([b"on", b"off", b"skip"])],
                [b"hello", rnd.choice([b"2", b"3"])],
                [b"reset"],
                [b"ping"],
                [b"ping", msg],
                [b"echo", msg],
                [b"auth", b"limited", b"pw"],
                [b"auth", b"nochan", b"pw"],
                [b"auth", b"limited", b"wrong"],
                [b"auth", b"default", b"nopass"],
                [b"client", b"pause", b"100000", b"write"],
                [b"client", b"unpause"],
                [b"pubsub", b"numsub", ch],
                [b"config", b"resetstat"],
                # every command timed alone through router/hooks.py (the in-line
                # path off), or timed per batch again
                [b"config", b"set", b"slowlog-log-slower-than", b"0"],
                [b"config", b"set", b"slowlog-log-slower-than", b"10000"],
                [b"slowlog", b"reset"],
                [b"acl", b"setuser", b"default", b"-ping"],
                [b"acl", b"setuser", b"default", b"+ping"],
                [b"acl", b"setuser", b"default", b"-publish"],
                [b"acl", b"setuser", b"default", b"+publish"],
                # a password for the default user: connections opened after
                # it (a QUIT reopens one) start unauthenticated
                [b"acl", b"setuser", b"default", b"resetpass", b">pw"],
                [b"acl", b"setuser", b"default", b"nopass"],
                [b"auth", b"pw"],
                [b"config", b"set", b"client-output-buffer-limit", b"pubsub 3000 0 0"],
                [b"config", b"set", b"client-output-buffer-limit", b"pubsub 0 0 0"],
                # a soft limit: its start is kept until a flush finds nothing pending
                [b"config", b"set", b"client-output-buffer-limit", b"pubsub 0 2000 60"],
                # the normal class: a client that does not read its replies is cut
                [b"config", b"set", b"client-output-buffer-limit", b"normal 3000 0 0"],
                [b"config", b"set", b"client-output-buffer-limit", b"normal 0 2000 60"],
                [b"config", b"set", b"client-output-buffer-limit", b"normal 0 0 0"],
                [b"quit"],
                [b"get", b"k"],
                [b"nosuchcommand", ch],
            ]
        )
    return [case(rnd, args[0]), *args[1:]]


def encode(rnd: random.Random, args: list[bytes]) -> bytes:
    if rnd.random() < 0.1 and all(a and b" " not in a and b"\r" not in a for a in args):
        return b" ".join(args) + b"\r\n"  # inline
    if rnd.random() < 0.005:
        return b"*1\r\n$x\r\n"  # a protocol error: the connection closes
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


SETUP = [
    [b"ACL", b"SETUSER", b"limited", b"on", b">pw", b"+@all", b"-publish", b"allchannels"],
    [b"ACL", b"SETUSER", b"nochan", b"on", b">pw", b"+@all", b"resetchannels"],
]


def snapshot(side: Side) -> Any:
    """What must agree at the end of a script (not times, not addresses)."""
    node = side.node
    stats = node.stats
    conns = []
    for client in side.clients:
        conn = client.conn
        assert conn is not None
        conns.append(
            (
                conn.state,
                conn.reply_mode,
                conn.quiet,
                conn.resp,
                conn.authenticated,
                conn.user.name,
                conn.last_command,
                sorted(conn.channels),
                sorted(conn.patterns),
                sorted(conn.shard_channels),
                conn.parser.buffered,
                conn._soft_limit_since is None,  # (a time: only whether one is set)
            )
        )
    commands = {
        name: (c.calls, c.failed_calls, c.rejected_calls) for name, c in stats.commands.items()
    }
    counters = (
        stats.commands_processed,
        stats.publish_received,
        stats.messages_delivered,
        stats.net_input_bytes,
        dict(stats.errors),
        node.pubsub.publish_seq,
        node.registry.false_positives_received,
        node.registry._window_received,  # the resize policy's window (FP_CHECK_EVERY)
        node.registry._window_false,
        node.registry.filter_epoch,
    )
    return conns, commands, counters


def difference(a: Wire, b: Wire) -> str:
    """Where two clients' outputs part (for the failure message)."""
    x, y = bytes(a.out), bytes(b.out)
    at = next(
        (i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y))
    )
    return (
        f"outputs part at byte {at} (lengths {len(x)}, {len(y)}; closed {a.closed}, "
        f"{b.closed}): before {x[max(at - 200, 0) : at]!r}; reference then "
        f"{x[at : at + 200]!r}; twin then {y[at : at + 200]!r}"
    )


async def script(rnd: random.Random, steps: int) -> None:
    """One script. The loop turn's budget is made deterministic: none, or
    spent at once (every fourth request and every later read of a turn
    slices), the same in both loops; a wall-clock budget would slice where
    the machine happened to be slow."""
    loop = asyncio.get_running_loop()
    failures: list[object] = []
    loop.set_exception_handler(lambda _loop, context: failures.append(context))
    await _script(rnd, steps)
    if failures:  # an exception in a loop callback (a flush, an unblock)
        raise AssertionError(f"a loop callback raised: {failures[0]!r}")


async def _script(rnd: random.Random, steps: int) -> None:
    ref, twin = nodes()
    slice_ns = rnd.choice([1 << 62, 0])
    # a small turn's fan-out budget: PUBLISH answers on the next turn
    fanout = rnd.choice([8 << 20, 600])
    # the resize policy's window ends within a script's forwards too
    every = rnd.choice([FP_CHECK_EVERY, 3, 7])
    for node in (ref, twin):
        node.context.slice_ns = slice_ns
        node.pubsub.fanout_limit = fanout
        node.registry.check_every = every
    # a pub/sub work budget of one operation a turn: a SUBSCRIBE of two
    # names waits, its client blocked, while others publish to it
    if rnd.random() < 0.3:
        for node in (ref, twin):
            node.subscriptions.budget.ops = node.subscriptions.budget.left = 1
    sides = [Side(ref), Side(twin)]
    for args in SETUP:
        data = encode(random.Random(0), args)
        for side in sides:
            side.send(0, data)
    await asyncio.sleep(0)
    for step in range(steps):
        i = rnd.randrange(CLIENTS)
        data = b"".join(encode(rnd, request(rnd)) for _ in range(rnd.choice([1, 1, 2, 5, 16])))
        cuts = sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, rnd.randint(0, 2))))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        for piece in pieces:
            for side in sides:
                side.send(i, piece)
            if rnd.random() < 0.5:
                await asyncio.sleep(0)
        if rnd.random() < 0.2:  # a PUBLISH (or SPUBLISH) a peer forwarded
            forwarded = (rnd.choice(CHANNELS), message(rnd), rnd.random() < 0.2)
            for side in sides:
                side.node.pubsub.deliver_forwarded(PEER, step, *forwarded)
        elif rnd.random() < 0.1:  # a read's run of them
            run, count = forwarded_run(rnd, step)
            errors = []
            for side in sides:
                try:
                    side.node.pubsub.deliver_forwarded_run(PEER, list(run), count)
                    errors.append(None)
                except IndexError as exc:
                    errors.append(repr(exc))
            if errors[0] != errors[1]:
                raise AssertionError(f"step {step}, a forwarded run: {errors}")
        if rnd.random() < 0.7:
            await asyncio.sleep(0)
        if rnd.random() < 0.3:  # a client starts or stops reading its socket
            k = rnd.randrange(CLIENTS)
            for side in sides:
                wire = side.wires[k]
                wire.drains = not wire.drains
                wire.taken = len(wire.out) if wire.drains else wire.taken
        for side in sides:
            side.pump()
        for k in range(CLIENTS):
            a, b = sides[0].wires[k], sides[1].wires[k]
            if a.out != b.out or a.closed != b.closed:
                raise AssertionError(f"step {step}, client {k}: {difference(a, b)}")
            if a.closed:
                for side in sides:
                    side.clients[k].connection_lost(None)
                    side.open(k)
    for _ in range(3):
        await asyncio.sleep(0)
    one, two = snapshot(sides[0]), snapshot(sides[1])
    if one != two:
        raise AssertionError(f"end of script: reference {one!r}\n twin {two!r}")


def run(count: int, seed: int, steps: int = 40) -> int:
    rnd = random.Random(seed)
    for _ in range(count):
        asyncio.run(script(random.Random(rnd.getrandbits(64)), steps))
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="scripts")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=40, help="steps per script")
    args = parser.parse_args(argv)
    start = time.monotonic()
    run(args.count, args.seed, args.steps)
    print(
        f"fuzz_loop: {args.count} scripts x {args.steps} steps agree "
        f"(seed {args.seed}, {time.monotonic() - start:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
