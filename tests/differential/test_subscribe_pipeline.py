"""Pipelined (P)(UN)SUBSCRIBEs on a node with peers (subscribe visibility
on, the default), beside redis-server 7.0.15 (issue 48 item 3).

The replies of a pipeline whose subscribes wait for the peers' ACKs are
Redis's bytes, in Redis's order; and the pipeline's filter changes go out
as one FILTER_DELTA per filter to each peer and one ACK round (before, each
SUBSCRIBE of the pipeline was announced, and waited for, on its own: K
subscribes, K rounds).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from bloomcast.testing import LocalCluster
from tests.differential.oracle import exchange, hello_masked, oracle_server

pytestmark = pytest.mark.timeout(120)

K = 16
PEERS = 2


def _command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _pipeline(verb: bytes, names: list[bytes]) -> bytes:
    return b"".join(_command(verb, name) for name in names)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, LocalCluster]]:
    """(the oracle's port, a converged 3-node cluster, visibility on)."""
    with oracle_server() as oracle:
        cluster = LocalCluster(3, log_dir=tmp_path_factory.mktemp("logs"))
        try:
            cluster.start()
            cluster.wait_ready(60)
            yield oracle, cluster
        finally:
            cluster.stop()


def _counters(cluster: LocalCluster) -> tuple[int, int, int]:
    """Node 0's FILTER_DELTAs sent, ACKs received and visibility waits."""
    info = cluster.cluster_info(0)
    return (
        int(info["cluster_stats_filter_deltas_sent"]),
        int(info["cluster_stats_messages_ack_received"]),
        int(info["cluster_subscribe_visibility_waits"]),
    )


def _rounds(cluster: LocalCluster, payload: bytes, replies: int) -> tuple[int, int, int]:
    """``payload`` in one write on a new connection to node 0, its
    ``replies`` confirmations read: the counters' growth meanwhile."""
    before = _counters(cluster)
    with socket.create_connection(("127.0.0.1", cluster.ports[0]), timeout=10) as sock:
        sock.sendall(payload)
        got = b""
        while got.count(b"\r\n:") < replies:
            chunk = sock.recv(65536)
            assert chunk, "the node closed the connection"
            got += chunk
        after = _counters(cluster)  # (before the close: its unsubscribes are a round too)
    return after[0] - before[0], after[1] - before[1], after[2] - before[2]


def test_a_subscribe_pipeline_costs_one_delta_and_ack_round_per_peer(servers):
    _, cluster = servers
    names = [b"pipe:%d" % i for i in range(K)]
    deltas, acks, waits = _rounds(cluster, _pipeline(b"SUBSCRIBE", names), K)
    assert (deltas, acks, waits) == (PEERS, PEERS, 1)


def test_a_mixed_pipeline_costs_one_delta_per_filter_and_one_wait(servers):
    _, cluster = servers
    payload = (
        _pipeline(b"SUBSCRIBE", [b"mix:%d" % i for i in range(K)])
        + _pipeline(b"PSUBSCRIBE", [b"mix:%d:*" % i for i in range(K)])
        + _command(b"UNSUBSCRIBE", b"mix:0")
    )
    deltas, acks, waits = _rounds(cluster, payload, 2 * K + 1)
    # the channels and the patterns filter: a delta each, to each peer; the
    # first flagged ``more``, so each peer acks the batch once
    assert (deltas, acks, waits) == (2 * PEERS, PEERS, 1)


# (a bare UNSUBSCRIBE of several names is left out: Redis walks them in its
# dict's order, the node in its own; the pipelining does not change either)
MIXES = {
    "subscribe run": _pipeline(b"SUBSCRIBE", [b"a", b"b", b"c", b"a"]) + b"PING\r\n",
    "mix": b"SUBSCRIBE a b\r\nPSUBSCRIBE p* q?\r\nSUBSCRIBE c\r\nUNSUBSCRIBE a\r\n"
    b"PUNSUBSCRIBE q?\r\nPUNSUBSCRIBE\r\nsubscribe d\r\nPING x\r\nUNSUBSCRIBE b c\r\n"
    b"UNSUBSCRIBE\r\n",
    "errors between": b"SUBSCRIBE a\r\nSUBSCRIBE\r\nPSUBSCRIBE\r\nPSUBSCRIBE a*\r\n"
    b"GET x\r\nunsubscribe zz\r\nPUNSUBSCRIBE a* b*\r\nPING\r\n",
    "then normal commands": b"SUBSCRIBE a\r\nUNSUBSCRIBE a\r\nECHO hi\r\nSUBSCRIBE b\r\n"
    b"PSUBSCRIBE b*\r\nRESET\r\nPING\r\n",
    "resp3": b"HELLO 3\r\nSUBSCRIBE a b\r\nPSUBSCRIBE p*\r\nPING\r\nSUBSCRIBE c\r\n"
    b"UNSUBSCRIBE a c\r\nUNSUBSCRIBE\r\nPUNSUBSCRIBE\r\nECHO done\r\n",
    "protocol error after": b"SUBSCRIBE a\r\nSUBSCRIBE b\r\n*1\r\nxx\r\n",
}


@pytest.mark.parametrize("payload", list(MIXES.values()), ids=list(MIXES))
def test_pipelined_replies_are_redis_bytes(servers, payload):
    oracle, cluster = servers
    want = exchange(oracle, payload)
    got = exchange(cluster.ports[0], payload)
    assert hello_masked(got[0]) == hello_masked(want[0])
    assert got[1] == want[1]
