"""bench.membership_sim: the real Membership of N nodes in virtual time."""

from bench.membership_sim import Sim, node_id, report, simulate
from cluster_bus.frames import NodeFlags


def test_idle_cost_per_node_is_flat_in_n_and_everything_completes():
    small, large = simulate(10, 2000, 200), simulate(40, 2000, 200)
    for r in (small, large):
        assert r.idle_suspicions == 0
        # one PING and one PONG per node per period, whatever N
        assert abs(r.idle_msgs_per_node_s - 2 * 1000 / 200) < 0.5
        assert r.first_suspicion_s <= r.detect_s <= 2 * r.node_timeout_ms / 1000
        assert r.heal_s < 20 * r.node_timeout_ms / 1000  # healed, not timed out
        assert all(p < 20 for p in r.missed_delta_periods)
    assert large.idle_bytes_per_node_s <= 1.3 * small.idle_bytes_per_node_s
    # the all-pairs design grows with N
    assert large.allpairs_msgs_per_node_s > 4 * small.allpairs_msgs_per_node_s
    assert "| 40 |" in report([small, large])


def test_partition_fails_the_other_side_and_healing_clears_it():
    sim = Sim(8, node_timeout_ms=1000, period_ms=100)
    sim.run_until(500)
    for i in range(8):
        sim.side[i] = i % 2
    sim.run_until(sim.now + 3000)
    for nd in sim.nodes:
        for j in range(8):
            if j != nd.index:
                flags = nd.ms.peers[node_id(j)].flags
                same_side = j % 2 == nd.index % 2
                assert bool(flags & NodeFlags.FAIL) != same_side, (nd.index, j, flags)
    sim.side.clear()
    sim.run_until(sim.now + 10000)
    assert all(not r.failing for nd in sim.nodes for r in nd.ms.peers.values())
    # everyone who was failed refuted with a higher incarnation
    assert all(nd.ms.myself.incarnation >= 1 for nd in sim.nodes)


def test_a_slow_cpu_storms_before_lifeguard_and_not_after():
    """CpuSim: 40 nodes on one core whose CPU is 100x slower for 30 s. Before
    issue 40 (no local health awareness) the nodes read their own late timers
    as their peers' silence: false suspicions and FAILs; with Lifeguard,
    (almost) none, and less traffic meanwhile. Nobody died: every one is false."""
    from bench.membership_sim import simulate_slow_cpu

    kw = dict(slow_factor=100.0, slow_s=30.0, node_timeout_ms=5000, period_ms=500, cores=1)
    before = simulate_slow_cpu(40, lifeguard=False, **kw)
    after = simulate_slow_cpu(40, lifeguard=True, **kw)
    assert before.max_lag_s > 5  # the CPU was short: timers ran seconds late
    assert before.suspicions >= 5 and before.fails >= 5, before
    assert after.suspicions <= before.suspicions // 5, after
    assert after.fails <= before.fails // 5, after
    assert after.msgs_per_node_s < before.msgs_per_node_s
    for r in (before, after):
        assert r.quiet_s is not None  # both calm down once the CPU is back
