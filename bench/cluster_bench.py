"""bloomcast cluster vs Redis Cluster with the same N, same workload, same run.

Workload (issue 7 part 1): ``channels_per_node x N`` channels, each
subscribed on exactly one node (channel j on node j mod N); publishers on
every node, each publishing round-robin over all channels.

Per system and N it reports:

* bus PUBLISH messages per client PUBLISH — the counter
  ``cluster_stats_messages_publish_sent`` summed over the nodes (same name in
  Redis, Valkey and bloomcast) — next to the exact-interest minimum (1 when
  the subscriber is on another node than the publisher, else 0) and the
  broadcast baseline (N - 1);
* bus bytes per PUBLISH, read from the kernel (``tcp_info.bytes_sent`` of
  every bus socket, :func:`bench.procs.tcp_bytes_sent`), gross and with the
  idle PING/PONG rate measured just before subtracted;
* aggregate PUBLISH throughput: one redis-benchmark per node, all at once,
  ``-c clients/N``, ``-r`` over the workload's channels, at -P 1 and -P 16;
  reported as total requests / wall time of the slowest one.

Nothing here asserts a speed.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, Self

import redis

from bench.loadgen import SubscriberPool, parse_benchmark_csv, redis_benchmark_path
from bench.procs import tcp_bytes_sent
from bench.redis_cluster import RedisCluster
from bench.servers import NODE, bloomcast_version
from bloomcast.testing import (
    LOOPBACK,
    REDIS,
    VALKEY,
    redis_server_path,
    server_version,
    valkey_server_path,
)

MESSAGE = b"hello"


def channel_name(j: int) -> bytes:
    """Channel ``j`` as redis-benchmark's ``ch:__rand_int__`` spells it (12 digits)."""
    return b"ch:%012d" % j


class BusCluster(Protocol):
    """What the benchmark needs of a cluster (LocalCluster and RedisCluster have it)."""

    @property
    def ports(self) -> list[int]: ...

    @property
    def bus_ports(self) -> list[int]: ...

    def cluster_info(self, i: int) -> dict[str, str]: ...


@dataclass
class ClusterPlan:
    """Sizes of the cluster benchmark; ``quick()`` is for tests."""

    sizes: tuple[int, ...] = (3, 6, 12)
    systems: tuple[str, ...] = (NODE, VALKEY, REDIS)
    channels_per_node: int = 4
    publishes_per_node: int = 2000
    idle_window_s: float = 1.0
    clients: int = 50
    pipelines: tuple[int, ...] = (1, 16)
    throughput_requests: dict[int, int] = field(default_factory=lambda: {1: 60_000, 16: 240_000})
    #: flags for every bloomcast node (e.g. ``--cluster-forward-linger-us 5000``)
    node_args: tuple[str, ...] = ()

    @classmethod
    def quick(cls) -> Self:
        return cls(
            sizes=(3,),
            systems=(NODE, VALKEY),
            publishes_per_node=100,
            idle_window_s=0.3,
            throughput_requests={1: 1_500, 16: 6_000},
        )


@contextlib.contextmanager
def start_cluster(system: str, n: int, extra_args: Sequence[str] = ()) -> Iterator[BusCluster]:
    """A running cluster of ``n`` nodes of ``system`` (NODE, VALKEY or REDIS), ready.

    ``extra_args`` go to every bloomcast node (ignored for Redis)."""
    if system == NODE:
        from bloomcast.testing import LocalCluster

        with LocalCluster(n, extra_args=extra_args) as cluster:
            yield cluster
    else:
        binary = redis_server_path() if system == REDIS else None
        if system == REDIS and binary is None:
            raise FileNotFoundError("redis-server not found: apt-get install redis-server")
        with RedisCluster(n, binary=binary) as rc:
            yield rc


def system_version(system: str) -> str:
    if system == NODE:
        return bloomcast_version()
    binary = redis_server_path() if system == REDIS else valkey_server_path()
    return server_version(binary) if binary else "missing"


def publish_counters(cluster: BusCluster) -> tuple[int, int]:
    """(bus PUBLISH messages sent, received) summed over the nodes.

    Valkey >= 8 counts light-header PUBLISH as ``publishlight``: both summed."""
    sent = received = 0
    for i in range(len(cluster.ports)):
        info = cluster.cluster_info(i)
        for kind in ("publish", "publishlight"):
            sent += int(info.get(f"cluster_stats_messages_{kind}_sent", 0))
            received += int(info.get(f"cluster_stats_messages_{kind}_received", 0))
    return sent, received


