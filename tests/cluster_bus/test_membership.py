"""cluster_bus.membership: SWIM probing, suspicion, refutation and gossip with a fake clock."""

import random

from cluster_bus.dissemination import Broadcasts, retransmit_limit
from cluster_bus.frames import GossipEntry, NodeFlags, Ping
from cluster_bus.info import sync_state
from cluster_bus.membership import (
    FORGET_TTL_MS,
    INDIRECT_PROBES,
    RANDOM_ENTRIES,
    REPLACED_TTL_MS,
    UPDATES_PER_MESSAGE,
    Membership,
)
from cluster_bus.probes import ProbeStep
from cluster_bus.routing import PeerTable

TIMEOUT = 1000
PERIOD = 100


def nid(i: int) -> str:
    return f"{i:040x}"


def cluster(n: int, me: int = 0) -> Membership:
    m = Membership(
        nid(me), "127.0.0.1", 7000 + me, 17000 + me, TIMEOUT, random.Random(1), period_ms=PERIOD
    )
    for i in range(n):
        if i != me:
            rec = m.learn(nid(i), "127.0.0.1", 7000 + i, 17000 + i, 0)
            assert rec is not None
            rec.connected = rec.heard = True
    return m


def entry(i: int, flags: int = 0, incarnation: int = 0, epoch: int = 0, cfp: int = 0):
    return GossipEntry(nid(i), "127.0.0.1", 7000 + i, 17000 + i, flags, incarnation, epoch, cfp, 0)


def heartbeat(i: int, incarnation: int = 0, epoch: int = 0, cfp: int = 0) -> Ping:
    return Ping(
        nid(i), "127.0.0.1", 7000 + i, 17000 + i, cfp, 0, epoch, 0, False, 0, (), incarnation
    )


def ack_everything(m: Membership, now: int) -> None:
    for i in m.peers:
        m.heard_from(heartbeat(int(i, 16), m.peers[i].incarnation), now, pong=True)


def test_learn_is_idempotent_and_ignores_myself_and_my_address():
    m = cluster(3)
    assert m.learn(nid(1), "127.0.0.1", 7001, 17001, 5) is None
    assert m.learn(nid(0), "127.0.0.1", 7000, 17000, 5) is None
    # gossip about a former node at our own bus address (we restarted with a new id)
    assert m.learn(nid(9), "127.0.0.1", 7000, 17000, 5) is None
    assert sorted(m.peers) == [nid(1), nid(2)]


def test_one_probe_per_period_round_robin_covers_every_peer():
    m = cluster(8)
    probed = []
    for period in range(7):
        now = 1 + period * PERIOD
        step = m.probe_tick(now)
        assert step.ping is not None and not step.indirect and not step.suspected
        probed.append(step.ping)
        ack_everything(m, now + 1)
    assert sorted(probed) == sorted(m.peers)  # each peer exactly once per round


def test_unanswered_probe_goes_indirect_then_suspect_then_fail():
    m = cluster(6)
    step = m.probe_tick(1)
    target = step.ping
    assert target is not None
    others = [i for i in m.peers if i != target]
    for i in others:  # everyone but the target keeps answering
        m.heard_from(heartbeat(int(i, 16)), 2, pong=True)
    step = m.probe_tick(1 + PERIOD)
    assert len(step.indirect) == INDIRECT_PROBES
    assert all(t == target and via in others for via, t in step.indirect)
    assert m.indirect_probes == INDIRECT_PROBES
    assert not m.peers[target].failing
    step = m.probe_tick(1 + 2 * PERIOD)
    assert step.suspected == [target]
    assert m.peers[target].flag_names() == "master,fail?"
    assert m.suspicions == 1
    assert target in m.broadcasts  # the suspicion is gossiped
    suspected_at = 1 + 2 * PERIOD
    step = m.probe_tick(suspected_at + m.suspicion_timeout_ms - 1)
    assert step.failed == []
    step = m.probe_tick(suspected_at + m.suspicion_timeout_ms)
    assert step.failed == [target]
    assert m.peers[target].flag_names() == "master,fail"
    # a FAIL node is still probed (so it can learn it must refute), but an
    # unanswered probe of it leads nowhere
    pings = []
    for period in range(12):
        now = suspected_at + TIMEOUT + period * PERIOD
        for i in others:
            m.heard_from(heartbeat(int(i, 16)), now - 1, pong=True)
        step = m.probe_tick(now)
        assert all(t != target for _, t in step.indirect)
        assert target not in step.suspected + step.failed
        pings.append(step.ping)
    assert target in pings


