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
