"""A cluster bus that loses nothing silently: real node processes, real faults,
a numbered ledger (bloomcast/testing/faults.py, ledger.py, scenarios.py).

Three nodes, a publisher on node 0 (A) at ~300 PUBLISH/s, a channel and a
pattern subscriber on node 1 (B), every cache primed before the fault. Inside
the replay window every live subscriber must get every message once, in
order; beyond it the loss must be exactly what B counts, logs and announces
(redis/redis #122: "you may lose messages without knowing it").
"""

from __future__ import annotations

import json
import re
import time

import pytest

from bloomcast.testing.chaos import ChaosSettings, Fault, run_chaos
from bloomcast.testing.faults import (
    NetnsCluster,
    ProxiedCluster,
    info,
    netns_unavailable,
    pause,
    resume,
)
from bloomcast.testing.process import parse_info as info_of
from bloomcast.testing.scenarios import NODE_ARGS, FaultRun
from tests.integration.conftest import assert_chaos_verdict

pytestmark = [pytest.mark.cluster, pytest.mark.faults]

LOSS_CHANNEL = "__bloomcast__:loss"


def counter(cluster, i: int, name: str) -> int:
    return int(info(cluster, i).get(name, 0))


def node_id(cluster, i: int) -> str:
    """Node ``i``'s id: the ``myself`` line of its CLUSTER NODES."""
    with cluster.client(i) as r:
        lines = r.execute_command("CLUSTER", "NODES").decode().splitlines()
    return next(line.split()[0] for line in lines if "myself" in line)


def assert_clean(run: FaultRun) -> None:
    verdicts = run.verdicts()
    print({k: v.as_dict() for k, v in verdicts.items()})  # the ledger, with pytest -s
    assert set(verdicts) == set(run.current), f"subscribers gone: {verdicts}"
    for v in verdicts.values():
        assert v.expected > 300, v  # the fault happened while publishing
        assert v.clean, v.as_dict()


@pytest.fixture
def cluster(tmp_path):
    with ProxiedCluster(3, extra_args=list(NODE_ARGS), log_dir=tmp_path / "logs") as c:
        yield c


def started(cluster) -> FaultRun:
    run = FaultRun((cluster.host, cluster.ports[0]), (cluster.host, cluster.ports[1]))
    run.start()
    run.publish_for(0.5)
    return run


@pytest.mark.slow
def test_restart_on_same_ports_delivers_everything_after_resubscribe(cluster):
    """kill -9 B, restart it on the same ports (a new node id), subscribe again:
    every message published after the confirmation arrives (a stale route to
    the dead id once swallowed them all)."""
    run = started(cluster)
    try:
        old_id = node_id(cluster, 1)
        cluster.kill(1)
        time.sleep(0.5)  # A keeps publishing to the dead incarnation
        cluster.restart(1)
        assert node_id(cluster, 1) != old_id
        run.resubscribe()
        run.finish(after=1.5)
        assert_clean(run)
    finally:
        run.stop()


def test_proxy_reset_inside_the_replay_window_loses_nothing(cluster):
    run = started(cluster)
    try:
        for proxy in cluster.proxies:
            proxy.reset(1.0)
        time.sleep(1.0)
        run.finish()
        assert_clean(run)
        assert sum(p.counts["connections_reset"] for p in cluster.proxies) > 0
        assert counter(cluster, 0, "cluster_stats_publish_replayed") > 0
        assert counter(cluster, 1, "cluster_stats_publish_lost") == 0
    finally:
        run.stop()


def test_proxy_stall_shorter_than_node_timeout_loses_nothing(cluster):
    run = started(cluster)
    try:
        for proxy in cluster.proxies:
            proxy.stall(1.2)
        time.sleep(0.2)
        moved = sum(p.counts["bytes"] for p in cluster.proxies)
        time.sleep(0.8)
        # the stall is real: no byte crossed any proxy for most of it
        assert sum(p.counts["bytes"] for p in cluster.proxies) == moved
        time.sleep(0.2)
        run.finish()
        assert_clean(run)
        assert counter(cluster, 1, "cluster_stats_publish_lost") == 0
    finally:
        run.stop()


def test_dropped_publish_frames_are_found_and_replayed(cluster):
    run = started(cluster)
    try:
        replayed = counter(cluster, 0, "cluster_stats_publish_replayed")
        for proxy in cluster.proxies:
            proxy.drop_frames(5)
        deadline = time.monotonic() + 5
        while sum(p.counts["frames_dropped"] for p in cluster.proxies) < 5:
            assert time.monotonic() < deadline, "the proxies dropped no PUBLISH frame"
            time.sleep(0.01)
        for proxy in cluster.proxies:
            proxy.pass_through()
        run.finish()
        assert_clean(run)
        assert counter(cluster, 1, "cluster_stats_sequence_gaps") > 0
        assert counter(cluster, 0, "cluster_stats_publish_replayed") - replayed >= 5
        assert counter(cluster, 1, "cluster_stats_publish_lost") == 0
    finally:
        run.stop()


