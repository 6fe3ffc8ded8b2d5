"""Subscribe visibility on the node side: a held (P)SUBSCRIBE confirmation.

With subscribe visibility the ClusterLink returns a future from
``filters_changed``; the node must send the confirmation only when it
resolves, and — as Redis always does — before any message on that
subscription, even one published locally while the confirmation was held.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from cluster_bus.api import FilterChange, NoPeers
from router.config import NodeConfig
from router.node import Node
from tests.router.fakes import RecordingLink


@contextlib.asynccontextmanager
async def node_with(link: NoPeers) -> AsyncIterator[Node]:
    """A started in-process node whose ClusterLink is ``link``."""
    node = Node(NodeConfig(port=0))
    await node.start()
    node.set_link(link)
    try:
        yield node
    finally:
        await node.stop()


class HeldLink(NoPeers):
    """A link whose filter announcements wait until the test releases them."""

    def __init__(self) -> None:
        super().__init__("0" * 40, "127.0.0.1", 0)
        self.pending: list[asyncio.Future[None]] = []

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        return fut


async def _read_frames(reader: asyncio.StreamReader, n: int) -> list[bytes]:
    """Read n RESP2 arrays of three or four bulk/int elements, as raw bytes."""
    frames = []
    for _ in range(n):
        head = await asyncio.wait_for(reader.readline(), 5)
        count = int(head[1:])
        body = b""
        for _ in range(count):
            line = await asyncio.wait_for(reader.readline(), 5)
            body += line
            if line.startswith(b"$"):
                body += await asyncio.wait_for(reader.readline(), 5)
        frames.append(head + body)
    return frames


def test_confirmation_is_held_and_precedes_messages():
    async def scenario() -> None:
        link = HeldLink()
        async with node_with(link) as node:
            sub_r, sub_w = await asyncio.open_connection("127.0.0.1", node.port)
            pub_r, pub_w = await asyncio.open_connection("127.0.0.1", node.port)
            sub_w.write(b"SUBSCRIBE news\r\n")
            await sub_w.drain()
            for _ in range(50):  # until the node registered it and asked the link
                if link.pending:
                    break
                await asyncio.sleep(0.01)
            assert link.pending, "the subscribe did not announce a filter change"
            pub_w.write(b"PUBLISH news early\r\n")
            await pub_w.drain()
            assert await asyncio.wait_for(pub_r.readline(), 5) == b":1\r\n"
            # nothing reaches the subscriber while its confirmation is held
            try:
                early = await asyncio.wait_for(sub_r.read(1), 0.2)
            except TimeoutError:
                early = b""
            assert early == b""
            for fut in link.pending:
                fut.set_result(None)
            frames = await _read_frames(sub_r, 2)
            assert frames[0] == b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
            assert frames[1] == b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nearly\r\n"
            for w in (sub_w, pub_w):
                w.close()

    asyncio.run(scenario())


def test_one_command_announces_one_merged_change_per_filter():
    """SUBSCRIBE a b c is one delta round: one call, one change per filter,
    whose positions and fingerprint are the filter's state after the command."""

    async def scenario() -> None:
        link = RecordingLink()
        async with node_with(link) as node:
            r, w = await asyncio.open_connection("127.0.0.1", node.port)
            w.write(b"SUBSCRIBE a b c\r\nPSUBSCRIBE x* y*\r\nUNSUBSCRIBE a b c\r\n")
            await _read_frames(r, 3 + 2 + 3)
            assert len(link.calls) == 3
            subscribe, psubscribe, unsubscribe = link.calls
            cf = node.registry.channel_filter
            assert [c.filter for c in subscribe] == ["channels"]
            assert not subscribe[0].cleared_positions
            assert [c.filter for c in psubscribe] == ["patterns"]
            assert psubscribe[0].fingerprint == node.registry.pattern_filter.fingerprint()
            assert [c.filter for c in unsubscribe] == ["channels"]
            assert sorted(unsubscribe[0].cleared_positions) == sorted(subscribe[0].set_positions)
            assert unsubscribe[0].fingerprint == cf.fingerprint() and cf.set_bits == 0
            w.close()

    asyncio.run(scenario())


def test_a_pipeline_runs_behind_a_held_confirmation_and_its_replies_keep_order():
    """SUBSCRIBE a, SUBSCRIBE b, UNSUBSCRIBE a in one write: all three run
    (their changes reach the link in the same loop turn, one announced
    batch) while the first confirmation is held; nothing is written until
    every wait ends; then the replies in order, and the message published
    meanwhile after them; the PING behind them waits for the confirmations."""

    async def scenario() -> None:
        link = HeldLink()
        async with node_with(link) as node:
            sub_r, sub_w = await asyncio.open_connection("127.0.0.1", node.port)
            pub_r, pub_w = await asyncio.open_connection("127.0.0.1", node.port)
            sub_w.write(b"SUBSCRIBE a\r\nSUBSCRIBE b\r\nUNSUBSCRIBE a\r\nPING\r\n")
            await sub_w.drain()
            for _ in range(50):
                if len(link.pending) >= 2:
                    break
                await asyncio.sleep(0.01)
            # both subscribes announced before either was acknowledged (the
            # UNSUBSCRIBE too: this link makes every change wait)
            assert len(link.pending) == 3
            pub_w.write(b"PUBLISH b early\r\n")
            await pub_w.drain()
            assert await asyncio.wait_for(pub_r.readline(), 5) == b":1\r\n"
            link.pending[0].set_result(None)
            try:
                early = await asyncio.wait_for(sub_r.read(1), 0.2)
            except TimeoutError:
                early = b""
            assert early == b""  # the second subscribe's wait still holds all
            for fut in link.pending[1:]:
                fut.set_result(None)
            frames = await _read_frames(sub_r, 5)
            assert frames == [
                b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n",
                b"*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n",
                b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n",
                b"*3\r\n$7\r\nmessage\r\n$1\r\nb\r\n$5\r\nearly\r\n",
                b"*2\r\n$4\r\npong\r\n$0\r\n\r\n",
            ]
            for w in (sub_w, pub_w):
                w.close()

    asyncio.run(scenario())