def test_failure_is_declared_about_node_timeout_after_the_probe():
    m = cluster(2)
    step = m.probe_tick(1)
    assert step.ping == nid(1)
    now = 1
    while not m.peers[nid(1)].flags & NodeFlags.FAIL:
        now += PERIOD
        m.probe_tick(now)
    assert now - 1 == TIMEOUT  # two probe periods + the suspicion timeout


def test_indirect_ack_prevents_suspicion():
    m = cluster(4)
    target = m.probe_tick(1).ping
    assert target is not None
    assert m.probe_tick(1 + PERIOD).indirect
    m.probe_acked(target, 1 + PERIOD + 5)  # a helper reached it: our link is the problem
    step = m.probe_tick(1 + 2 * PERIOD)
    assert step.suspected == [] and not m.peers[target].failing


def test_a_peer_never_heard_from_is_not_probed():
    """A node known only from gossip is being met (its link may not be up
    yet on a loaded machine), not failing: no probe of it, so no suspicion."""
    m = cluster(3)
    m.gossip_received(nid(1), (entry(7),), 1)
    for period in range(10):
        now = 1 + period * PERIOD
        ack_everything_but(m, nid(7), now)
        step = m.probe_tick(now)
        assert step.ping != nid(7) and not step.suspected
    m.heard_from(heartbeat(7), 1 + 10 * PERIOD, pong=True)  # met: probed from now on
    pings = []
    for period in range(10, 16):
        now = 1 + period * PERIOD
        ack_everything(m, now)
        pings.append(m.probe_tick(now).ping)
    assert nid(7) in pings


def ack_everything_but(m: Membership, but: str, now: int) -> None:
    for i in m.peers:
        if i != but and m.peers[i].heard:
            m.heard_from(heartbeat(int(i, 16), m.peers[i].incarnation), now, pong=True)


def test_health_score_rises_on_doubt_and_falls_on_acks():
    """Lifeguard's events (memberlist state.go): a probe unanswered even
    through the helpers +1, a suspicion of us to refute +1, a late timer of
    ours +1, a probe answered -1; kept within 0 .. 7."""
    m = cluster(4)
    health = m.awareness
    target = m.probe_tick(1).ping
    assert target is not None
    m.probe_tick(1 + PERIOD)  # indirect
    m.probe_tick(1 + 2 * PERIOD)  # no ack at all: suspected
    assert m.peers[target].failing and health.score == 1
    assert m.refute(0) and health.score == 2
    assert m.loop_lag(5 * PERIOD, 1 + 3 * PERIOD) and health.score == 3
    assert not m.loop_lag(m.lag_limit_ms, 1 + 4 * PERIOD) and health.score == 3
    for _ in range(20):
        m.refute(m.myself.incarnation)
    assert health.score == 7 and health.multiplier == 8  # memberlist's max multiplier
    now = 1 + 5 * PERIOD
    while health.score:
        before = health.score
        ack_everything(m, now - 1)
        step = m.probe_tick(now)
        if step.ping is not None:
            m.heard_from(heartbeat(int(step.ping, 16), 9), now + 1, pong=True)
            m.probe_tick(now + PERIOD)
            assert health.score == before - 1  # answered
            now += PERIOD
        now += PERIOD


def test_a_doubting_node_probes_every_multiplier_periods_and_waits_as_long_per_stage():
    """Score 2 (multiplier 3): a new probe every 3 periods; an unanswered one
    goes indirect 3 periods after its PING and is suspected 3 after that."""
    m = cluster(6)
    m.awareness.apply(2)
    target = m.probe_tick(1).ping
    assert target is not None
    others = [i for i in m.peers if i != target]
    for period in range(1, 7):
        now = 1 + period * PERIOD
        for i in others:
            m.heard_from(heartbeat(int(i, 16)), now - 1, pong=True)
        step = m.probe_tick(now)
        assert bool(step.indirect) == (period == 3)
        assert step.suspected == ([target] if period == 6 else [])
        assert (step.ping is not None) == (period in (3, 6))  # every third period


