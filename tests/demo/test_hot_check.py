"""The demo's live hot-channels check (issue 51) on a real 2-node cluster: the
oracle is fed with what the test published, the node's BLOOMCAST.HOTCHANNELS
CLUSTER top 10 agrees within the stated error; an oracle that disagrees (a
channel published more than the nodes saw) fails the check."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from bloomcast.demo.checks import hot_check
from bloomcast.demo.drive import DriveResult, live_hot_channels
from bloomcast.testing import LocalCluster

pytestmark = pytest.mark.cluster

#: 14 channels, skewed (Zipf-like), published from both nodes
COUNTS = {f"ch.{i}": 240 // (i + 1) for i in range(14)}


async def _run(ports: list[int]) -> DriveResult:
    result = DriveResult()
    clients = [aioredis.Redis(host="127.0.0.1", port=p) for p in ports]
    try:
        for k, (channel, n) in enumerate(COUNTS.items()):
            r = clients[k % 2]
            for _ in range(n):
                result.published(channel)
                await r.publish(channel, b"m")
        await live_hot_channels(clients[1], result)
    finally:
        for c in clients:
            await c.aclose()
    return result


def test_the_live_top_10_agrees_with_the_oracle_and_a_wrong_oracle_fails() -> None:
    with LocalCluster(2, extra_args=["--loglevel", "warning"]) as cluster:
        cluster.wait_ready()
        result = asyncio.run(_run(cluster.ports))
    assert result.hot_error == ""
    assert [n for n, _, _ in result.hot_live] == [f"ch.{i}" for i in range(10)]
    check = hot_check(result)
    assert check.ok, check.detail
    assert check.detail.startswith("10/10 of the exact top 10 by 1 m rate in the live top 10")

    # the oracle says ch.12 had 200 publishes more than the nodes saw: it belongs
    # in the top 10, the live view lacks it, and its rate is off
    for _ in range(200):
        result.published("ch.12")
    wrong = hot_check(result)
    assert not wrong.ok
    assert "ch.12 (exact" in wrong.detail and "missing from the live top 10" in wrong.detail

    result.hot_live, result.hot_error = [], "ERR unknown command"
    assert hot_check(result).detail == "no live answer: ERR unknown command"
