"""bloomcast.testing.ports: the ports every test, benchmark and the demo listen on."""

from __future__ import annotations

from bloomcast.testing.ports import LOWEST_PORT, RECENT, ephemeral_range, free_port, free_ports


def test_picks_in_a_row_never_repeat_a_recent_port():
    """Nothing holds a picked port until its server binds it, so successive
    picks must not hand it out again (two nodes of one test cluster were once
    given one client port: the second could not listen)."""
    picked = [free_port() for _ in range(RECENT // 2)] + free_ports(RECENT // 2)
    assert len(set(picked)) == len(picked)


def test_ports_come_from_below_the_ephemeral_range():
    low, _ = ephemeral_range()
    assert all(LOWEST_PORT <= p < low for p in free_ports(64))


def test_an_xdist_worker_picks_only_its_share(monkeypatch):
    """Under ``pytest -n 4`` worker gw2 hands out only ports p % 4 == 2, so
    two workers never start servers on one port (and a default bus port,
    port + 10000, stays in the same share)."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    picked = free_ports(64) + [free_port() for _ in range(16)]
    assert {p % 4 for p in picked} == {2}
    assert {(p + 10000) % 4 for p in picked} == {2}
