"""Analytics across hosts with no shared file system: three nodes, each in its own
network namespace with its own spool directory, and ``stats run --nodes`` in the
hub namespace (where the clients are), writing a Redis there. Its counts equal
what was sent, exactly (issue 30: one host's spool alone gave ``{'a': 40}``
instead of ``{a: 45, b: 25, c: 15}``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from bloomcast.testing import free_port, stop_process
from bloomcast.testing.faults import NetnsCluster, in_netns, netns_unavailable
from tests.spark.spool_nodes import ROOT, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.slow, pytest.mark.long]

METRICS_PORT = 9121
#: channel -> PUBLISH count per node (node 0, 1, 2)
SENT = {"a": (15, 15, 15), "b": (0, 25, 0), "c": (5, 0, 10)}


class SpoolNetnsCluster(NetnsCluster):
    """Node i also spools to ``spools[i]`` and serves it on its metrics port."""

    def __init__(self, spools: list[Path], **kwargs: Any) -> None:
        super().__init__(len(spools), **kwargs)
        self.spools = spools

    def node_args(self, i: int) -> list[str]:
        return [*super().node_args(i), "--traffic-dir", str(self.spools[i]),
                "--metrics-port", str(METRICS_PORT)]  # fmt: skip


def traffic(cluster: NetnsCluster) -> int:
    """From the hub: subscribers for b (node 0) and a, c (node 2), then every PUBLISH
    of SENT; returns the messages the subscribers received."""
    subs, clients = [], []  # a client closes its pool when collected: keep them
    for node, channels in ((0, ["b"]), (2, ["a", "c"])):
        clients.append(redis.Redis(host=cluster.addresses[node], port=cluster.ports[node]))
        sub = clients[-1].pubsub()
        sub.subscribe(*channels)
        for _ in channels:  # confirmed once every peer holds the filter change
            message = sub.get_message(timeout=10)
            assert message is not None and message["type"] == "subscribe", message
        subs.append(sub)
    for node in range(3):
        with redis.Redis(host=cluster.addresses[node], port=cluster.ports[node]) as r:
            for channel, counts in SENT.items():
                for _ in range(counts[node]):
                    r.publish(channel, "x")
    want = 45 + 15 + 25  # a and c at node 2, b at node 0
    got = 0
    deadline = time.monotonic() + 20
    while got < want and time.monotonic() < deadline:
        for sub in subs:
            message = sub.get_message(timeout=0.1)
            if message is not None and message["type"] == "message":
                got += 1
    for sub in subs:
        sub.close()
    for client in clients:
        client.close()
    return got


def test_stats_run_over_three_hosts_without_a_shared_directory_is_exact(tmp_path: Path) -> None:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    spools = [tmp_path / f"host{i}" / "spool" for i in range(3)]
    with SpoolNetnsCluster(spools, log_dir=tmp_path / "logs") as cluster:
        assert in_netns(cluster.hub, lambda: traffic(cluster), timeout=60) == 85
        # one origin event per PUBLISH (85), one receiver event per forward (a and c
        # sent to node 2 from nodes 0 and 1: 35, b from node 1 to node 0: 25)
        written = 85 + 60

        def taps_wrote() -> int:
            return sum(int(cluster.info(i)["traffic_events_written"]) for i in range(3))

        wait_until(lambda: taps_wrote() == written, "the taps to write every event", 10)
        # each tap completes its file within its rotation period (5 s)
        wait_until(lambda: not [p for s in spools for p in s.glob("*.ndjson.tmp")], "the taps", 30)
        port = free_port()
        hub = ["ip", "netns", "exec", cluster.hub]
        redis_proc = subprocess.Popen(
            [*hub, "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            url = f"redis://127.0.0.1:{port}/0"
            nodes = ",".join(f"{a}:{METRICS_PORT}" for a in cluster.addresses)

            def bloomcast(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [*hub, sys.executable, "-m", "bloomcast.cli", *args],
                    capture_output=True, text=True, timeout=400, cwd=ROOT,
                )  # fmt: skip

            run = bloomcast(
                "stats", "run", "--nodes", nodes, "--once", "--redis", url,
                "--half-life", "1000d", "--checkpoint", str(tmp_path / "ck"),
                "--master", "local[2]", "--shuffle-partitions", "2",
            )  # fmt: skip
            assert run.returncode == 0, run.stderr
            assert f"{written} events applied" in run.stdout
            top = bloomcast("stats", "top", "channels:1000d", "--redis", url, "--json")
            assert top.returncode == 0, top.stderr
            counts = {r["bin"]: r["decayed count"] for r in json.loads(top.stdout)}
            # a half-life of 1000 days: a minute of decay moves a count by < 1e-6
            assert {k: round(v) for k, v in counts.items()} == {"a": 45, "b": 25, "c": 15}
            assert all(abs(v - round(v)) < 1e-3 for v in counts.values())
            # every node deleted what Spark committed
            assert not [p for s in spools for p in s.glob("*.ndjson")]
        finally:
            stop_process(redis_proc)  # type: ignore[arg-type]
