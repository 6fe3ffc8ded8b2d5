"""Where each PUBLISH's cost goes in a cluster, bloomcast beside Redis Cluster
(issue 48 item 1), counted per PUBLISH and per node.

Each system gets a fresh cluster of N nodes with ``bloomcast bench cluster``'s
workload (bench/cluster_bench.py: 4 x N channels, each subscribed on one node)
and its throughput phase's load (one redis-benchmark per node at once, 50
clients in all, ``-P 1`` by default). Around that load, for every server
process:

* user and system CPU (``/proc/<pid>/stat``), voluntary context switches
  (``/proc/<pid>/status``: the times the process slept in the kernel, i.e. the
  event loop's wake-ups from a blocking poll);
* system calls by kind, counted by the kernel's ``syscalls:sys_enter_*``
  tracepoints with ``perf stat -p`` (no ptrace: the process runs at its own
  pace, unlike under ``strace -c``, whose stops change how much each loop
  turn batches);
* bus traffic: PUBLISH messages sent (``cluster_stats_messages_publish_sent``)
  and, from the kernel's ``tcp_info`` of every bus socket (``ss -tin``), bytes
  and TCP segments sent: segments per bus PUBLISH message say how many
  forwards share a write.

Counts (system calls, segments, bytes) do not move with the machine's load;
CPU microseconds do less than wall time; the machine's idle share during the
run is printed beside them.

``uv run python -m bench.cluster_cost [--nodes 3,6] [--pipeline 1]
[--requests 30000] [--write]``: prints the table; ``--write`` replaces the
``## cluster: cost per PUBLISH`` section of docs/benchmarks.md (only it).
Needs ``perf`` (linux-perf) and root or ``perf_event_paranoid`` <= 1 for the
system call counts (left out, said so, without it). Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.cluster_bench import (
    ClusterPlan,
    aggregate_throughput,
    channel_name,
    settled_counters,
    start_cluster,
    wait_interest_known,
)
from bench.cpu_cost import _machine_idle, _server_pids, process_counts
from bench.loadgen import SubscriberPool
from bench.procs import tcp_sent
from bench.results import replace_section, table
from bench.servers import NODE, bloomcast_version
from bloomcast.testing import REDIS, redis_server_path, server_version

MESSAGE = b"hello"
SECTION = "cluster: cost per PUBLISH"
DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"

#: the system calls counted by kind (the rest: "other")
SYSCALLS = (
    "read",
    "recvfrom",
    "write",
    "sendto",
    "sendmsg",
    "writev",
    "epoll_wait",
    "epoll_pwait",
    "epoll_ctl",
    "futex",
)


def perf_path() -> str | None:
    """``perf`` if it can count this machine's syscall tracepoints, else None."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    probe = subprocess.run(
        [perf, "stat", "-x,", "-e", "raw_syscalls:sys_enter", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return perf if probe.returncode == 0 else None


class SyscallCounter:
    """``perf stat`` on one process: system calls by kind until :meth:`stop`."""

    def __init__(self, perf: str, pid: int) -> None:
        self._out = tempfile.NamedTemporaryFile(prefix="cluster_cost", suffix=".csv", delete=False)  # noqa: SIM115
        self._out.close()
        events = ",".join(
            ["raw_syscalls:sys_enter", *(f"syscalls:sys_enter_{name}" for name in SYSCALLS)]
        )
        self._proc = subprocess.Popen(
            [perf, "stat", "-x,", "-o", self._out.name, "-e", events, "-p", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> dict[str, int]:
        self._proc.send_signal(signal.SIGINT)
        self._proc.wait(timeout=30)
        counts: dict[str, int] = {}
        with open(self._out.name) as fh:
            for line in fh:
                parts = line.strip().split(",")
                if len(parts) < 3 or not parts[0].isdigit():
                    continue
                event = parts[2]
                name = (
                    "total" if event == "raw_syscalls:sys_enter" else event.rsplit("_enter_", 1)[1]
                )
                counts[name] = int(parts[0])
        os.unlink(self._out.name)
        counts["other"] = counts.get("total", 0) - sum(counts.get(n, 0) for n in SYSCALLS)
        return counts


def cpu_ns(pid: int) -> int:
    """Nanoseconds ``pid`` ran on a CPU, every thread's (``/proc/<pid>/task/*/schedstat``,
    its first field: the scheduler's exact count, where /proc/<pid>/stat's user
    and system times are sampled at each clock tick)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as fh:
            total += int(fh.read().split()[0])
    return total


def voluntary_switches(pid: int) -> int:
    """``voluntary_ctxt_switches`` of ``pid`` (every thread's: /proc/<pid>/task)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/status") as fh:
            for line in fh:
                if line.startswith("voluntary_ctxt_switches"):
                    total += int(line.split()[1])
    return total


def bus_tcp_counts(ports: Iterable[int]) -> tuple[int, int]:
    """(bytes sent, segments sent) over every established loopback socket whose
    local or peer port is in ``ports`` (:func:`bench.procs.tcp_sent`)."""
    return tcp_sent(ports)


def measure(system: str, n: int, pipeline: int, requests: int, perf: str | None) -> dict[str, Any]:
    """One system at N: the counts of the module doc, per PUBLISH (whole
    cluster and per node)."""
    plan = ClusterPlan()
    channels = [channel_name(j) for j in range(n * plan.channels_per_node)]
    with start_cluster(system, n) as cluster, contextlib.ExitStack() as stack:
        for i in range(n):
            mine = [ch for j, ch in enumerate(channels) if j % n == i]
            stack.enter_context(SubscriberPool(cluster.ports[i], mine, 1, MESSAGE))
        wait_interest_known(cluster, system)
        pids = _server_pids(cluster)
        counters = [SyscallCounter(perf, pid) for pid in pids] if perf else []
        time.sleep(0.5)  # perf attached
        sent0, _ = settled_counters(cluster)
        bytes0, segs0 = bus_tcp_counts(cluster.bus_ports)
        switches0 = [voluntary_switches(pid) for pid in pids]
        ns0 = [cpu_ns(pid) for pid in pids]
        before = [process_counts(pid) for pid in pids]
        idle0, total0 = _machine_idle()
        run = aggregate_throughput(cluster, pipeline, requests, plan.clients, len(channels))
        idle1, total1 = _machine_idle()
        after = [process_counts(pid) for pid in pids]
        ns1 = [cpu_ns(pid) for pid in pids]
        switches1 = [voluntary_switches(pid) for pid in pids]
        sent1, _ = settled_counters(cluster)
        bytes1, segs1 = bus_tcp_counts(cluster.bus_ports)
        syscalls = [c.stop() for c in counters]
    count = run["requests"]
    per_node: list[dict[str, float]] = []
    for i in range(len(pids)):
        row = {
            "cpu_us": (ns1[i] - ns0[i]) / count / 1e3,
            "user_us": (after[i][0] - before[i][0]) / count * 1e6,
            "system_us": (after[i][1] - before[i][1]) / count * 1e6,
            "wakeups": (switches1[i] - switches0[i]) / count,
        }
        if syscalls:
            row.update({f"sys_{k}": v / count for k, v in syscalls[i].items()})
        per_node.append(row)
    keys = per_node[0].keys()
    cluster_sum = {k: sum(row[k] for row in per_node) for k in keys}
    bus_msgs = sent1 - sent0
    return {
        "requests": count,
        "publish_per_s": run["rps"],
        "machine_idle": (idle1 - idle0) / max(1, total1 - total0),
        "per_node": per_node,
        "cluster": cluster_sum,
        "bus_msgs_per_publish": bus_msgs / count,
        "bus_bytes_per_msg": (bytes1 - bytes0) / bus_msgs if bus_msgs else 0.0,
        "bus_segments_per_msg": (segs1 - segs0) / bus_msgs if bus_msgs else 0.0,
        "bus_segments_per_publish": (segs1 - segs0) / count,
    }


def run(sizes: list[int], pipeline: int, requests: int) -> dict[str, Any]:
    perf = perf_path()
    rows = []
    for n in sizes:
        rows.append(
            {
                "nodes": n,
                REDIS: measure(REDIS, n, pipeline, requests, perf),
                NODE: measure(NODE, n, pipeline, requests, perf),
            }
        )
    binary = redis_server_path()
    return {
        "pipeline": pipeline,
        "perf": perf is not None,
        "versions": {NODE: bloomcast_version(), REDIS: server_version(binary) if binary else "-"},
        "rows": rows,
    }


#: table rows: (label, key in the cluster sums) — per PUBLISH, whole cluster
_ROWS = [
    ("CPU us (schedstat)", "cpu_us"),
    ("wake-ups (voluntary context switches)", "wakeups"),
    ("system calls, all", "sys_total"),
]
#: the system call kinds of the one "by kind" row (the others are 0 on both here)
_KINDS = ("read", "write", "epoll_wait", "epoll_pwait", "epoll_ctl", "other")


def _fmt(value: float) -> str:
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"


def markdown(result: dict[str, Any]) -> str:
    parts = [
        f"Per client PUBLISH at `-P {result['pipeline']}` (one redis-benchmark per node at "
        "once, 50 clients in all, `bloomcast bench cluster`'s workload), summed over the "
        "cluster's nodes, then per node (÷ N: every node is an origin); "
        f"{result['versions'][NODE]} beside {result['versions'][REDIS]}, same run. "
        "System calls by the kernel's tracepoints (`perf stat`); CPU from "
        "/proc/<pid>/task/*/schedstat (exact), split into user and system by "
        "/proc/<pid>/stat's clock-tick samples (coarse: one tick is 10 ms). "
        "`python -m bench.cluster_cost --write` rewrites this section."
    ]
    if not result["perf"]:
        parts.append("(perf unavailable: no system call counts.)")
    for row in result["rows"]:
        n = row["nodes"]
        b, r = row[NODE], row[REDIS]
        header = [
            f"N = {n}, per PUBLISH",
            "bloomcast (cluster)",
            "Redis Cluster (cluster)",
            "bloomcast / Redis",
            "bloomcast per node",
            "Redis per node",
        ]
        lines = []
        for label, key in _ROWS:
            if key not in b["cluster"]:
                continue
            bv, rv = b["cluster"][key], r["cluster"][key]
            ratio = f"{bv / rv:.2f}x" if rv else "-"
            lines.append([label, _fmt(bv), _fmt(rv), ratio, _fmt(bv / n), _fmt(rv / n)])
        lines.insert(
            1,
            [
                "  user / system us (ticks)",
                *(
                    f"{x['cluster']['user_us']:.2f} / {x['cluster']['system_us']:.2f}"
                    for x in (b, r)
                ),
                f"{b['cluster']['user_us'] / max(r['cluster']['user_us'], 1e-9):.2f}x / "
                f"{b['cluster']['system_us'] / max(r['cluster']['system_us'], 1e-9):.2f}x",
                "",
                "",
            ],
        )
        if "sys_total" in b["cluster"]:

            def kinds(res: dict[str, Any]) -> str:
                return " / ".join(f"{res['cluster'].get(f'sys_{k}', 0.0):.2f}" for k in _KINDS)

            lines.append(["  " + " / ".join(_KINDS), kinds(b), kinds(r), "", "", ""])
        for label, key in [
            ("bus PUBLISH messages", "bus_msgs_per_publish"),
            ("bus TCP segments", "bus_segments_per_publish"),
            ("bus bytes per bus message", "bus_bytes_per_msg"),
        ]:
            bv, rv = b[key], r[key]
            ratio = f"{bv / rv:.2f}x" if rv else "-"
            lines.append([label, _fmt(bv), _fmt(rv), ratio, "", ""])
        lines.append(
            [
                "PUBLISH/s (machine idle)",
                f"{b['publish_per_s']:.0f} ({b['machine_idle']:.0%})",
                f"{r['publish_per_s']:.0f} ({r['machine_idle']:.0%})",
                f"{b['publish_per_s'] / r['publish_per_s']:.2f}x",
                "",
                "",
            ]
        )
        parts.append(table(header, lines))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cluster_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--nodes", default="3", help="cluster sizes, comma-separated")
    parser.add_argument("--pipeline", type=int, default=1)
    parser.add_argument("--requests", type=int, default=60_000, help="PUBLISH per system and N")
    parser.add_argument("--write", action="store_true", help=f"replace ## {SECTION} in {DOC}")
    args = parser.parse_args(argv)
    try:
        sizes = [int(x) for x in args.nodes.split(",")]
    except ValueError:
        parser.error(f"--nodes: not a list of integers: {args.nodes!r}")
    if redis_server_path() is None:
        parser.error("redis-server not found: apt-get install redis-server")
    result = run(sizes, args.pipeline, args.requests)
    text = markdown(result)
    print(text)
    if args.write:
        DOC.write_text(replace_section(DOC.read_text(), SECTION, text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
