"""A connection flood on a bus port (issue 49), bloomcast beside a Redis
Cluster 7.0.15: a case of ``bloomcast bench hostile``'s bounds table
(:mod:`bench.hostile_bounds`).

Three nodes, each started under ``prlimit --nofile=256:256`` (both fit
``maxclients`` to it at start); 400 bare TCP connections to node 0's bus
port, held open for 5 s, while :class:`bench.probe.LatencyProbe` PINGs node 0
every 10 ms from its own process on a connection made before the flood. Then,
the connections still open: a new client's PING, whether every node still
says ``cluster_state:ok``, how many of the 400 the node closed (at accept,
or at its handshake timeout) and what it counted (bloomcast: CLUSTER INFO
``cluster_stats_links_rejected``; Redis counts none).

Speed is reported, never asserted (tests/integration/test_bus_flood.py asserts
the behaviour).
"""

from __future__ import annotations

import time
from typing import Any

import redis

from bench.probe import LatencyProbe, rss_mb
from bench.redis_cluster import RedisCluster
from bench.servers import NODE
from bloomcast.testing import LocalCluster, redis_server_path
from bloomcast.testing.bus_flood import closed_count, open_bare

LIMIT = 256
CONNECTIONS = 400
HOLD_S = 5.0


def _trio(name: str) -> LocalCluster | RedisCluster:
    """Three nodes of ``name``, each under the descriptor limit."""
    wrapper = ["prlimit", f"--nofile={LIMIT}:{LIMIT}"]
    if name == NODE:
        cluster = LocalCluster(3, extra_args=["--node-timeout-ms", "5000"])
        for i in range(3):
            cluster.start_node(i, [*wrapper, *cluster.node_args(i)])
        try:
            cluster.wait_ready(60)
        except BaseException:
            cluster.stop()
            raise
        return cluster
    cluster_ = RedisCluster(3, binary=redis_server_path(), node_timeout_ms=5000, wrapper=wrapper)
    cluster_.start()
    return cluster_


def _cluster_info(cluster: LocalCluster | RedisCluster, i: int) -> dict[str, str]:
    """Node ``i``'s CLUSTER INFO, or {} when it does not answer (a new client
    of a node out of descriptors waits in its backlog: 10 s then)."""
    try:
        return cluster.cluster_info(i)
    except (OSError, redis.RedisError):
        return {}


def _pid(cluster: LocalCluster | RedisCluster) -> int:
    if isinstance(cluster, LocalCluster):
        proc = cluster.processes[0]
        assert proc is not None
        return proc.pid
    return cluster.nodes[0].proc.pid


def bus_flood(name: str, scale: float) -> dict[str, Any]:
    count = max(40, int(CONNECTIONS * scale))
    cluster = _trio(name)
    try:
        port, bus = cluster.ports[0], cluster.bus_ports[0]
        pid = _pid(cluster)
        idle, _ = rss_mb(pid)
        with cluster.client(0) as r:
            maxclients = int(r.config_get("maxclients")["maxclients"])
        with LatencyProbe(port) as probe:
            socks = open_bare(bus, count)
            time.sleep(HOLD_S * max(scale, 0.2))
        start = time.monotonic()
        try:
            with cluster.client(0, socket_timeout=10) as fresh:
                new_ok = fresh.ping() is True
        except (OSError, redis.RedisError):
            new_ok = False
        new_ms = (time.monotonic() - start) * 1000
        infos = [_cluster_info(cluster, i) for i in range(3)]
        after, peak = rss_mb(pid)
        closed = closed_count(socks)
        for s in socks:
            s.close()
    finally:
        cluster.stop()
    counted = infos[0].get("cluster_stats_links_rejected")
    return {
        "worst_ping": probe.worst,
        "rss_idle_mb": idle,
        "rss_mb": after,
        "peak_mb": peak,
        "flood": count,
        "connected": len(socks),
        "closed": closed,  # at accept, or at the handshake timeout
        "counted": int(counted) if counted is not None else None,
        "new_client_ping": new_ok,
        "new_client_ms": new_ms,
        "cluster_ok": all(info.get("cluster_state") == "ok" for info in infos),
        "maxclients": maxclients,
    }


def outcome(figures: dict[str, Any]) -> str:
    """The bounds table's outcome cell."""
    counted = figures["counted"]
    told = f"{counted:,} at accept, counted" if counted is not None else "none counted"
    ping = (
        f"a new client's PING answered in {figures['new_client_ms']:.0f} ms"
        if figures["new_client_ping"]
        else "a new client's PING failed"
    )
    ok = "every node ok" if figures["cluster_ok"] else "cluster_state not ok"
    return (
        f"maxclients {figures['maxclients']:,}; {figures['closed']:,} of "
        f"{figures['flood']:,} closed by the node ({told}); {ping}; {ok}"
    )
