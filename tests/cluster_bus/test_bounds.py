"""The bus's per-node maps that grow with what peers do stay bounded (issue 41,
docs/architecture.md §11): lost nodes (``MAX_LOST``), the sessions kept for
forgotten peers (``MAX_RETAINED``), the routing cache (``ROUTE_CACHE_SIZE``).
Each bound is made small here so the test reaches it; the forwarding's and
the routing cache's on both data planes (a compiled module reads its bound
from its module's globals, as the Python one)."""

from __future__ import annotations

import logging
import os
import random
import sys

import pytest

from cluster_bus import dataplane, membership
from cluster_bus.info import BusStats
from cluster_bus.membership import Membership
from cluster_bus.mesh import Mesh


@pytest.fixture(params=["python", "compiled"])
def bus_plane(request: pytest.FixtureRequest) -> dataplane.BusPlane:
    """The bus's Python classes, then its compiled ones (skipped only on a
    pure build, ``BLOOMCAST_NO_EXTENSIONS=1``)."""
    if request.param == "python":
        return dataplane.python()
    try:
        return dataplane.compiled()
    except ImportError:
        if os.environ.get(dataplane.ENV):
            pytest.skip("a pure build (BLOOMCAST_NO_EXTENSIONS=1): no compiled plane")
        raise


def nid(i: int) -> str:
    return f"{i:040x}"


def test_lost_nodes_are_bounded_the_oldest_dropped_first(monkeypatch):
    monkeypatch.setattr(membership, "MAX_LOST", 3)
    m = Membership(nid(0), "127.0.0.1", 7000, 17000, 2000, random.Random(1), period_ms=100)
    for i in range(1, 6):
        m.learn(nid(i), "127.0.0.1", 7000 + i, 17000 + i, 0)
    for i in range(1, 6):
        m.forget(nid(i), 1000 * i, lost=True)  # each lost later than the one before
    assert sorted(m.lost) == [nid(3), nid(4), nid(5)]
    assert (nid(1), True) in m.removed and (nid(2), True) in m.removed


def test_sessions_kept_for_forgotten_peers_are_bounded(bus_plane, monkeypatch, caplog):
    monkeypatch.setattr(sys.modules[bus_plane.Forwarding.__module__], "MAX_RETAINED", 2)
    stats = BusStats()
    f = bus_plane.Forwarding(
        None,  # type: ignore[arg-type]
        bus_plane.PeerTable(),
        Mesh(lambda node_id: 1, stats),
        stats,
        sender=1,
        replay_bytes=1 << 20,
        replay_ms=10_000,
    )
    with caplog.at_level(logging.WARNING, logger="bloomcast.bus"):
        for i in range(1, 5):
            f.forget(nid(i), ended=False, now=i)
    assert sorted(f._retained) == [nid(3), nid(4)]
    assert sum("forgotten nodes kept" in r.getMessage() for r in caplog.records) == 2


def test_the_routing_cache_is_bounded(bus_plane, monkeypatch):
    monkeypatch.setattr(sys.modules[bus_plane.PeerTable.__module__], "ROUTE_CACHE_SIZE", 8)
    table = bus_plane.PeerTable()
    for i in range(100):
        table.route(b"ch:%d" % i)
        table.route(b"s:%d" % i, shard=True)
    assert 0 < len(table._cache) <= 8 and 0 < len(table._shard_cache) <= 8


def test_the_rate_limited_log_keeps_at_most_4096_causes(caplog):
    from netutil.rate_limited_log import RateLimitedLog

    warnings = RateLimitedLog()
    with caplog.at_level(logging.WARNING, logger="bloomcast.bus"):
        for i in range(5000):
            assert warnings.warn("refused", f"10.0.{i // 256}.{i % 256}:1", "no")
    assert len(warnings._last) <= 4096


def test_forgotten_ids_are_swept_once_expired(monkeypatch):
    monkeypatch.setattr(membership, "MAX_FORGOTTEN", 16)
    m = Membership(nid(0), "127.0.0.1", 7000, 17000, 2000, random.Random(1), period_ms=100)
    for i in range(1, 200):
        m.forget(nid(i), i * membership.FORGET_TTL_MS)  # each past the last one's ban
    assert len(m._forgotten) <= 16
