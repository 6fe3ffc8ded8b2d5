"""CPU time per PUBLISH of the server process (issue 18): bloomcast node,
redis-server 7.0.15, and the floor any asyncio + uvloop server pays.

Throughput on a shared 2-core machine moves with whatever else runs, and
redis-benchmark itself takes a core; the CPU the server process spends per
request does not. Each case starts the server alone, drains ``subs``
subscribers on raw sockets (:class:`bench.loadgen.SubscriberPool`), runs
``redis-benchmark -c 50 -P <P> PUBLISH`` and reads the server's user + system
time from ``/proc/<pid>/stat`` before and after: microseconds per request.

The floor is a uvloop server whose ``data_received`` only counts the requests
in each read (their ``*`` array headers: no argument sent here holds one)
and writes ``:0\\r\\n`` for each: every system call and event-loop
turn a node makes at that load, and almost no Python. What bloomcast spends
above it is its own Python work per request.

``--cluster 3,6``: the same reading in a cluster, summed over every server
process, with ``bloomcast bench cluster``'s workload and throughput phase
(bench/cluster_bench.py: 4 x N channels each subscribed on one node, one
redis-benchmark per node at once), for bloomcast and Redis Cluster
(redis-server 7.0.15): CPU per PUBLISH of the whole cluster, and the machine's
idle share during the run (near 0: the run is CPU-bound, so throughput
follows CPU per PUBLISH).

``--command SPUBLISH`` or ``PING``: the same reading for that request on one
node (no subscribers; the floor answers it as it answers PUBLISH).
``--subscribers 0,1,10,100``: PUBLISH's subscriber counts (default 0,1,10).

``--forward-linger-us 0,5000`` (with ``--cluster``): bloomcast once per
``--cluster-forward-linger-us`` value, each beside the same Redis Cluster run;
``--runs R`` repeats the set R times (each run starts Redis Cluster, then
each linger value, in that order). The cluster table splits
the CPU into user and system time and gives the servers' read and write
system calls per PUBLISH (``/proc/<pid>/io``).

``uv run python -m bench.cpu_cost [--requests-p1 60000] [--requests-p16 300000]
[--command PUBLISH] [--subscribers 0,1,10] [--cluster 3,6,12]
[--forward-linger-us 0] [--runs 1]``: prints
Markdown tables. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.cluster_bench import (
    ClusterPlan,
    aggregate_throughput,
    channel_name,
    start_cluster,
    wait_interest_known,
)
from bench.loadgen import SubscriberPool, redis_benchmark_path
from bench.results import fmt_num, fmt_ratio, table
from bench.servers import NODE, start_node
from bloomcast.testing import Server
from bloomcast.testing.ports import LOOPBACK, free_port, wait_port
from bloomcast.testing.servers import REDIS, start_anchor

CHANNEL = b"bench:cpu"
MESSAGE = b"hello"
FLOOR = "uvloop floor"

#: the floor server: one reply per request in each read, nothing else
_FLOOR_SERVER = """
import asyncio, sys, uvloop
class Floor(asyncio.Protocol):
    def connection_made(self, transport): self.transport = transport
    def data_received(self, data): self.transport.write(b":0\\r\\n" * data.count(b"*"))
async def main():
    await asyncio.get_running_loop().create_server(Floor, sys.argv[1], int(sys.argv[2]))
    await asyncio.Event().wait()