def settled_counters(cluster: BusCluster, timeout: float = 30.0) -> tuple[int, int]:
    """:func:`publish_counters` once sent == received (every bus message arrived)."""
    deadline = time.monotonic() + timeout
    while True:
        sent, received = publish_counters(cluster)
        if sent == received or time.monotonic() > deadline:
            return sent, received
        time.sleep(0.02)


def wait_interest_known(cluster: BusCluster, system: str, timeout: float = 30.0) -> float:
    """bloomcast: wait until every node reports ``cluster_filters_converged:1``
    after the subscriptions (then the forwards the benchmark counts are routed
    on the final filters). Redis needs no wait (it broadcasts). Returns seconds."""
    t0 = time.monotonic()
    if system != NODE:
        return 0.0
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        infos = [cluster.cluster_info(i) for i in range(len(cluster.ports))]
        if all(info.get("cluster_filters_converged") == "1" for info in infos):
            break
        time.sleep(0.05)
    # fingerprints travel with PING/PONG: give one more round for deltas in flight
    time.sleep(0.3)
    return time.monotonic() - t0


def measure_bus(cluster: BusCluster, system: str, plan: ClusterPlan) -> dict[str, Any]:
    """Bus PUBLISH messages and bus bytes per client PUBLISH (see module doc)."""
    n = len(cluster.ports)
    channels = [channel_name(j) for j in range(n * plan.channels_per_node)]
    owner = {ch: j % n for j, ch in enumerate(channels)}
    pools = [
        SubscriberPool(cluster.ports[i], [ch for ch in channels if owner[ch] == i], 1, MESSAGE)
        for i in range(n)
    ]
    with contextlib.ExitStack() as stack:
        for pool in pools:
            stack.enter_context(pool)
        wait_interest_known(cluster, system)
        idle_rate = idle_bus_rate(cluster, plan.idle_window_s)  # subtracted below

        sent0, _ = settled_counters(cluster)
        bytes0 = tcp_bytes_sent(cluster.bus_ports)
        t0 = time.monotonic()
        exact = 0
        per_channel: Counter[bytes] = Counter()
        for i in range(n):
            with redis.Redis(host=LOOPBACK, port=cluster.ports[i], socket_timeout=30) as r:
                pipe = r.pipeline(transaction=False)
                for k in range(plan.publishes_per_node):
                    ch = channels[(k + i) % len(channels)]
                    exact += owner[ch] != i
                    per_channel[ch] += 1
                    pipe.publish(ch, MESSAGE)
                pipe.execute()
        total = n * plan.publishes_per_node
        # each pool is one subscriber socket: it must get every PUBLISH to its channels
        delivered_all = all(
            pool.wait_for(sum(per_channel[ch] for ch in pool.channels), timeout=60)
            for pool in pools
        )
        sent1, received1 = settled_counters(cluster)
        bytes1 = tcp_bytes_sent(cluster.bus_ports)
        elapsed = time.monotonic() - t0
        delivered = sum(pool.messages() for pool in pools)
    bus_msgs = sent1 - sent0
    gross = bytes1 - bytes0
    return {
        "publishes": total,
        "bus_publish_messages": bus_msgs,
        "bus_publish_received_settled": sent1 == received1,
        "msgs_per_publish": bus_msgs / total,
        "exact_min_per_publish": exact / total,
        "broadcast_per_publish": n - 1,
        "bus_bytes_per_publish_gross": gross / total,
        "bus_bytes_per_publish": max(0.0, gross - idle_rate * elapsed) / total,
        "idle_bus_bytes_per_s": idle_rate,
        "delivered": delivered,
        "delivered_all": delivered_all and delivered == total,
    }