def test_a_late_period_counts_toward_no_probe_and_ages_no_suspicion():
    """The bus's timer fired late (our process was stopped or starved): that
    period moves no probe on, starts none, and the stall is added to the
    suspicions we hold, so none becomes FAIL for our own silence."""
    m = cluster(4)
    target = m.probe_tick(1).ping
    assert target is not None
    m._suspect(m.peers[nid(3) if target != nid(3) else nid(2)], 1)
    suspect = next(r for r in m.peers.values() if r.failing)
    stalled = 1 + m.suspicion_timeout_ms + 5 * PERIOD  # stopped past the timeout
    assert m.loop_lag(stalled - 1 - PERIOD, stalled)
    step = m.probe_tick(stalled)
    assert step == ProbeStep()  # no indirect probe, no suspicion, no FAIL, no PING
    assert suspect.flags & NodeFlags.PFAIL
    assert m.late_ticks == 1 and m.resumed_ms == stalled
    # the suspicion still ends once it has stood its timeout in periods we ran
    now = stalled
    while not suspect.flags & NodeFlags.FAIL:
        now += PERIOD
        ack_everything_but(m, suspect.node_id, now - 1)
        m.probe_tick(now)
    due = 1 + (stalled - 1 - PERIOD) + m.suspicion_timeout_ms  # the stall added
    assert due <= now < due + PERIOD


def test_gossip_rounds_fall_with_the_health_multiplier():
    from cluster_bus.membership import GOSSIP_ROUNDS_PER_PERIOD

    m = cluster(3)
    assert m.gossip_rounds == GOSSIP_ROUNDS_PER_PERIOD
    m.awareness.apply(1)
    assert m.gossip_rounds == GOSSIP_ROUNDS_PER_PERIOD // 2
    m.awareness.apply(10)
    assert m.gossip_rounds == 1


def test_suspected_node_refutes_and_the_refutation_clears_the_suspicion():
    suspecter, suspect = cluster(3, me=0), cluster(3, me=1)
    suspecter._suspect(suspecter.peers[nid(1)], 10)
    # the suspicion reaches the node itself in a gossip entry about it
    sus_entry = suspecter.gossip_for(nid(1))[0]
    assert sus_entry.node_id == nid(1) and sus_entry.flags & NodeFlags.PFAIL
    suspect.gossip_received(nid(0), (sus_entry,), 20)
    assert suspect.myself.incarnation == 1 and suspect.refutations == 1
    assert nid(1) in suspect.broadcasts  # it gossips itself alive
    # a stale "alive" at the suspected incarnation does not clear the suspicion
    result = suspecter.gossip_received(nid(2), (entry(1, 0, 0),), 30)
    assert result.recovered == [] and suspecter.peers[nid(1)].failing
    # the node's own heartbeat at the new incarnation does
    assert suspecter.heard_from(heartbeat(1, incarnation=1), 40, pong=True) is True
    assert not suspecter.peers[nid(1)].failing
    # and an old suspicion cannot come back
    suspecter.gossip_received(nid(2), (entry(1, NodeFlags.PFAIL, 0),), 50)
    assert not suspecter.peers[nid(1)].failing


def test_gossiped_suspicion_starts_our_own_timer():
    m = cluster(4)
    m.gossip_received(nid(1), (entry(3, NodeFlags.PFAIL),), 100)
    assert m.peers[nid(3)].flag_names() == "master,fail?"
    assert m.suspicions == 0  # not our own suspicion
    step = m.probe_tick(100 + m.suspicion_timeout_ms)
    assert step.failed == [nid(3)]


def test_fail_is_accepted_then_outbid_by_a_higher_incarnation():
    m = cluster(3)
    assert m.fail_received(nid(2), 0, 10) is True
    assert m.fail_received(nid(2), 0, 11) is False  # already failed
    assert m.peers[nid(2)].flag_names() == "master,fail"
    assert m.cluster_state() == "ok"  # 2 of 3 reachable
    result = m.gossip_received(nid(1), (entry(2, 0, incarnation=1),), 20)
    assert result.recovered == [nid(2)]
    assert not m.peers[nid(2)].failing and m.peers[nid(2)].incarnation == 1
    assert m.fail_received(nid(2), 0, 30) is False  # the old FAIL is refuted