def test_dropped_tail_of_a_burst_is_found_without_a_later_frame(cluster):
    """A whole burst dropped and nothing published after it: no later frame
    reveals the gap, so the sender's per-tick SESSION must (one gap, found by
    it), and the replay brings every frame (session.py)."""
    run = started(cluster)
    try:
        pub = run.ledger.publisher
        pub.pause()
        run.ledger.drain(pub.published, 10, run.current)
        gaps = counter(cluster, 1, "cluster_stats_sequence_gaps")
        replayed = counter(cluster, 0, "cluster_stats_publish_replayed")
        for proxy in cluster.proxies:  # A's forwards to B cross exactly one of them
            proxy.drop_frames(5)
        pub.burst(5)
        deadline = time.monotonic() + 5
        while sum(p.counts["frames_dropped"] for p in cluster.proxies) < 5:
            assert time.monotonic() < deadline, "the proxies dropped no PUBLISH frame"
            time.sleep(0.01)
        for proxy in cluster.proxies:
            proxy.pass_through()
        run.last = pub.published
        run.ledger.drain(run.last, 10, run.current)
        verdicts = run.verdicts()
        print({k: v.as_dict() for k, v in verdicts.items()})
        for v in verdicts.values():
            assert v.clean, v.as_dict()
        assert sum(p.counts["frames_dropped"] for p in cluster.proxies) == 5
        assert counter(cluster, 1, "cluster_stats_sequence_gaps") == gaps + 1
        assert counter(cluster, 0, "cluster_stats_publish_replayed") - replayed == 5
    finally:
        run.stop()


@pytest.mark.slow
def test_sigstop_past_the_node_timeout_loses_nothing(cluster):
    run = started(cluster)
    try:
        pause(cluster, 1)
        try:
            deadline = time.monotonic() + 6
            flagged = False
            while time.monotonic() < deadline and not flagged:
                nodes = cluster.client(0).execute_command("CLUSTER", "NODES").decode()
                flagged = any("fail" in line.split()[2] for line in nodes.splitlines())
                time.sleep(0.1)
            assert flagged, "A never suspected the stopped node"
            time.sleep(0.5)
        finally:
            resume(cluster, 1)
        run.finish(after=2.0)
        assert_clean(run)
        assert counter(cluster, 1, "cluster_stats_publish_lost") == 0
    finally:
        run.stop()


@pytest.mark.slow
def test_cable_pull_between_namespaces_loses_nothing(tmp_path):
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with NetnsCluster(3, extra_args=list(NODE_ARGS), log_dir=tmp_path / "logs") as cluster:
        run = FaultRun(
            (cluster.addresses[0], cluster.ports[0]),
            (cluster.addresses[1], cluster.ports[1]),
            netns=cluster.hub,
        )
        try:
            run.start()
            run.publish_for(0.5)
            cluster.cable(1, up=False)
            time.sleep(3.0)  # past the node timeout: no RST, just silence
            cluster.cable(1, up=True)
            run.finish(after=2.0, drain_timeout=40.0)
            assert_clean(run)
            assert int(cluster.info(1).get("cluster_stats_publish_lost", 0)) == 0
            assert int(cluster.info(0).get("cluster_stats_publish_replayed", 0)) > 0
        finally:
            run.stop()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["notify", "disconnect"])