def aggregate_throughput(
    cluster: BusCluster, pipeline: int, requests: int, clients: int, keyspace: int
) -> dict[str, Any]:
    """One redis-benchmark per node at once; total PUBLISH/s over the wall time."""
    n = len(cluster.ports)
    per_node = max(1, requests // n)
    per_clients = max(1, clients // n)
    bench = redis_benchmark_path()
    procs = []
    t0 = time.monotonic()
    for port in cluster.ports:
        cmd = [
            bench, "-h", LOOPBACK, "-p", str(port), "-c", str(per_clients),
            "-n", str(per_node), "-P", str(pipeline), "-r", str(keyspace), "--csv",
            "PUBLISH", "ch:__rand_int__", MESSAGE.decode(),
        ]  # fmt: skip
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outputs = [p.communicate(timeout=900)[0].decode() for p in procs]
    wall = time.monotonic() - t0
    per_rps = [parse_benchmark_csv(out)["rps"] for out in outputs]
    return {
        "pipeline": pipeline,
        "requests": per_node * n,
        "clients_per_node": per_clients,
        "rps": per_node * n / wall,
        "sum_of_node_rps": sum(per_rps),
    }


def measure_throughput(cluster: BusCluster, system: str, plan: ClusterPlan) -> dict[str, Any]:
    """Aggregate throughput at every pipeline depth, with the workload's subscribers."""
    n = len(cluster.ports)
    channels = [channel_name(j) for j in range(n * plan.channels_per_node)]
    out: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        for i in range(n):
            mine = [ch for j, ch in enumerate(channels) if j % n == i]
            stack.enter_context(SubscriberPool(cluster.ports[i], mine, 1, MESSAGE))
        wait_interest_known(cluster, system)
        for pipeline in plan.pipelines:
            out[f"P{pipeline}"] = aggregate_throughput(
                cluster, pipeline, plan.throughput_requests[pipeline], plan.clients, len(channels)
            )
    return out


def idle_bus_rate(cluster: BusCluster, seconds: float) -> float:
    """Bytes per second on the bus with no PUBLISH (PING/PONG, gossip), over
    ``seconds``: what the bus-bytes figures subtract."""
    b0 = tcp_bytes_sent(cluster.bus_ports)
    t0 = time.monotonic()
    time.sleep(seconds)
    return (tcp_bytes_sent(cluster.bus_ports) - b0) / (time.monotonic() - t0)


def run_cluster(plan: ClusterPlan) -> dict[str, Any]:
    """Every system at every size; JSON-ready, with ratios bloomcast / anchor."""
    return run_systems(
        plan,
        lambda cluster, system: {
            "bus": measure_bus(cluster, system, plan),
            "throughput": measure_throughput(cluster, system, plan),
        },
    )


def run_systems(
    plan: ClusterPlan,
    measure: Callable[[BusCluster, str], dict[str, Any]],
    describe: Callable[[int], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``measure(cluster, system)`` on a fresh cluster of every system (Redis
    only when installed) at every size of ``plan``; each row also gets
    ``describe(n)`` and the ratios bloomcast / anchor (:func:`cluster_ratios`)."""
    systems = [s for s in plan.systems if s != REDIS or redis_server_path() is not None]
    rows = []
    for n in plan.sizes:
        results: dict[str, Any] = {}
        for system in systems:
            with start_cluster(system, n, plan.node_args) as cluster:
                results[system] = measure(cluster, system)
        extra = describe(n) if describe is not None else {}
        rows.append({"nodes": n, **extra, "results": results, "ratios": cluster_ratios(results)})
    return {
        "plan": asdict(plan),
        "versions": {s: system_version(s) for s in systems},
        "sizes": rows,
    }


def cluster_ratios(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """bloomcast / anchor for bus messages, bus bytes and throughput, per anchor;
    plus bloomcast / exact minimum."""
    if NODE not in results:
        return {}
    node = results[NODE]
    out: dict[str, dict[str, float | None]] = {}

    def div(a: float, b: float) -> float | None:
        return a / b if b else None

    out["exact_min"] = {
        "msgs_per_publish": div(
            node["bus"]["msgs_per_publish"], node["bus"]["exact_min_per_publish"]
        )
    }
    for anchor, res in results.items():
        if anchor == NODE:
            continue
        row: dict[str, float | None] = {
            "msgs_per_publish": div(
                node["bus"]["msgs_per_publish"], res["bus"]["msgs_per_publish"]
            ),
            "bus_bytes_per_publish": div(
                node["bus"]["bus_bytes_per_publish"], res["bus"]["bus_bytes_per_publish"]
            ),
        }
        for key, tp in node["throughput"].items():
            row[f"throughput_{key}"] = div(tp["rps"], res["throughput"][key]["rps"])
        out[anchor] = row
    return out


__all__ = [
    "ClusterPlan",
    "aggregate_throughput",
    "channel_name",
    "cluster_ratios",
    "measure_bus",
    "run_cluster",
    "start_cluster",
]