def test_fail_about_myself_is_refuted():
    m = cluster(3)
    assert m.refute(0) is True and m.myself.incarnation == 1
    assert m.refute(0) is False  # already outbid


def test_gossip_learns_healthy_nodes_only():
    m = cluster(2)
    result = m.gossip_received(nid(1), (entry(5), entry(6, NodeFlags.FAIL)), 10)
    assert [r.node_id for r in result.learned] == [nid(5)]
    assert nid(6) not in m.peers
    # gossip from a node we do not know is ignored
    assert m.gossip_received(nid(9), (entry(7),), 10).learned == []


def test_newer_filter_epoch_in_gossip_is_reported_older_is_not():
    m = cluster(3)
    m.heard_from(heartbeat(2, epoch=5, cfp=55), 10, pong=True)
    result = m.gossip_received(nid(1), (entry(2, epoch=4, cfp=44),), 20)
    assert result.filters == [] and m.peers[nid(2)].channel_fp == 55
    result = m.gossip_received(nid(1), (entry(2, epoch=6, cfp=66),), 30)
    assert [r.node_id for r in result.filters] == [nid(2)]
    assert (m.peers[nid(2)].filter_epoch, m.peers[nid(2)].channel_fp) == (6, 66)


def test_our_filter_changes_ride_on_the_next_heartbeats():
    m = cluster(5)
    while m.broadcasts.take(100, 5):  # drain the join announcements
        pass
    m.announce_filters(3, 0xAB, 0xCD)
    section = m.gossip_for(nid(1))
    mine = [g for g in section if g.node_id == nid(0)]
    assert mine and (mine[0].filter_epoch, mine[0].channel_fp, mine[0].pattern_fp) == (
        3,
        0xAB,
        0xCD,
    )


def test_gossip_section_is_bounded_and_meet_carries_everyone():
    m = cluster(200)  # every node learned: 199 changes queued
    section = m.gossip_for(nid(1))
    assert len(section) == UPDATES_PER_MESSAGE + RANDOM_ENTRIES
    assert all(g.node_id != nid(1) for g in section)
    while m.broadcasts.take(100, 200):
        pass
    idle = m.gossip_for(nid(1))  # nothing changed: only the random entries
    assert len(idle) == RANDOM_ENTRIES and all(g.node_id != nid(1) for g in idle)
    full = m.gossip_for(nid(1), full=True)
    assert len(full) == 198 and nid(1) not in {g.node_id for g in full}


def test_dissemination_fewest_transmissions_first_and_bounded():
    b = Broadcasts()
    for i in range(3):
        b.queue(nid(i))
    assert b.take(2, 10) == [nid(2), nid(1)]  # newest first among equals
    assert b.take(1, 10) == [nid(0)]  # then the one sent least
    limit = retransmit_limit(10)
    assert limit == 8  # memberlist: 4 * ceil(log10(11))
    sent = 0
    while b.take(3, 10):
        sent += 1
    assert len(b) == 0 and sent == limit - 1


def test_forgotten_node_is_not_relearned_from_gossip_until_ttl():
    m = cluster(3)
    assert m.forget(nid(2), 1000) is not None
    assert m.gossip_received(nid(1), (entry(2),), 2000).learned == []
    assert nid(2) not in m.peers
    assert m.learn(nid(2), "127.0.0.1", 7002, 17002, 2000, direct=True) is not None
    m.forget(nid(2), 3000)
    learned = m.gossip_received(nid(1), (entry(2),), 3000 + FORGET_TTL_MS).learned
    assert [r.node_id for r in learned] == [nid(2)]


def test_new_id_at_same_address_replaces_the_old_one():
    m = cluster(3)
    assert m.learn(nid(8), "127.0.0.1", 9999, 17002, 10, direct=True) is not None
    assert nid(2) not in m.peers and nid(8) in m.peers
    assert m.gossip_received(nid(1), (entry(2),), 20).learned == []  # old id forgotten


