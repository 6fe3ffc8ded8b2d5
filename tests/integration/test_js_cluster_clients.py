"""Node.js Redis Cluster clients against a 3-node bloomcast cluster: node-redis 4
``createCluster`` and ioredis 5 ``Redis.Cluster`` (packages from the committed
lockfile, ``npm ci``) subscribe to a channel, a pattern and a shard channel,
publish through the cluster client, and receive each message once; and each
keeps working while a node joins and another is forgotten (issue 13), its
refreshed topology showing each new map."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bloomcast.testing import LocalCluster

JS = Path(__file__).parent / "js"

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(400),
    pytest.mark.skipif(
        shutil.which("node") is None or shutil.which("npm") is None,
        reason="Node.js and npm are not installed (the node-redis / ioredis clients need them)",
    ),
]


@pytest.fixture(scope="module")
def npm_packages() -> None:
    if not (JS / "node_modules").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, timeout=300)


@pytest.fixture(scope="module")
def cluster(npm_packages: None) -> Iterator[LocalCluster]:
    with LocalCluster(3) as c:
        c.wait_ready(60)
        yield c


@pytest.mark.parametrize("client", ["node-redis", "ioredis"])
def test_node_cluster_client_pubsub(cluster, client):
    out = subprocess.run(
        ["node", str(JS / "cluster_clients.mjs"), client, *map(str, cluster.ports)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["nodes"] == 3
    assert report["received"] == sorted(
        [
            ["message", "news", "hello"],
            ["pmessage", "news", "hello"],
            ["smessage", "orders{7}", "o1"],
        ]
    )


class Driver:
    """``cluster_topology.mjs`` as a child process: one command line in, one
    JSON line out."""

    def __init__(self, client: str, port: int) -> None:
        self.proc = subprocess.Popen(
            ["node", str(JS / "cluster_topology.mjs"), client, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.read() == {"ready": True}

    def read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the client script exited ({self.proc.poll()})"
        reply = json.loads(line)
        assert "error" not in reply, reply["error"]
        return reply

    def ask(self, command: str) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def round(self) -> None:
        """Every numbered message of the round arrives exactly once.

        Not in order: node-redis and ioredis send a keyless command such as
        PUBLISH to a node of their choice per command (node-redis round-robin,
        ioredis at random), and neither Redis Cluster nor bloomcast orders
        PUBLISHes made on different nodes (a message published on the
        subscriber's own node is delivered at once, one published elsewhere
        crosses the bus). Order from one node is the bus's promise, and the
        ledger tests of tests/integration and tests/cluster_bus assert it."""
        r = self.ask("round")["round"]
        assert sorted(r["got"]) == list(range(*r["sent"])), json.dumps(r)

    def masters(self) -> list[int]:
        return self.ask("map")["map"]["masters"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.ask_quit()

    def ask_quit(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        try:
            assert self.proc.wait(20) == 0
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.mark.parametrize("client", ["node-redis", "ioredis"])
def test_node_cluster_client_through_a_join_and_a_forget(npm_packages, topology, client):
    topology.start_three()
    ports = topology.ports
    driver = Driver(client, ports[0])
    try:
        driver.round()
        assert driver.masters() == sorted(ports[:3])
        topology.join()
        assert driver.masters() == sorted(ports)
        driver.round()
        topology.kill_and_forget()
        driver.round()
        assert driver.masters() == sorted(ports[:3])
        driver.round()
    finally:
        driver.close()
