"""``bloomcast bench faults``: the same faults against bloomcast and a real Redis
7.0 Cluster, judged by the same ledger (bloomcast/testing/scenarios.py).

Why: redis/redis #122 (antirez) — Redis Cluster's bus drops a PUBLISH whose
link is down and nobody learns of it. bloomcast's forwarding sessions
(cluster_bus/session.py) promise the opposite: nothing lost inside the replay
window, and beyond it a loss the receiving node counts exactly. This puts
both systems through the same faults and prints the ledger next to what the
system itself counted.

Each scenario runs on a fresh 3-node cluster (node timeout 2000 ms): a
publisher on node 0 at 300 PUBLISH/s, a channel and a pattern subscriber on
node 1, primed first. Both systems' bus ports sit behind a
:class:`~bloomcast.testing.proxy.FaultProxy` (bloomcast through
``--cluster-announce-bus-port``, Redis through ``cluster-announce-bus-port``
and ``CLUSTER MEET ip port bus-port``):

- ``reset``: every proxy RSTs its connections and refuses new ones for 1 s;
- ``stall``: every proxy stops copying for 1.2 s (under the node timeout);
- ``restart``: kill -9 node 1, restart it on the same ports (bloomcast: a new
  node id; Redis: its nodes.conf), subscribe again; the window opens then;
- ``beyond``: every proxy resets for 2.5 s; bloomcast with a 300 ms replay
  window, so it must lose, and say so.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any

from bench.redis_cluster import RedisCluster
from bench.results import table
from bloomcast.testing import LOOPBACK, free_ports, server_version, wait_for_ping
from bloomcast.testing.faults import ProxiedCluster, info
from bloomcast.testing.ports import wait_port_free
from bloomcast.testing.proxy import FaultProxy
from bloomcast.testing.scenarios import NODE_ARGS, FaultRun

SCENARIOS = {
    "reset": "every bus proxy RSTs all connections and refuses new ones for 1 s",
    "stall": "every bus proxy stops copying for 1.2 s (node timeout 2 s)",
    "restart": "kill -9 the subscribers' node, restart it on the same ports, resubscribe",
    "beyond": "every bus proxy resets for 2.5 s (bloomcast: replay window 300 ms)",
}
COMMAND = "uv run bloomcast bench faults"


class _Bloomcast:
    """A :class:`ProxiedCluster` of 3 nodes."""

    name = "bloomcast"

    def __init__(self, scenario: str) -> None:
        args = list(NODE_ARGS)
        if scenario == "beyond":
            args += ["--cluster-replay-buffer-ms", "300"]
        self.cluster = ProxiedCluster(3, extra_args=args)
        try:
            self.cluster.start()
        except BaseException:
            self.cluster.stop()  # a node that failed to start leaves none behind
            raise
        self.proxies = self.cluster.proxies
        self.addresses = [(LOOPBACK, p) for p in self.cluster.ports]

    def restart(self, i: int) -> None:
        self.cluster.kill(i)
        self.cluster.restart(i)

    def counted(self) -> int | None:
        """Forwards node 1 counted as lost for good."""
        return int(info(self.cluster, 1).get("cluster_stats_publish_lost", 0))

    def stop(self) -> None:
        self.cluster.stop()


class _Redis:
    """A 3-node Redis 7.0 Cluster with each bus port behind a proxy."""

    name = "redis"

    def __init__(self, scenario: str, binary: str) -> None:
        real = free_ports(3)
        self.proxies = [FaultProxy(port, bus_framing=False).start() for port in real]
        self.cluster = RedisCluster(
            3,
            binary=binary,
            node_timeout_ms=2000,
            bus_ports_fixed=real,
            announce_bus_ports=[p.port for p in self.proxies],
        )
        try:
            self.cluster.start()
        except BaseException:
            self.stop()
            raise
        self.addresses = [(LOOPBACK, p) for p in self.cluster.ports]

    def restart(self, i: int) -> None:
        node = self.cluster.nodes[i]
        node.proc.kill()
        node.proc.wait(10)
        wait_port_free(node.port, 30)
        node.proc = subprocess.Popen(node.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_ping(node.port, 30, node.proc)
        self.cluster.wait_ok()

    def counted(self) -> int | None:
        return None  # Redis Cluster has no counter of lost PUBLISH

    def stop(self) -> None:
        self.cluster.stop()
        for proxy in self.proxies:
            proxy.stop()


def _fault(system: _Bloomcast | _Redis, run: FaultRun, scenario: str) -> None:
    if scenario in ("reset", "beyond"):
        seconds = 1.0 if scenario == "reset" else 2.5
        for proxy in system.proxies:
            proxy.reset(seconds)
        time.sleep(seconds)
    elif scenario == "stall":
        for proxy in system.proxies:
            proxy.stall(1.2)
        time.sleep(1.2)
    elif scenario == "restart":
        system.restart(1)
        run.resubscribe()
    else:
        raise ValueError(scenario)


def run_scenario(system: _Bloomcast | _Redis, scenario: str) -> dict[str, Any]:
    run = FaultRun(system.addresses[0], system.addresses[1])
    try:
        run.start()
        time.sleep(0.5)
        _fault(system, run, scenario)
        run.finish(after=1.5)
        verdicts = run.verdicts()
    finally:
        run.stop()
    return {
        "published": run.last - run.first + 1,
        "subscribers": {name: v.as_dict() for name, v in verdicts.items()},
        "counted": system.counted(),
        "proxy": [dict(p.counts) for p in system.proxies],
    }


def run_faults(redis_binary: str | None = None) -> dict[str, Any]:
    """Every scenario on both systems: ``{"results": {system: {scenario: row}}}``."""
    binary = redis_binary or shutil.which("redis-server")
    if binary is None:
        raise ValueError("bench faults needs redis-server (apt-get install redis-server)")
    results: dict[str, dict[str, Any]] = {"bloomcast": {}, "redis": {}}
    for scenario in SCENARIOS:
        for name in ("bloomcast", "redis"):
            print(f"bench: faults {name} {scenario} ...", flush=True)
            system: _Bloomcast | _Redis = (
                _Bloomcast(scenario) if name == "bloomcast" else _Redis(scenario, binary)
            )
            try:
                results[name][scenario] = run_scenario(system, scenario)
            finally:
                system.stop()
    return {
        "versions": {"redis-server (faults)": server_version(binary)},
        "scenarios": SCENARIOS,
        "results": results,
    }


def _counted_cell(lost: int, counted: int | None) -> str:
    if counted is None:
        return "no counter: lost silently" if lost else "no counter"
    return f"yes: {counted}" + (" (= ledger)" if counted == lost else " (differs!)")


def faults_markdown(result: dict[str, Any]) -> str:
    """The ``faults`` section: one ledger row per system, scenario and subscriber."""
    rows = []
    for scenario in result["scenarios"]:
        for system in ("bloomcast", "redis"):
            row = result["results"][system][scenario]
            for sub, v in row["subscribers"].items():
                rows.append(
                    [
                        system,
                        scenario,
                        sub,
                        str(v["expected"]),
                        str(v["delivered"]),
                        str(v["lost"]),
                        str(v["duplicated"]),
                        str(v["reordered"]),
                        _counted_cell(v["lost"], row["counted"]),
                    ]
                )
    header = ["system", "scenario", "subscriber", "published", "delivered", "lost",
              "duplicated", "reordered", "loss counted by the system"]  # fmt: skip
    scenarios = "\n".join(f"- `{k}`: {v}" for k, v in result["scenarios"].items())
    return (
        "The same faults against bloomcast and a real Redis 7.0 Cluster (3 nodes each, "
        "node timeout 2 s), judged by one ledger (`bloomcast/testing/ledger.py`): a "
        "publisher on node 0 numbers 300 PUBLISH/s, a channel and a pattern subscriber "
        "on node 1 record what arrives; every cache is primed first. Both systems' bus "
        "ports are behind a `FaultProxy` (`--cluster-announce-bus-port` / "
        "`cluster-announce-bus-port`). *published* counts the numbers of the window "
        "(for `restart`, from the new subscription on); *loss counted* is node 1's "
        "`cluster_stats_publish_lost` (bloomcast); Redis Cluster has no such counter.\n\n"
        f"{scenarios}\n\n"
        + table(header, rows)
        + f"\n\nReproduce: `{COMMAND}` (under a minute on 2 cores; needs redis-server and "
        "redis-benchmark from Debian's redis-server / redis-tools)."
    )
