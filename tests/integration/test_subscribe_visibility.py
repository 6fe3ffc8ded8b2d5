"""Redis Cluster's delivery semantics by default (issue 27 item 1): with no flag
at all, a PUBLISH made on any node right after a SUBSCRIBE / PSUBSCRIBE /
SSUBSCRIBE reply reaches that subscriber, as Redis Cluster's broadcast does;
a stopped peer bounds the wait (counted, logged); ``--subscribe-visibility-
timeout 0`` keeps the old, immediate reply."""

from __future__ import annotations

import re
import time

import pytest

from bloomcast.testing import LocalCluster
from bloomcast.testing.faults import pause, resume
from bloomcast.testing.visibility import RawConn, subscribe_then_publish

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def default_cluster(tmp_path_factory):
    # no subscribe-visibility flag: the defaults are what is under test
    with LocalCluster(3, log_dir=tmp_path_factory.mktemp("logs")) as c:
        yield c


def test_publish_right_after_a_remote_subscribe_is_delivered_by_default(default_cluster):
    got = subscribe_then_publish(default_cluster.ports, 60)
    assert got.delivered == got.expected == 60
    waits = sorted(got.waits)
    print(f"SUBSCRIBE reply p50 {waits[30] * 1000:.2f} ms, max {waits[-1] * 1000:.2f} ms")
    fields = [default_cluster.cluster_info(i) for i in range(3)]
    assert sum(int(f["cluster_subscribe_visibility_waits"]) for f in fields) >= 60
    assert all(f["cluster_subscribe_visibility_timeouts"] == "0" for f in fields)


def wait_for_receive_queues(port: int, n: int, timeout: float = 10.0) -> None:
    """Until ``n`` sockets listening-side on ``port`` (127.0.0.1) hold unread
    bytes (``/proc/net/tcp``'s rx_queue)."""
    local = f"0100007F:{port:04X}"
    deadline = time.monotonic() + timeout
    while True:
        with open("/proc/net/tcp") as f:
            rows = [line.split() for line in f.readlines()[1:]]
        held = sum(1 for r in rows if r[1] == local and int(r[4].split(":")[1], 16) > 0)
        if held >= n:
            return
        assert time.monotonic() < deadline, f"{held} of {n} sockets hold their SUBSCRIBE"
        time.sleep(0.01)


def test_a_loop_turns_subscribes_cost_each_peer_one_delta(default_cluster):
    """SUBSCRIBEs of 50 connections read in one loop turn (sent while the
    node is stopped, so its first poll after SIGCONT finds all 50) are
    announced as ONE FILTER_DELTA to each peer and acked once; each
    connection's reply still waits for the ACKs, so a PUBLISH on a peer right
    after the replies reaches every subscriber (issue 48: they cost each peer
    50 deltas and 50 ACKs)."""
    c = default_cluster

    def deltas(i: int, way: str) -> int:
        return int(c.cluster_info(i)[f"cluster_stats_filter_deltas_{way}"])

    subs = [RawConn(c.ports[0]) for _ in range(50)]
    for sub in subs:
        assert sub.call("PING") == b"PONG"  # accepted and served
    time.sleep(0.2)  # nothing of an earlier test still in flight
    before = [deltas(0, "sent"), deltas(1, "received"), deltas(2, "received")]
    pause(c, 0)
    try:
        for k, sub in enumerate(subs):
            sub.send("SUBSCRIBE", f"turn.{k}")
        # every SUBSCRIBE in node 0's receive queues before it runs again (the
        # kernel may hand loopback segments to ksoftirqd under load)
        wait_for_receive_queues(c.ports[0], len(subs))
    finally:
        resume(c, 0)
    for k, sub in enumerate(subs):
        assert sub.read(timeout=5) == [b"subscribe", f"turn.{k}".encode(), 1]
    after = [deltas(0, "sent"), deltas(1, "received"), deltas(2, "received")]
    assert after == [before[0] + 2, before[1] + 1, before[2] + 1]
    with c.client(1) as r:
        for k in range(50):
            assert r.publish(f"turn.{k}", "x") == 0  # node 1's own subscribers: none
    for k, sub in enumerate(subs):
        assert sub.read(timeout=5) == [b"message", f"turn.{k}".encode(), b"x"]
        sub.close()