def test_loss_beyond_the_replay_window_is_counted_exactly(tmp_path, policy):
    """A replay window of 300 ms, B cut off for 2.5 s: what B counts, logs and
    announces on the loss channel is exactly what the ledger lost; with
    ``--on-publish-loss disconnect`` exactly the subscribers of data channels
    are closed (the loss-channel-only subscriber stays)."""
    args = [*NODE_ARGS, "--cluster-replay-buffer-ms", "300", "--on-publish-loss", policy]
    logs = tmp_path / "logs"
    with ProxiedCluster(3, extra_args=args, log_dir=logs) as cluster:
        run = FaultRun(
            (cluster.host, cluster.ports[0]),
            (cluster.host, cluster.ports[1]),
            extra_channels=(LOSS_CHANNEL,),
        )
        try:
            run.start()
            run.publish_for(0.5)
            for proxy in cluster.proxies:
                proxy.reset(2.5)
            time.sleep(2.5)
            if policy == "notify":
                run.finish(after=1.5)
            else:
                subs = run.ledger.subscribers
                for name in ("channel", "pattern"):
                    assert subs[name].wait_closed(10), f"{name} was not disconnected"
                run.last = run.ledger.publisher.stop()
            loss_sub = run.ledger.subscribers["extra"]
            deadline = time.monotonic() + 5
            while not loss_sub.other and time.monotonic() < deadline:
                time.sleep(0.05)
            lost_counted = counter(cluster, 1, "cluster_stats_publish_lost")
            b = info(cluster, 1)
            notes = [json.loads(data) for channel, data in loss_sub.other]
            print(policy, "counted", lost_counted, "notes", notes)
            print({k: v.as_dict() for k, v in run.verdicts().items()})
            assert lost_counted > 0
            assert int(b["total_forwards_lost"]) == lost_counted
            assert sum(n["lost"] for n in notes) == lost_counted, notes
            a_id = node_id(cluster, 0)
            assert {n["node"] for n in notes} == {a_id}
            with cluster.client(1) as r:
                per_origin = info_of(r.execute_command("INFO", "forwards_lost"))
            assert per_origin == {f"from_{a_id}": str(lost_counted)}
            # the loss may be learned in steps (one SESSION per link, a frame aging
            # out between a SESSION and the RESEND): every step is logged
            log = (logs / "node-1.log").read_text()
            logged = re.findall(rf"(\d+) forwarded PUBLISH from node {a_id} lost", log)
            assert sum(map(int, logged)) == lost_counted, log
            assert [int(n) for n in logged] == [n["lost"] for n in notes]
            if policy == "notify":
                for v in run.verdicts().values():
                    assert v.lost == lost_counted, v.as_dict()
                    assert v.duplicated == 0 and v.reordered == 0, v.as_dict()
            else:
                assert not loss_sub.closed
                assert int(b["loss_disconnections"]) == 2
                for name in ("channel", "pattern"):
                    got = set(run.ledger.subscribers[name].numbers("p"))
                    assert got, name
        finally:
            run.stop()


# -- faults that outlive every timeout (issue 26): five nodes in namespaces ----------


def fixed_run(tmp_path, *faults: Fault, node_timeout_ms: int = 2000, seconds: float = 0.0):
    end = max(f.end for f in faults)
    settings = ChaosSettings(
        duration=max(seconds, end),
        faults=list(faults),
        node_timeout_ms=node_timeout_ms,
        log_dir=tmp_path / "logs",
    )
    return run_chaos(settings)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("namespaces")
def test_a_node_cut_off_past_timeout_and_forget_heals_and_counts_exactly(tmp_path):
    """Node 2 cut from the four others for 15 s at node timeout 2 s: both sides
    mark the other FAIL (2 s), forget it (10 s later), and must still find each
    other when the cut heals; what the replay window (10 s) could not hold is
    counted, with time bounds, on both sides."""
    result = fixed_run(tmp_path, Fault("partition", 2.0, 15.0, (2,), (0, 1, 3, 4)))
    assert_chaos_verdict(result)
    assert result.verdict.totals()["counted"] > 0


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("namespaces")
def test_a_pause_past_the_forget_time_is_counted_not_lost(tmp_path):
    """SIGSTOP node 1 for 14 s (node timeout 2 s, forget at 10 s after FAIL):
    its peers forget it, and when it is back its subscribers' missed messages
    are delivered (from replay buffers, or from TCP buffers that the stopped
    process's kernel kept filling) or counted; no peer counts a phantom loss
    of what it had received (the outside report's case: 574 lost uncounted,
    100 phantom on each peer)."""
    result = fixed_run(tmp_path, Fault("pause", 2.0, 14.0, (1,)))
    assert_chaos_verdict(result)
    stopped = result.record.lives[1][0].node_id
    logs = "".join((tmp_path / "logs" / f"node-{i}.log").read_text() for i in (0, 2, 3, 4))
    assert f"node {stopped} forgotten (in FAIL" in logs  # the pause outlived the forget time


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("namespaces")
def test_repeated_compound_faults_each_shorter_than_the_forget_time_heal(tmp_path):
    """Twice: a 6 s partition, a 5 s pause, a 6.8 s partition, so nodes 0 and 3
    cannot reach each other for ~18 s in a row although no fault alone outlives
    node timeout + forget time (the outside report's split of 72 s)."""
    faults = []
    for t in (2.0, 22.0):
        faults += [
            Fault("partition", t, 6.0, (0, 1), (2, 3, 4)),
            Fault("pause", t + 6.0, 5.0, (3,)),
            Fault("partition", t + 11.0, 6.8, (0, 4), (1, 2, 3)),
        ]
    assert_chaos_verdict(fixed_run(tmp_path, *faults))


@pytest.mark.long
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("namespaces")
def test_a_120_s_cut_at_the_default_node_timeout_heals(tmp_path):
    """Node timeout 15 s (the default): node 4 cut off for 120 s, so both sides
    forget each other (FAIL at 15 s, forgotten 75 s later) long before it heals."""
    result = fixed_run(
        tmp_path, Fault("partition", 2.0, 120.0, (4,), (0, 1, 2, 3)), node_timeout_ms=15000
    )
    assert_chaos_verdict(result, node_timeout_s=15.0)
    assert result.verdict.totals()["counted"] > 0