def test_an_address_taken_from_the_link_replaces_no_node_and_is_replaced_by_none():
    """tests/integration/test_multihost.py, one run in four: nodes 0 and 1,
    bound to 0.0.0.0, met node 2 behind a forwarder before they had learned
    their own IPs; node 2 saw both come from the forwarder's address, and the
    second banned the first for REPLACED_TTL_MS (10 min): never converged."""
    m = cluster(1)
    hub = "10.213.7.254"
    assert m.learn(nid(1), hub, 7000, 17000, 10, direct=True, inferred=True) is not None
    assert m.learn(nid(2), hub, 7000, 17000, 11, direct=True, inferred=True) is not None
    assert sorted(m.peers) == [nid(1), nid(2)] and m.removed == []
    assert m.peers[nid(1)].inferred
    # nor does an announced address end a node whose address was taken from its link
    assert m.learn(nid(3), hub, 7000, 17000, 12, direct=True) is not None
    assert sorted(m.peers) == [nid(1), nid(2), nid(3)]
    # an announced address still replaces an announced one (a restart with a new id)
    assert m.learn(nid(4), hub, 7000, 17000, 13, direct=True) is not None
    assert nid(3) not in m.peers and nid(4) in m.peers
    # a node known only at its link's address is not gossiped until it announces one
    for full in (True, False):
        for _ in range(20):
            assert {e.node_id for e in m.gossip_for(nid(9), full=full)} <= {nid(4)}


def test_a_new_id_at_a_known_address_replaces_the_old_one_once_it_announces_it():
    """A node bound to 0.0.0.0 restarted with a new id (no nodes file) first
    speaks without a host (it learns its IP from the MEETs it receives): its
    record, at the address its link came from, replaces the old id only when
    it announces that address, and then as a restart always did."""
    m = cluster(3)
    new = m.learn(nid(8), "127.0.0.1", 7002, 17002, 10, direct=True, inferred=True)
    assert new is not None and nid(2) in m.peers  # not yet: it announced nothing
    m.announced(new, 20)
    assert nid(2) not in m.peers and nid(8) in m.peers and not new.inferred
    assert [e.node_id for e in m.gossip_for(nid(1), full=True)].count(nid(8)) == 1


def test_a_replaced_id_stays_out_even_from_its_own_late_frames():
    """Chaos seed 11: a killed node's heartbeat, queued in its orphaned socket
    behind a stalled path, arrived 11 s after its successor joined; read as the
    dead id's own heartbeat it brought that id back and, by the address rule,
    ended the successor's life: its forwarding sessions were dropped and 452
    frames the receiver had were counted lost (phantom)."""
    m = cluster(3)
    assert m.learn(nid(8), "127.0.0.1", 9999, 17002, 10, direct=True) is not None
    m.removed.clear()
    # the dead id's late frame, past the gossip ban, is refused and ends nothing
    late = 10 + FORGET_TTL_MS + 1
    assert m.learn(nid(2), "127.0.0.1", 7002, 17002, late, direct=True) is None
    assert nid(8) in m.peers and nid(2) not in m.peers
    assert m.removed == []
    # after REPLACED_TTL_MS the id may speak for itself again (a real node)
    back = 10 + REPLACED_TTL_MS
    assert m.learn(nid(2), "127.0.0.1", 7002, 17002, back, direct=True) is not None
    assert nid(8) not in m.peers


def test_a_node_that_left_may_come_back_with_its_id_at_once():
    """LEAVE ends a life but is no ban: a node restarted with its
    --cluster-config-file keeps its id and is heard at once."""
    m = cluster(3)
    m.forget(nid(2), 1000, ended=True)
    assert m.learn(nid(2), "127.0.0.1", 7002, 17002, 1001, direct=True) is not None


def test_minority_partition_reports_cluster_fail():
    m = cluster(5)
    for i in (1, 2, 3):
        m.fail_received(nid(i), 0, 0)
    assert m.cluster_state() == "fail"


def test_a_peer_whose_link_closed_is_probed_next():
    m = cluster(20)
    m.probe_tick(1)
    m.probes.probe_next(nid(7))
    assert m.probe_tick(1 + PERIOD).ping == nid(7)


