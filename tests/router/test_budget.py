"""The shared per-loop-turn budget of bulk work (router/budget.py), in-process:
big (un)subscribes, disconnect cleanup, RESET and PUBSUB listings run over
several loop turns, with Redis's bytes and in order, while other clients are
served between the slices (issue 28 item 4). Order is asserted, never time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from bench.hot_path import CountingTransport
from router.budget import OPS_PER_TURN, Budget
from router.client import Client
from router.config import NodeConfig
from router.node import Node

N = 5 * OPS_PER_TURN  # names: more than one turn's budget


class Recording(CountingTransport):
    def __init__(self) -> None:
        super().__init__()
        self.data = b""

    def write(self, data: bytes) -> None:
        super().write(data)
        self.data += data


def bulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def confirmations(kind: bytes, names: list[bytes], counts: list[int]) -> bytes:
    return b"".join(
        b"*3\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n:%d\r\n" % (len(kind), kind, len(n), n, c)
        for n, c in zip(names, counts, strict=True)
    )


def in_node(
    scenario: Callable[[Node, Callable[[], tuple[Client, Recording]]], Awaitable[None]],
) -> None:
    async def main() -> None:
        node = Node(NodeConfig(port=0))

        def client() -> tuple[Client, Recording]:
            c = node.client_class(node)
            t = Recording()
            c.connection_made(t)  # type: ignore[arg-type]
            return c, t

        await scenario(node, client)

    asyncio.run(main())


async def turns_until(done: Callable[[], bool], limit: int = 10_000) -> int:
    for turn in range(limit):
        if done():
            return turn
        await asyncio.sleep(0)
    raise AssertionError("never done")


def test_budget_admits_what_fits_and_runs_jobs_round_robin():
    async def main() -> None:
        budget = Budget(ops=10, seconds=1.0)
        assert budget.admit(6) and not budget.admit(6) and budget.admit(4)
        ran: list[str] = []

        class Job:
            def __init__(self, name: str, steps: int) -> None:
                self.name, self.left, self.done = name, steps, False

            def step(self, ops: int) -> int:
                ran.append(self.name)
                self.left -= 1
                self.done = not self.left
                return 5

        budget.queue(Job("a", 3))
        budget.queue(Job("b", 1))
        assert budget.pending == 2
        await asyncio.sleep(0)
        assert ran == ["a", "b"]  # one turn: 10 operations, round robin
        await asyncio.sleep(0)
        assert ran == ["a", "b", "a", "a"]  # the next turn: a fresh budget
        assert budget.pending == 0
        await asyncio.sleep(0)
        assert budget.admit(10)  # the budget is whole again once idle

    asyncio.run(main())


def test_a_big_subscribe_and_bare_unsubscribe_are_sliced_in_order():
    async def scenario(node: Node, client: Callable[[], tuple[Client, Recording]]) -> None:
        a, ta = client()
        b, tb = client()
        names = [b"ch:%d" % i for i in range(N)]
        a.data_received(bulk(b"SUBSCRIBE", *names) + b"PING\r\n")
        await asyncio.sleep(0)
        assert a.conn.blocked is not None  # sliced: its PING waits behind it
        b.data_received(b"PING\r\n")  # another client is served meanwhile
        await asyncio.sleep(0)
        assert tb.data == b"+PONG\r\n" and not ta.data
        await turns_until(lambda: a.conn.blocked is None)
        await asyncio.sleep(0)
        pong = b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"  # RESP2 PING, subscribed
        assert ta.data == confirmations(b"subscribe", names, list(range(1, N + 1))) + pong
        assert len(node.pubsub.channels) == N

        ta.data = b""
        a.data_received(b"UNSUBSCRIBE\r\nPING\r\n")
        await asyncio.sleep(0)
        assert a.conn.blocked is not None
        await turns_until(lambda: a.conn.blocked is None)
        await asyncio.sleep(0)
        # every name once, counts N-1 .. 0 (Redis's order is its dict's: any)
        # (the PING came after the last unsubscribe: no longer subscribed)
        body, _, rest = ta.data.rpartition(b":0\r\n")
        assert rest == b"+PONG\r\n"
        body += b":0\r\n"
        assert body.count(b"$11\r\nunsubscribe\r\n") == N
        assert body.endswith(b":0\r\n") and not node.pubsub.channels and not a.conn.channels
        assert node.registry.channel_filter.set_bits == 0

    in_node(scenario)


def test_disconnected_clients_are_dropped_over_several_turns():
    async def scenario(node: Node, client: Callable[[], tuple[Client, Recording]]) -> None:
        clients = []
        for c in range(4):
            cl, _ = client()
            cl.data_received(bulk(b"SUBSCRIBE", *[b"c%d:%d" % (c, i) for i in range(N // 2)]))
            cl.data_received(bulk(b"PSUBSCRIBE", *[b"p%d:%d:*" % (c, i) for i in range(50)]))
            clients.append(cl)
        await turns_until(
            lambda: len(node.pubsub.channels) == 4 * (N // 2) and len(node.pubsub.patterns) == 200
        )
        for cl in clients:
            cl.connection_lost(None)
        assert node.pubsub.channels  # not all at once
        turns = await turns_until(lambda: not node.pubsub.channels and not node.pubsub.patterns)
        assert turns > 1
        assert node.registry.channel_filter.set_bits == 0
        assert (
            node.registry.pattern_filter.fingerprint()
            == Node(NodeConfig(port=0)).registry.pattern_filter.fingerprint()
        )

    in_node(scenario)


def test_reset_waits_for_its_unsubscribe_all():
    async def scenario(node: Node, client: Callable[[], tuple[Client, Recording]]) -> None:
        a, ta = client()
        a.data_received(bulk(b"SUBSCRIBE", *[b"ch:%d" % i for i in range(N)]))
        # N bulks are more than SLICE_BULKS: a parser may read them in slices
        # (the reference path and the compiled one do), so wait for the run
        await turns_until(lambda: a.conn.blocked is None and len(node.pubsub.channels) == N)
        await asyncio.sleep(0)  # the confirmations written
        ta.data = b""
        a.data_received(b"RESET\r\nPING\r\n")
        await turns_until(lambda: b"+PONG" in ta.data)
        assert ta.data == b"+RESET\r\n+PONG\r\n" and not node.pubsub.channels

    in_node(scenario)


def test_sliced_listings_give_the_bytes_of_one_go():
    async def scenario(node: Node, client: Callable[[], tuple[Client, Recording]]) -> None:
        a, _ = client()
        names = [b"ch:%d" % i for i in range(N)]
        a.data_received(bulk(b"SUBSCRIBE", *names))
        # parsed in slices by the reference path and the compiled parser
        await turns_until(lambda: a.conn.blocked is None and len(node.pubsub.channels) == N)
        b, tb = client()
        asked = [b"ch:%d" % i for i in range(0, 2 * N, 2)]
        b.data_received(bulk(b"PUBSUB", b"NUMSUB", *asked) + bulk(b"PUBSUB", b"CHANNELS", b"ch:1*"))
        await turns_until(lambda: b.conn.blocked is None and not b._sliced, 100)
        await turns_until(lambda: b.conn.blocked is None)
        await asyncio.sleep(0)
        numsub = b"*%d\r\n" % (2 * len(asked)) + b"".join(
            b"$%d\r\n%b\r\n:%d\r\n" % (len(n), n, int(n[3:]) < N) for n in asked
        )
        listed = [n for n in node.pubsub.channels if n.startswith(b"ch:1")]  # the table's order
        channels = b"*%d\r\n" % len(listed) + b"".join(
            b"$%d\r\n%b\r\n" % (len(n), n) for n in listed
        )
        assert tb.data == numsub + channels

    in_node(scenario)


def test_a_publish_past_the_turns_fanout_bytes_answers_next_turn():
    """1,000 slow subscribers of big messages: a pipeline of PUBLISH is
    written a turn at a time, its replies in order (issue 28)."""

    async def scenario(node: Node, client: Callable[[], tuple[Client, Recording]]) -> None:
        node.pubsub.fanout_limit = 1000
        subs = [client() for _ in range(3)]
        for sub, _ in subs:
            sub.data_received(bulk(b"SUBSCRIBE", b"big"))
        await asyncio.sleep(0)
        pub, tp = client()
        pub.data_received(bulk(b"PUBLISH", b"big", b"x" * 400) * 3 + b"PING\r\n")
        await asyncio.sleep(0)
        assert pub.conn.blocked is not None  # 3 x 400 bytes queued: past 1,000
        await turns_until(lambda: b"+PONG" in tp.data)
        assert tp.data == b":3\r\n" * 3 + b"+PONG\r\n"
        frame = b"*3\r\n$7\r\nmessage\r\n$3\r\nbig\r\n$400\r\n" + b"x" * 400 + b"\r\n"
        for _, t in subs:
            assert t.data.endswith(frame * 3)

    in_node(scenario)
