"""Node.js Redis Cluster clients against a 3-node bloomcast cluster: node-redis 4
``createCluster`` and ioredis 5 ``Redis.Cluster`` (packages from the committed
lockfile, ``npm ci``) subscribe to a channel, a pattern and a shard channel,
publish through the cluster client, and receive each message once."""

from __future__ import annotations

import json
import shutil
import subprocess
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
def cluster():
    if not (JS / "node_modules").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, timeout=300)
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