def test_cluster_forget_bans_even_the_nodes_own_heartbeats_until_ttl():
    m = cluster(3)
    assert m.forget(nid(2), 1000, banned=True) is not None
    assert m.learn(nid(2), "127.0.0.1", 7002, 17002, 2000, direct=True) is None
    assert m.gossip_received(nid(1), (entry(2),), 2000).learned == []
    assert nid(2) not in m.peers
    # the ban ends after FORGET_TTL_MS: a node still talking comes back
    assert m.learn(nid(2), "127.0.0.1", 7002, 17002, 1000 + FORGET_TTL_MS, direct=True)
    assert nid(2) in m.peers


def test_node_in_fail_is_forgotten_after_fail_forget_ms():
    forget_ms = 5 * TIMEOUT
    m = Membership(nid(0), "127.0.0.1", 7000, 17000, TIMEOUT, random.Random(1), PERIOD, forget_ms)
    for i in (1, 2):
        m.learn(nid(i), "127.0.0.1", 7000 + i, 17000 + i, 0)
    assert m.fail_received(nid(2), 0, 1000)
    assert m.probe_tick(1000 + forget_ms - 1).forgotten == []
    assert nid(2) in m.peers
    step = m.probe_tick(1000 + forget_ms)
    assert step.forgotten == [nid(2)]
    assert nid(2) not in m.peers and nid(1) in m.peers
    # gossip about it is ignored for a while; the node itself may rejoin at once
    assert m.gossip_received(nid(1), (entry(2),), 1000 + forget_ms).learned == []
    assert m.learn(nid(2), "127.0.0.1", 7002, 17002, 1000 + forget_ms, direct=True)


def test_fail_forget_ms_zero_never_forgets():
    m = cluster(3)
    assert m.fail_forget_ms == 0
    m.fail_received(nid(2), 0, 0)
    assert m.probe_tick(10 * FORGET_TTL_MS).forgotten == []
    assert nid(2) in m.peers


def expire(m: Membership, i: int, at: int) -> None:
    """Node ``i`` fails at ``at`` and stands in FAIL past ``fail_forget_ms``."""
    assert m.fail_received(nid(i), m.peers[nid(i)].incarnation, at)
    assert nid(i) in m.probe_tick(at + m.fail_forget_ms).forgotten


def forgetting(n: int, me: int = 0) -> Membership:
    m = Membership(
        nid(me), "127.0.0.1", 7000 + me, 17000 + me, TIMEOUT, random.Random(1), PERIOD, 5 * TIMEOUT
    )
    for i in range(n):
        if i != me:
            m.learn(nid(i), "127.0.0.1", 7000 + i, 17000 + i, 0)
    return m


def test_a_node_forgotten_after_fail_is_lost_not_gone():
    """Issue 26: forgetting a FAIL node keeps it as lost (its address to
    redial, a vote in cluster_state); only its own return, a new id at its
    address, or CLUSTER FORGET remove it, and only the last two end its life."""
    m = forgetting(3)
    expire(m, 2, 1000)
    assert nid(2) not in m.peers and set(m.lost) == {nid(2)}
    lost = m.lost[nid(2)]
    assert (lost.host, lost.bus_port) == ("127.0.0.1", 17002)
    assert m.removed == []  # still routed: the bus keeps its sessions and filters
    # it speaks again (the partition healed): known again, nothing removed
    assert m.learn(nid(2), "127.0.0.1", 7002, 17002, 20_000, direct=True) is not None
    assert m.lost == {} and m.removed == []
    # lost again, then a new node id at its address: the old life has ended
    expire(m, 2, 30_000)
    assert m.learn(nid(9), "127.0.0.1", 7002, 17002, 40_000, direct=True) is not None
    assert m.lost == {} and m.removed == [(nid(2), True)]
    # CLUSTER FORGET: removed, its life not known to be over
    m.removed.clear()
    m.forget(nid(1), 50_000, banned=True)
    assert m.removed == [(nid(1), False)]
    m.removed.clear()
    m.forget(nid(9), 60_000, ended=True)  # LEAVE
    assert m.removed == [(nid(9), True)]


