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
        vis.expect_peers(wait, ["p1"], 1)
        vis.expect_peers(wait, ["p2"], 1)
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
        vis.expect_peers(wait, ["gone"], 3)
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
        vis.expect_peers(wait, ["slow"], 4)
        fut = vis.future(wait, asyncio.get_running_loop())
        await asyncio.wait_for(fut, 2)
        assert stats.visibility_timeouts == 1
        vis.acked("slow", 4)  # a late ack finds no wait
        assert stats.visibility_timeouts == 1

    asyncio.run(scenario())


def test_a_batch_is_one_wait_over_its_deltas_and_the_stop_ends_one_not_announced():
    """Every SUBSCRIBE of a loop turn gets the batch's one future; the wait
    over the batch's two deltas (channels, patterns) ends on the last ACK of
    both, and forgets its delta ids (a late ACK finds nothing). A batch the
    bus stopped before announcing still resolves."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        vis = Visibility(5000, BusStats())
        fut = vis.batch(loop)
        assert vis.batch(loop) is fut
        assert vis.take_batch() is fut and vis.take_batch() is None
        wait = vis.open()
        for peer in ("p1", "p2"):
            for delta in (7, 8):
                vis.expect_peers(wait, [peer], delta)
        assert vis.future(wait, loop, fut) is fut
        for peer, delta in (("p1", 7), ("p1", 8), ("p2", 7)):
            vis.acked(peer, delta)
            assert not fut.done()
        vis.acked("p2", 8)
        assert fut.done()
        assert not vis._of_delta and not vis._deltas and not vis._pending
        pending = vis.batch(loop)
        vis.stop()
        assert pending.done()

    asyncio.run(scenario())


def test_expect_peers_waits_for_each_peer_of_the_batch():
    """The announcer's one call per batch (issue 48): the wait ends on the
    last of the peers' ACKs of that delta id, an ACK of another id or from
    a peer not expected counts for nothing, and a peer gone is not waited for."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        vis = Visibility(5000, BusStats())
        wait = vis.open()
        vis.expect_peers(wait, ["p1", "p2", "p3"], 5)
        fut = vis.future(wait, loop)
        for peer, delta in (("p1", 5), ("p2", 4), ("p9", 5), ("p2", 5)):
            vis.acked(peer, delta)
            assert not fut.done()
        vis.peer_gone("p3")
        assert fut.done()
        assert not vis._of_delta and not vis._pending

    asyncio.run(scenario())


def test_a_peer_that_timed_out_is_not_waited_for_until_it_acks_again():
    """A peer that let a wait time out is lagging: the next wait leaves it out
    (counted) and ends on the other peers' ACKs; once it acks again (a late
    ACK of the old delta), later waits wait for it again."""

    async def scenario() -> None:
        stats = BusStats()
        vis = Visibility(30, stats)
        loop = asyncio.get_running_loop()
        wait = vis.open()
        vis.expect_peers(wait, ["slow", "fast"], 1)
        fut = vis.future(wait, loop)
        vis.acked("fast", 1)
        await asyncio.wait_for(fut, 2)
        assert stats.visibility_timeouts == 1 and vis.lagging == {"slow"}
        wait = vis.open()
        vis.expect_peers(wait, ["slow", "fast"], 2)
        fut = vis.future(wait, loop)
        assert not fut.done()
        vis.acked("fast", 2)
        assert fut.done() and stats.visibility_skipped == 1
        vis.acked("slow", 1)  # it answers again
        assert not vis.lagging
        wait = vis.open()
        vis.expect_peers(wait, ["slow", "fast"], 3)
        fut = vis.future(wait, loop)
        vis.acked("fast", 3)
        assert not fut.done()  # waited for again
        vis.acked("slow", 3)
        assert fut.done() and stats.visibility_skipped == 1 and stats.visibility_timeouts == 1

    asyncio.run(scenario())
