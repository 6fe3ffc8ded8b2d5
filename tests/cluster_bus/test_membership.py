"""cluster_bus.membership: failure detection and gossip rules with a fake clock."""

import random

from cluster_bus.frames import GossipEntry, NodeFlags
from cluster_bus.membership import FORGET_TTL_MS, Membership

TIMEOUT = 1000


def nid(i: int) -> str:
    return f"{i:040x}"


def cluster(n: int) -> Membership:
    m = Membership(nid(0), "127.0.0.1", 7000, 17000, TIMEOUT, random.Random(1))
    for i in range(1, n):
        assert m.learn(nid(i), "127.0.0.1", 7000 + i, 17000 + i, 0) is not None
    return m


def entry(i: int, flags: int = 0) -> GossipEntry:
    return GossipEntry(nid(i), "127.0.0.1", 7000 + i, 17000 + i, flags, 0)


def test_learn_is_idempotent_and_ignores_myself():
    m = cluster(3)
    assert m.learn(nid(1), "127.0.0.1", 7001, 17001, 5) is None
    assert m.learn(nid(0), "127.0.0.1", 7000, 17000, 5) is None
    assert sorted(m.peers) == [nid(1), nid(2)]


def test_ping_timeout_flags_pfail_and_pong_clears_it():
    m = cluster(3)
    m.ping_sent(nid(1), 100)
    assert m.check_timeouts(100 + TIMEOUT) == []
    assert not m.peers[nid(1)].failing
    m.check_timeouts(101 + TIMEOUT)
    assert m.peers[nid(1)].flags & NodeFlags.PFAIL
    assert m.peers[nid(1)].flag_names() == "master,fail?"
    assert m.pong_received(nid(1), 2000) is True
    assert not m.peers[nid(1)].failing


def test_majority_of_reports_marks_fail():
    m = cluster(5)  # quorum 3 of 5
    assert m.quorum() == 3
    m.ping_sent(nid(4), 1)  # times are ms since the epoch: never 0
    assert m.check_timeouts(TIMEOUT + 2) == []  # only our own suspicion: 1 < 3
    _, failed = m.gossip_received(nid(1), (entry(4, NodeFlags.PFAIL),), TIMEOUT + 2)
    assert failed == []  # 2 < 3
    _, failed = m.gossip_received(nid(2), (entry(4, NodeFlags.PFAIL),), TIMEOUT + 3)
    assert failed == [nid(4)]
    assert m.peers[nid(4)].flag_names() == "master,fail"
    assert m.cluster_state() == "ok"


def test_reports_expire_after_twice_the_timeout():
    m = cluster(5)
    m.gossip_received(nid(1), (entry(4, NodeFlags.PFAIL),), 0)
    m.gossip_received(nid(2), (entry(4, NodeFlags.PFAIL),), 0)
    m.ping_sent(nid(4), 3 * TIMEOUT)
    # reports are from t=0; by 4*T+1 they are older than 2T: no quorum
    assert m.check_timeouts(4 * TIMEOUT + 1) == []
    assert m.peers[nid(4)].flags & NodeFlags.PFAIL
    assert m.peers[nid(4)].fail_reports == {}


def test_healthy_gossip_withdraws_a_report():
    m = cluster(5)
    m.gossip_received(nid(1), (entry(4, NodeFlags.PFAIL),), 0)
    m.gossip_received(nid(1), (entry(4),), 10)
    assert m.peers[nid(4)].fail_reports == {}


def test_gossip_learns_new_nodes_but_not_suspected_ones():
    m = cluster(2)
    learned, _ = m.gossip_received(nid(1), (entry(7), entry(8, NodeFlags.FAIL)), 0)
    assert [r.node_id for r in learned] == [nid(7)]
    assert nid(8) not in m.peers
    # gossip from an unknown reporter is ignored
    learned, _ = m.gossip_received(nid(9), (entry(10),), 0)
    assert learned == []


def test_fail_message_accepted_unless_we_hear_from_it():
    m = cluster(3)
    assert m.fail_received(nid(1), 10) is True
    assert m.peers[nid(1)].flags & NodeFlags.FAIL
    rec = m.peers[nid(2)]
    rec.connected = True
    m.pong_received(nid(2), 100)
    assert m.fail_received(nid(2), 200) is False


def test_new_id_at_same_address_replaces_and_forgets_old():
    m = cluster(3)
    new = "f" * 40
    assert m.learn(new, "127.0.0.1", 7001, 17001, 50) is not None
    assert nid(1) not in m.peers
    learned, _ = m.gossip_received(nid(2), (entry(1),), 60)
    assert learned == []  # forgotten id not re-learned
    # after the TTL it may be learned again (and then replaces `new` at that address)
    learned, _ = m.gossip_received(nid(2), (entry(1),), 60 + FORGET_TTL_MS)
    assert [r.node_id for r in learned] == [nid(1)]


def test_minority_partition_is_cluster_state_fail():
    m = cluster(5)
    for i in (1, 2, 3):
        m.fail_received(nid(i), 0)
    assert m.cluster_state() == "fail"


def test_gossip_sample_puts_failing_nodes_first():
    m = cluster(6)
    m.fail_received(nid(5), 0)
    sample = m.gossip_sample(nid(1), 2)
    assert sample[0].node_id == nid(5) and sample[0].flags & NodeFlags.FAIL
    assert all(g.node_id != nid(1) for g in m.gossip_sample(nid(1), 10))


def test_forgotten_node_speaking_directly_is_learned_again():
    m = cluster(3)
    m.forget(nid(1), 0)
    assert m.learn(nid(1), "127.0.0.1", 7001, 17001, 10) is None  # gossip: ignored
    assert m.learn(nid(1), "127.0.0.1", 7001, 17001, 10, direct=True) is not None