def test_a_node_cut_off_from_the_nodes_it_had_never_reports_ok():
    """The minority side of a partition longer than the forget time: once it
    forgot the others it knows only itself, which must not read as a healthy
    one-node cluster (issue 26)."""
    m = forgetting(5)
    for i in (1, 2, 3, 4):
        expire(m, i, 1000)
    assert m.peers == {} and len(m.lost) == 4
    assert m.cluster_state() == "fail"
    # the majority side forgot the one node it lost and stays ok
    big = forgetting(5, me=1)
    expire(big, 0, 1000)
    assert big.cluster_state() == "ok"


def test_only_a_node_our_own_dial_reached_at_its_address_is_verified():
    m = cluster(3)
    rec = m.peers[nid(2)]
    assert not m.verified(rec)
    m.dial_reached(nid(2), ("127.0.0.1", 17002))
    assert m.verified(rec)
    # it announces another address: not verified there until dialled again
    rec.host = "10.9.9.9"
    assert not m.verified(rec)


def test_an_address_being_met_shows_for_the_handshake_timeout():
    m = cluster(1)
    m.handshakes[("10.0.0.9", 17009)] = ("ab" * 20, 1000, 7009)
    assert m.pending_handshakes(1000 + TIMEOUT - 1) == [(("10.0.0.9", 17009), "ab" * 20, 7009)]
    assert m.pending_handshakes(1000 + max(TIMEOUT, 1000)) == []
    m.dial_reached(nid(5), ("10.0.0.9", 17009))
    assert m.handshakes == {}


def test_a_node_with_an_address_in_its_handshake_is_not_converged():
    """The seed of a LocalCluster, started first, knew the others only as two
    addresses in their handshake (cluster_known_nodes 3) and said
    cluster_filters_converged:1 with no link at all: the cluster was called
    ready, and /healthz answered 503 right after."""
    m = cluster(1)
    routing = PeerTable()
    assert sync_state(m, routing, lambda _: True, 1000).converged  # alone
    m.handshakes[("10.0.0.9", 17009)] = ("ab" * 20, 1000, 7009)
    assert not sync_state(m, routing, lambda _: True, 1000 + TIMEOUT - 1).converged
    # past Redis's handshake timeout the address is no longer shown (still dialled)
    assert sync_state(m, routing, lambda _: True, 1000 + max(TIMEOUT, 1000)).converged
    m.handshakes[("10.0.0.9", 17009)] = ("ab" * 20, 5000, 7009)
    m.dial_reached(nid(5), ("10.0.0.9", 17009))
    assert sync_state(m, routing, lambda _: True, 5001).converged


def test_an_address_a_known_node_holds_is_not_shown_in_handshake_too():
    """cluster up: the seed's node reached us (inbound) before our dial to it
    completed; CLUSTER NODES listed it twice, once as a handshake node."""
    m = cluster(3)
    m.handshakes[("127.0.0.1", 17002)] = ("ab" * 20, 1000, 7002)  # nid(2)'s address
    m.handshakes[("10.0.0.9", 17009)] = ("cd" * 20, 1000, 7009)  # nobody's yet
    assert [key for key, _, _ in m.pending_handshakes(1001)] == [("10.0.0.9", 17009)]


def test_the_failing_peers_a_period_looks_at_are_exactly_those_flagged():
    """A period visits only the peers flagged PFAIL or FAIL (its cost flat in
    N): the set it walks follows every way a flag is set or cleared."""
    m = cluster(6)

    def flagged() -> set[str]:
        return {i for i, r in m.peers.items() if r.failing}

    m._suspect(m.peers[nid(1)], 10)  # our own suspicion
    m.gossip_received(nid(2), (entry(3, NodeFlags.PFAIL),), 10)  # a gossiped one
    m.fail_received(nid(4), 0, 10)  # a FAIL broadcast
    assert m._failing == flagged() == {nid(1), nid(3), nid(4)}
    m.heard_from(heartbeat(1, incarnation=1), 20, pong=True)  # refuted
    m.forget(nid(4), 20)
    m.probe_tick(20 + m.suspicion_timeout_ms)  # the gossiped suspicion times out: FAIL
    assert m.peers[nid(3)].flags & NodeFlags.FAIL
    assert m._failing == flagged() == {nid(3)}