uvloop.run(main())
"""


class _FloorServer:
    """The floor as a process with ``pid``, ``port`` and ``stop()``, like Server."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _FLOOR_SERVER, LOOPBACK, str(self.port)],
            stdout=subprocess.DEVNULL,
        )
        wait_port(self.port, proc=self.proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (``/proc/<pid>/stat`` fields 14, 15)."""
    user, system, _, _ = process_counts(pid)
    return user + system


def process_counts(pid: int) -> tuple[float, float, int, int]:
    """(user seconds, system seconds, read system calls, write system calls)
    of ``pid``: ``/proc/<pid>/stat`` fields 14 and 15, ``/proc/<pid>/io``'s
    ``syscr`` and ``syscw`` (0 where /proc/<pid>/io cannot be read)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    reads = writes = 0
    try:
        with open(f"/proc/{pid}/io") as fh:
            io = dict(line.split(": ") for line in fh.read().splitlines())
        reads, writes = int(io["syscr"]), int(io["syscw"])
    except (OSError, KeyError, ValueError):
        pass
    return int(fields[11]) / tick, int(fields[12]) / tick, reads, writes


#: ``--command``: the request redis-benchmark sends
COMMANDS = {
    "PUBLISH": ["PUBLISH", CHANNEL.decode(), MESSAGE.decode()],
    "SPUBLISH": ["SPUBLISH", CHANNEL.decode(), MESSAGE.decode()],
    "PING": ["PING"],
}


def one_case(
    server: Server | _FloorServer,
    pipeline: int,
    subs: int,
    requests: int,
    command: str = "PUBLISH",
) -> float:
    """Microseconds of server CPU per request (``command`` of :data:`COMMANDS`)."""
    pool = SubscriberPool(server.port, CHANNEL, subs, MESSAGE) if subs else None
    if pool is not None:
        pool.start()
    try:
        before = cpu_seconds(server.pid)
        cmd = [
            redis_benchmark_path(), "-h", LOOPBACK, "-p", str(server.port),
            "-c", "50", "-n", str(requests), "-P", str(pipeline), "-q",
            *COMMANDS[command],
        ]  # fmt: skip
        subprocess.run(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=600
        )
        return (cpu_seconds(server.pid) - before) / requests * 1e6
    finally:
        if pool is not None:
            pool.stop()


def run_cpu_cost(
    requests: dict[int, int], command: str = "PUBLISH", subscribers: tuple[int, ...] = (0, 1, 10)
) -> dict[str, Any]:
    """PUBLISH with each count of ``subscribers`` (of the channel); another
    command without any."""
    starts: dict[str, Callable[[], Server | _FloorServer]] = {
        NODE: lambda: start_node(["--no-bus"]),
        REDIS: lambda: start_anchor(REDIS),
        FLOOR: _FloorServer,
    }
    rows = []
    for pipeline in sorted(requests):
        for subs in subscribers if command == "PUBLISH" else (0,):
            row: dict[str, Any] = {"pipeline": pipeline, "subscribers": subs}
            for name, start in starts.items():
                if name == FLOOR and subs:
                    continue  # the floor delivers nothing
                server = start()
                try:
                    time.sleep(0.5)
                    row[name] = one_case(server, pipeline, subs, requests[pipeline], command)
                finally:
                    server.stop()
            rows.append(row)
    return {"rows": rows}


def _machine_idle() -> tuple[int, int]:
    """(idle + iowait, total) jiffies of the whole machine (``/proc/stat``)."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    return values[3] + values[4], sum(values)


def cluster_case(
    system: str, n: int, pipeline: int, requests: int, linger_us: int = 0
) -> dict[str, float]:
    """CPU microseconds per PUBLISH summed over the cluster's server processes
    (``linger_us``: bloomcast's ``--cluster-forward-linger-us``), split into
    user and system time, with their read and write system calls per PUBLISH."""
    plan = ClusterPlan()
    channels = [channel_name(j) for j in range(n * plan.channels_per_node)]
    extra = ["--cluster-forward-linger-us", str(linger_us)] if system == NODE and linger_us else []
    with start_cluster(system, n, extra) as cluster, contextlib.ExitStack() as stack:
        for i in range(n):
            mine = [ch for j, ch in enumerate(channels) if j % n == i]
            stack.enter_context(SubscriberPool(cluster.ports[i], mine, 1, MESSAGE))
        wait_interest_known(cluster, system)
        pids = _server_pids(cluster)
        before = [process_counts(pid) for pid in pids]
        idle0, total0 = _machine_idle()
        run = aggregate_throughput(cluster, pipeline, requests, plan.clients, len(channels))
        idle1, total1 = _machine_idle()
        after = [process_counts(pid) for pid in pids]
    user_s, system_s, reads, writes = (
        sum(a[i] - b[i] for a, b in zip(after, before, strict=True)) for i in range(4)
    )
    count = run["requests"]
    return {
        "us_per_publish": (user_s + system_s) / count * 1e6,
        "user_us": user_s / count * 1e6,
        "system_us": system_s / count * 1e6,
        "reads": reads / count,
        "writes": writes / count,
        "publish_per_s": run["rps"],
        "machine_idle": (idle1 - idle0) / max(1, total1 - total0),
    }


def _server_pids(cluster: Any) -> list[int]:
    if hasattr(cluster, "processes"):  # bloomcast.testing.LocalCluster
        return [p.pid for p in cluster.processes if p is not None]
    return [node.proc.pid for node in cluster.nodes]  # bench.redis_cluster.RedisCluster


def run_cluster_cpu(
    sizes: list[int],
    requests: dict[int, int],
    lingers: tuple[int, ...] = (0,),
    runs: int = 1,
) -> dict[str, Any]:
    """One row per (run, N, -P, linger): bloomcast at each
    ``--cluster-forward-linger-us`` of ``lingers`` beside the Redis Cluster
    run of that (N, -P), run just before; ``runs`` times over."""
    rows = []
    for run in range(1, runs + 1):
        for n in sizes:
            for pipeline in sorted(requests):
                redis = cluster_case(REDIS, n, pipeline, requests[pipeline])
                for linger in lingers:
                    node = cluster_case(NODE, n, pipeline, requests[pipeline], linger)
                    rows.append(
                        {"run": run, "n": n, "pipeline": pipeline, "linger_us": linger,
                         NODE: node, REDIS: redis}
                    )  # fmt: skip
    return {"rows": rows}


def cluster_markdown(result: dict[str, Any]) -> str:
    header = [
        "run", "N", "-P", "linger us", f"{NODE} us/PUBLISH (all nodes)",
        "Redis Cluster us/PUBLISH", f"{NODE} / Redis", "user / system us (both)",
        "reads / writes per PUBLISH (both)", f"{NODE} PUBLISH/s", "Redis PUBLISH/s",
        "machine idle",
    ]  # fmt: skip
    rows = []
    for row in result["rows"]:
        b, r = row[NODE], row[REDIS]
        rows.append([
            str(row.get("run", 1)), str(row["n"]), str(row["pipeline"]),
            str(row.get("linger_us", 0)),
            f"{b['us_per_publish']:.1f}", f"{r['us_per_publish']:.1f}",
            fmt_ratio(b["us_per_publish"] / r["us_per_publish"]),
            f"{b['user_us']:.1f} / {b['system_us']:.1f}, {r['user_us']:.1f} / {r['system_us']:.1f}",
            f"{b['reads']:.2f} / {b['writes']:.2f}, {r['reads']:.2f} / {r['writes']:.2f}",
            fmt_num(b["publish_per_s"]), fmt_num(r["publish_per_s"]),
            f"{b['machine_idle']:.0%} / {r['machine_idle']:.0%}",
        ])  # fmt: skip
    return table(header, rows)


def markdown(result: dict[str, Any]) -> str:
    header = [
        "-P", "subscribers", f"{NODE} us/req", "redis-server us/req", f"{FLOOR} us/req",
        f"{NODE} / redis-server", f"{NODE} - floor",
    ]  # fmt: skip
    rows = []
    for row in result["rows"]:
        floor = row.get(FLOOR)
        rows.append([
            str(row["pipeline"]), str(row["subscribers"]),
            f"{row[NODE]:.2f}", f"{row[REDIS]:.2f}",
            "-" if floor is None else f"{floor:.2f}",
            fmt_ratio(row[NODE] / row[REDIS]),
            "-" if floor is None else f"{row[NODE] - floor:.2f}",
        ])  # fmt: skip
    return table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_cost", description=__doc__)
    parser.add_argument("--requests-p1", type=int, default=60_000)
    parser.add_argument("--requests-p16", type=int, default=300_000)
    parser.add_argument(
        "--command", default="PUBLISH", choices=sorted(COMMANDS), help="the request (one node)"
    )
    parser.add_argument(
        "--subscribers", default="0,1,10", help="PUBLISH's subscriber counts (one node)"
    )
    parser.add_argument(
        "--cluster", default=None, help="cluster sizes (e.g. 3,6,12): the cluster table only"
    )
    parser.add_argument(
        "--forward-linger-us",
        default="0",
        help="with --cluster: bloomcast's --cluster-forward-linger-us values, e.g. 0,5000",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="with --cluster: repeat the whole set, in the same order",
    )
    args = parser.parse_args(argv)
    requests = {1: args.requests_p1, 16: args.requests_p16}
    if args.cluster:
        sizes = [int(x) for x in args.cluster.split(",")]
        lingers = tuple(int(x) for x in args.forward_linger_us.split(","))
        print(cluster_markdown(run_cluster_cpu(sizes, requests, lingers, args.runs)))
    else:
        subscribers = tuple(int(x) for x in args.subscribers.split(","))
        print(markdown(run_cpu_cost(requests, args.command, subscribers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