def test_a_stopped_peer_bounds_the_wait_counted_and_logged(tmp_path):
    """A SIGSTOPped peer never acks: each SUBSCRIBE waits at most the default
    1000 ms until the peer is suspected (then it is not waited for at all);
    each timeout is counted and the first is logged naming the peer.

    A node timeout of 10 s makes the probe period 1000 ms, so the stopped peer
    is suspected no sooner than two periods after its last unanswered PING,
    well after the first SUBSCRIBE's 1000 ms timeout. (At 4 s the period was
    400 ms: a suspicion could end the first wait at 900-1000 ms, uncounted as
    a timeout, about one run in ten.)"""
    with LocalCluster(3, extra_args=["--node-timeout-ms", "10000"], log_dir=tmp_path) as c:
        with c.client(2) as r:
            stopped = r.execute_command("CLUSTER", "MYID").decode()
        pause(c, 2)
        try:
            sub = RawConn(c.ports[0])
            times = []
            for k in range(3):
                t0 = time.monotonic()
                sub.send("SUBSCRIBE", f"held.{k}")
                assert sub.read(timeout=5)[0] == b"subscribe"
                times.append(time.monotonic() - t0)
            sub.close()
        finally:
            resume(c, 2)
        assert max(times) < 1.5, times  # bounded by the timeout, never by the peer
        assert times[0] > 0.9, times  # the first one waited for the stopped peer
        info = c.cluster_info(0)
        assert int(info["cluster_subscribe_visibility_timeouts"]) >= 1
        log = (tmp_path / "node-0.log").read_text()
        assert re.search(
            rf"SUBSCRIBE confirmed after 1000 ms without the filter ACK of node\(s\) {stopped}",
            log,
        ), log


def test_a_stopped_peer_costs_one_timeout_then_is_waited_for_once_it_acks(tmp_path):
    """Issue 48: the SUBSCRIBEs after the one that timed out on a SIGSTOPped
    peer do not wait for it (counted as skipped, CLUSTER INFO shows it
    lagging), where each used to wait its own 1000 ms until the peer was
    suspected; after SIGCONT it acks the deltas it missed and is waited for
    again: a PUBLISH on it right after a SUBSCRIBE reply is delivered.
    (Node timeout 10 s: not suspected during the three SUBSCRIBEs, as in the
    test above.)"""
    with LocalCluster(3, extra_args=["--node-timeout-ms", "10000"], log_dir=tmp_path) as c:
        pause(c, 2)
        try:
            sub = RawConn(c.ports[0])
            for k in range(3):
                sub.send("SUBSCRIBE", f"lag.{k}")
                assert sub.read(timeout=5)[0] == b"subscribe"
            sub.close()
            info = c.cluster_info(0)
        finally:
            resume(c, 2)
        assert int(info["cluster_subscribe_visibility_timeouts"]) == 1, info
        assert int(info["cluster_subscribe_visibility_skipped"]) == 2, info
        assert int(info["cluster_subscribe_visibility_lagging"]) == 1, info
        deadline = time.monotonic() + 30
        while int(c.cluster_info(0)["cluster_subscribe_visibility_lagging"]) != 0:
            assert time.monotonic() < deadline, "the resumed peer never acked"
            time.sleep(0.05)
        got = subscribe_then_publish(c.ports, 6)
        assert got.delivered == got.expected == 6


def test_visibility_zero_replies_at_once_as_before(tmp_path):
    args = ["--subscribe-visibility-timeout", "0"]
    with LocalCluster(2, extra_args=args, log_dir=tmp_path) as c:
        assert subscribe_then_publish(c.ports, 6).expected == 6
        fields = c.cluster_info(0)
        assert fields["cluster_subscribe_visibility_waits"] == "0"
