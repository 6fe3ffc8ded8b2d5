"""``bloomcast bench visibility``: what Redis Cluster's delivery semantics cost a
SUBSCRIBE (issue 27 item 1), side by side with Redis Cluster and Valkey.

Since issue 27 a node confirms a (P|S)SUBSCRIBE once every live peer has
acknowledged the filter change (subscribe visibility, on by default, waiting
at most 1000 ms; docs/architecture.md §4), so a PUBLISH made anywhere after
the reply reaches the subscriber, as Redis Cluster's broadcast guarantees.
Per cluster size and system this measures:

- the SUBSCRIBE reply time (fresh channel each, one at a time), p50 / p99;
- subscribe churn: SUBSCRIBE + UNSUBSCRIBE cycles per second of fresh
  channels on one connection, each reply awaited; and summed over 50
  connections churning at once, spread over the nodes (issue 48);
- the ledger: SUBSCRIBE on node i, PUBLISH on node j the moment the reply is
  read (bloomcast/testing/visibility.py), delivered / made;
- bloomcast with one peer stopped (SIGSTOP): the SUBSCRIBE reply time, which
  the timeout bounds until the peer is suspected (then it is not waited for),
  and the timeouts counted.

Systems: bloomcast with default flags, bloomcast with
``--subscribe-visibility-timeout 0`` (the old immediate reply), Valkey 9.1 and
Redis 7.0.15 clusters (anchors: their SUBSCRIBE is local; the broadcast is
paid by every PUBLISH instead).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.cluster_bench import start_cluster, system_version
from bench.convergence import percentile
from bench.results import table
from bench.servers import NODE
from bloomcast.testing import REDIS, VALKEY, LocalCluster, redis_server_path
from bloomcast.testing.faults import pause, resume
from bloomcast.testing.visibility import (
    KINDS,
    RawConn,
    subscribe_churn,
    subscribe_churn_many,
    subscribe_then_publish,
)

OFF = f"{NODE}, visibility 0"
COMMAND = "uv run bloomcast bench visibility"


@dataclass
class VisibilityPlan:
    """Sizes of the visibility benchmark; ``quick()`` is for tests."""

    sizes: tuple[int, ...] = (3, 6)
    trials: int = 300
    churn_s: float = 5.0
    stopped_trials: int = 20
    #: connections churning at once (each its own fresh channels)
    many: int = 50

    @classmethod
    def quick(cls) -> VisibilityPlan:
        return cls(sizes=(3,), trials=12, churn_s=0.5, stopped_trials=3, many=10)


def measure(ports: list[int], plan: VisibilityPlan, shard: bool) -> dict[str, Any]:
    """Reply times and the ledger (``shard``: SSUBSCRIBE too, not for Redis
    Cluster, whose nodes answer MOVED for a slot they do not own), churn."""
    kinds = KINDS if shard else KINDS[:2]
    ledger = subscribe_then_publish(ports, plan.trials, kinds)
    waits = ledger.waits
    return {
        "subscribe_p50_ms": percentile(waits, 0.5) * 1000,
        "subscribe_p99_ms": percentile(waits, 0.99) * 1000,
        "churn_per_s": subscribe_churn(ports[0], plan.churn_s),
        "churn_many_per_s": subscribe_churn_many(ports, plan.many, plan.churn_s),
        "expected": ledger.expected,
        "delivered": ledger.delivered,
    }


#: node timeout of the stopped-peer run: protocol period node_timeout / 10 = 1 s
STOPPED_NODE_TIMEOUT_MS = 10_000


def stopped_peer(plan: VisibilityPlan) -> dict[str, Any]:
    """3 bloomcast nodes (default flags, node timeout 10 s), node 2 stopped:
    SUBSCRIBE reply times on node 0 and what it counted.

    The node timeout makes the protocol period 1 s, so the stopped peer is
    suspected no sooner than two periods (2 s) after it stopped: the first
    SUBSCRIBE, sent right after the stop, must run into the 1000 ms visibility
    timeout. (At 4 s the period was 400 ms and a suspicion at 800 ms could
    end the first wait before its timeout.)"""
    with LocalCluster(3, extra_args=["--node-timeout-ms", str(STOPPED_NODE_TIMEOUT_MS)]) as cluster:
        pause(cluster, 2)
        waits = []
        try:
            conn = RawConn(cluster.ports[0])
            for k in range(plan.stopped_trials):
                t0 = time.perf_counter()
                conn.call("SUBSCRIBE", f"stopped.{k}.{time.monotonic_ns()}")
                waits.append(time.perf_counter() - t0)
            conn.close()
        finally:
            resume(cluster, 2)
        info = cluster.cluster_info(0)
    return {
        "waits_ms": [round(w * 1000, 2) for w in waits],
        "timeouts": int(info["cluster_subscribe_visibility_timeouts"]),
    }


def run_visibility(plan: VisibilityPlan) -> dict[str, Any]:
    systems = [NODE, OFF, VALKEY] + ([REDIS] if redis_server_path() is not None else [])
    rows = []
    for n in plan.sizes:
        results: dict[str, Any] = {}
        for system in systems:
            base = NODE if system == OFF else system
            args = ["--subscribe-visibility-timeout", "0"] if system == OFF else []
            with start_cluster(base, n, extra_args=args) as cluster:
                results[system] = measure(list(cluster.ports), plan, shard=base == NODE)
        rows.append({"nodes": n, "results": results})
    return {
        "plan": asdict(plan),
        "versions": {s: system_version(s) for s in (NODE, VALKEY, REDIS)},
        "sizes": rows,
        "stopped_peer": stopped_peer(plan),
    }


def visibility_markdown(result: dict[str, Any]) -> str:
    plan = result["plan"]
    lines = [
        f"Per size and system: {plan['trials']} trials of SUBSCRIBE (a fresh channel) on "
        "node i and, the moment its reply is read, PUBLISH on node j (PSUBSCRIBE and, "
        "on bloomcast, SSUBSCRIBE in turn); the reply time of each SUBSCRIBE; churn = "
        f"SUBSCRIBE + UNSUBSCRIBE cycles of fresh channels per second on one connection "
        f"({plan['churn_s']:g} s), and summed over {plan.get('many', 50)} connections churning "
        f"at once, spread over the nodes, each on its own channels. `{NODE}` runs with "
        f"default flags (subscribe visibility on, 1000 ms), `{OFF}` with "
        "`--subscribe-visibility-timeout 0`.",
        "",
    ]
    rows = []
    for size in result["sizes"]:
        for system, r in size["results"].items():
            rows.append(
                [
                    str(size["nodes"]),
                    system,
                    f"{r['subscribe_p50_ms']:.2f}",
                    f"{r['subscribe_p99_ms']:.2f}",
                    f"{r['churn_per_s']:,.0f}",
                    f"{r['churn_many_per_s']:,.0f}" if "churn_many_per_s" in r else "",
                    f"{r['delivered']}/{r['expected']}",
                ]
            )
    header = [
        "N",
        "system",
        "SUBSCRIBE p50 ms",
        "p99 ms",
        "churn cycles/s",
        f"{plan.get('many', 50)} connections' churn cycles/s",
        "published after",
    ]
    lines.append(table(header, rows))
    stopped = result["stopped_peer"]
    waits = stopped["waits_ms"]
    lines += [
        "",
        f"One peer stopped (SIGSTOP, 3 nodes, node timeout "
        f"{STOPPED_NODE_TIMEOUT_MS // 1000} s): {len(waits)} SUBSCRIBEs in a "
        f"row on another node took {', '.join(f'{w:.0f}' for w in waits[:6])}"
        f"{' ...' if len(waits) > 6 else ''} ms (max {max(waits):.0f} ms): those sent before the "
        f"peer is suspected (two protocol periods, >= 2 s) wait for the 1000 ms timeout, "
        f"later ones none; "
        f"`cluster_subscribe_visibility_timeouts` counted {stopped['timeouts']}, and the "
        "node logs the first, naming the peer.",
    ]
    return "\n".join(lines)
