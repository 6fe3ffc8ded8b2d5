"""Subscribe-visibility waits: a future that resolves when every expected peer
acked, when a peer it waits for goes away, or on timeout (counted)."""

from __future__ import annotations

import asyncio

from cluster_bus.info import BusStats
from cluster_bus.visibility import Visibility


def test_future_resolves_on_the_last_ack_only():
    async def scenario() -> None:
        stats = BusStats()
        vis = Visibility(5000, stats)
        wait = vis.open()
        vis.expect(wait, "p1", 1)
        vis.expect(wait, "p2", 1)
        fut = vis.future(wait, asyncio.get_running_loop())
        vis.acked("p1", 1)
        vis.acked("p1", 99)  # an unknown delta id is ignored
        assert not fut.done()
        vis.acked("p2", 1)
        assert fut.done() and stats.visibility_waits == 1 and stats.visibility_timeouts == 0

    asyncio.run(scenario())


def test_a_wait_with_nothing_to_wait_for_is_done_at_once():
    async def scenario() -> None:
        vis = Visibility(5000, BusStats())
        assert vis.future(vis.open(), asyncio.get_running_loop()).done()

    asyncio.run(scenario())


def test_an_unreachable_peer_no_longer_counts():
    async def scenario() -> None:
        vis = Visibility(5000, BusStats())
        wait = vis.open()
        vis.expect(wait, "gone", 3)
        fut = vis.future(wait, asyncio.get_running_loop())
        vis.peer_gone("other")
        assert not fut.done()
        vis.peer_gone("gone")
        assert fut.done()

    asyncio.run(scenario())


def test_timeout_resolves_and_is_counted():
    async def scenario() -> None:
        stats = BusStats()
        vis = Visibility(30, stats)
        wait = vis.open()
        vis.expect(wait, "slow", 4)
        fut = vis.future(wait, asyncio.get_running_loop())
        await asyncio.wait_for(fut, 2)
        assert stats.visibility_timeouts == 1
        vis.acked("slow", 4)  # a late ack finds no wait
        assert stats.visibility_timeouts == 1

    asyncio.run(scenario())
