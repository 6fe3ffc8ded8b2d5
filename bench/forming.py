"""Where forming a cluster goes: N node processes started at once, and what
each one did until every node was ready (issue 40).

    uv run python -m bench.forming --nodes 100 200 [--idle-s 600]

For each N: a LocalCluster (node timeout 15000 ms) started at once; the
seconds until ready; each node's CPU seconds at ready (``schedstat``: the
Python start-up of a node, about 0.3 s on this machine, included); the
frames each node sent by type and the other CLUSTER INFO counters of
start-up work (handshakes failed, suspicions, late timer periods), mean and
max over the nodes. With ``--idle-s``, then that long idle: CPU per node and
every suspicion, PFAIL and FAIL seen (any at all is a failure of the goal).

It only reads CLUSTER INFO, so it measures an older checkout as well (run it
from this tree with ``--root`` pointing at the other one: its nodes are
started there).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from typing import Any

from bench.scale import base_port_below_ephemeral, cpu_ns
from bloomcast.testing.local_cluster import LocalCluster

#: counters of start-up work besides the frames sent
COUNTERS = (
    "cluster_stats_auth_failures",
    "cluster_stats_handshakes_refused",
    "cluster_stats_suspicions",
    "cluster_stats_refutations",
    "cluster_stats_late_ticks",
)
#: what an idle window must not see
IDLE_BAD = ("cluster_stats_suspicions", "cluster_stats_messages_fail_sent")


def _infos(cluster: LocalCluster) -> list[dict[str, str]]:
    out = []
    for i in range(cluster.size):
        try:
            out.append(cluster.cluster_info(i))
        except Exception:  # a node that does not answer: counted as nothing
            out.append({})
    return out


def _work(infos: list[dict[str, str]]) -> dict[str, dict[str, float]]:
    values: dict[str, list[int]] = defaultdict(list)
    for info in infos:
        for key, value in info.items():
            sent = key.startswith("cluster_stats_messages_") and key.endswith("_sent")
            if (sent or key in COUNTERS) and value.isdigit():
                values[key].append(int(value))
    return {
        key: {"mean": sum(v) / len(infos), "max": max(v)}
        for key, v in sorted(values.items())
        if any(v)
    }


def _delta(before: list[dict[str, str]], after: list[dict[str, str]], key: str) -> int:
    """``key`` summed over the nodes, after minus before."""
    pairs = zip(before, after, strict=True)
    return sum(int(b.get(key, 0)) - int(a.get(key, 0)) for a, b in pairs)


def form(n: int, ready_timeout_s: float, idle_s: float, root: str | None) -> dict[str, Any]:
    if root is not None:
        os.chdir(root)  # the nodes run `python -m bloomcast.cli` from there
    cluster = LocalCluster(
        n, base_port=base_port_below_ephemeral(n), extra_args=["--node-timeout-ms", "15000"]
    )
    t0 = time.monotonic()
    try:
        for i in range(n):
            cluster.start_node(i)
        try:
            cluster.wait_ready(ready_timeout_s)
            ready: float | None = time.monotonic() - t0
        except TimeoutError:
            ready = None
        pids = [p.pid for p in cluster.processes if p is not None]
        cpu = [cpu_ns([pid]) / 1e9 for pid in pids]
        infos = _infos(cluster)
        row: dict[str, Any] = {
            "nodes": n,
            "ready_s": ready,
            "cpu_s_per_node": {"mean": sum(cpu) / n, "max": max(cpu)},
            "work": _work(infos),
        }
        if idle_s:
            c0, t1 = cpu_ns(pids), time.monotonic()
            time.sleep(idle_s)
            c1, t2 = cpu_ns(pids), time.monotonic()
            after = _infos(cluster)
            row["idle"] = {
                "seconds": round(t2 - t1, 1),
                "cpu_pct_per_node": 100 * (c1 - c0) / 1e9 / (t2 - t1) / n,
                **{key: _delta(infos, after, key) for key in IDLE_BAD},
                "pfail_or_fail_at_end": sum(
                    int(b.get("cluster_nodes_pfail", 0)) + int(b.get("cluster_nodes_fail", 0))
                    for b in after
                ),
            }
        return row
    finally:
        cluster.stop(30)


def show(row: dict[str, Any]) -> str:
    ready = "not ready" if row["ready_s"] is None else f"ready in {row['ready_s']:.1f} s"
    cpu = row["cpu_s_per_node"]
    head = f"N = {row['nodes']}: {ready}; CPU s per node {cpu['mean']:.2f}"
    lines = [f"{head} (max {cpu['max']:.2f})"]
    for key, v in row["work"].items():
        lines.append(f"  {key}: {v['mean']:.1f} (max {v['max']})")
    if "idle" in row:
        lines.append(f"  idle: {row['idle']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.forming", description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 200])
    parser.add_argument("--ready-timeout-s", type=float, default=600.0)
    parser.add_argument("--idle-s", type=float, default=0.0)
    parser.add_argument("--root", default=None, help="a checkout whose nodes to start")
    args = parser.parse_args(argv)
    for n in args.nodes:
        print(show(form(n, args.ready_timeout_s, args.idle_s, args.root)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
