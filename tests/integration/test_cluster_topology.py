"""redis-py ``RedisCluster`` through topology changes (issue 13, "A new node
joining and a node being forgotten"): a 4th node joins, then is killed and
forgotten with CLUSTER FORGET on every live node. The client publishes and
its subscriber receives every message throughout, and its topology refresh
sees each new slot map.

Node timeout 2000 ms, so the protocol period is 200 ms.
"""

from __future__ import annotations

import time

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from tests.procs import bloomcast_node

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def client_map(rc: RedisCluster) -> set[int]:
    """The client ports of the primaries the client's refreshed map holds."""
    rc.nodes_manager.initialize()
    return {n.port for n in rc.get_primaries()}


class Ledger:
    """Numbered messages published through the cluster client, and the ones its
    subscriber received.

    redis-py drops its connections when a topology refresh finds a new node
    set, and its pub/sub connection resubscribes on the next read: messages
    published in between are not delivered (pub/sub is at most once, as with
    Redis). So each round first publishes probes until one arrives (the
    subscription is live again and every node routes to it), then the
    numbered messages, every one of which must arrive, in order."""

    def __init__(self, rc: RedisCluster) -> None:
        self.rc = rc
        self.sub = rc.pubsub()
        self.sub.subscribe("topology")
        self.sent = 0
        self.got: list[int] = []

    def _read(self) -> bytes | None:
        m = self.sub.get_message(timeout=0.1)
        if m is None or m["type"] != "message":
            return None
        if m["data"] != b"probe":
            self.got.append(int(m["data"]))
        return m["data"]

    def round(self, n: int = 20) -> None:
        deadline = time.monotonic() + 15
        while True:
            self.rc.publish("topology", "probe")
            if self._read() == b"probe":
                break
            assert time.monotonic() < deadline, "no probe reached the subscriber"
        first = self.sent
        for _ in range(n):
            self.rc.publish("topology", str(self.sent))
            self.sent += 1
        deadline = time.monotonic() + 15
        while not self.got or self.got[-1] < self.sent - 1:
            self._read()
            assert time.monotonic() < deadline, (self.sent, self.got[-5:])
        assert [x for x in self.got if x >= first] == list(range(first, self.sent))


def test_redis_py_cluster_keeps_working_while_a_node_joins_and_is_forgotten(topology):
    topology.start_three()
    ports = topology.ports
    rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", ports[0])])
    try:
        ledger = Ledger(rc)
        ledger.round()
        assert client_map(rc) == set(ports[:3])
        topology.join()
        ledger.round()
        assert client_map(rc) == set(ports)
        ledger.round()
        topology.kill_and_forget()
        ledger.round()
        assert client_map(rc) == set(ports[:3])
        ledger.round()
        ledger.sub.close()
    finally:
        rc.close()


def test_cluster_commands_on_a_node_without_a_bus_are_disabled():
    """A lone node (``--no-bus``) is a standalone server: CLUSTER answers as a
    Redis whose cluster support is disabled."""
    with bloomcast_node() as port, redis.Redis(port=port) as r:
        for args in (("FORGET", "abc"), ("MYID",), ("LINKS",), ("NODES",)):
            with pytest.raises(redis.ResponseError, match=r"^This instance has cluster support"):
                r.execute_command("CLUSTER", *args)
