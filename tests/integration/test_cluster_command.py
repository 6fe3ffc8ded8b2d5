"""``bloomcast cluster up``: N joined nodes in the foreground; SIGINT (Ctrl-C)
and SIGTERM stop every node."""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import redis

from tests.procs import ignore_sigint

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base(n: int) -> int:
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 30000)
        if all(_free(base + i) and _free(base + i + 10000) for i in range(n)):
            return base
    raise RuntimeError("no free port range")


@pytest.mark.parametrize(
    ("stop_signal", "sigint_ignored"),
    [(signal.SIGINT, False), (signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["SIGINT", "SIGINT-started-ignored", "SIGTERM"],
)
def test_cluster_up_runs_joined_nodes_and_stops_them(stop_signal, sigint_ignored):
    n = 3
    base = free_base(n)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bloomcast.cli", "cluster", "up", "--nodes", str(n),
         "--base-port", str(base), "--node-timeout-ms", "2000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ignore_sigint if sigint_ignored else None,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"cluster up exited: {proc.stderr.read()}"
            lines.append(line)
            if "ready" in line:
                break
        assert f"127.0.0.1:{base + 2} (bus {base + 10002})" in "".join(lines)
        sub = redis.Redis(port=base + 2, socket_timeout=10)
        ps = sub.pubsub()
        ps.subscribe("news")
        ps.get_message(timeout=5)
        with redis.Redis(port=base, socket_timeout=10) as pub:
            nodes = pub.execute_command("CLUSTER", "NODES")
            text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
            assert len(text.strip().splitlines()) == n
            pub.publish("news", "hello")
        msg = None
        t0 = time.monotonic()
        while msg is None and time.monotonic() - t0 < 5:
            msg = ps.get_message(timeout=0.2)
            if msg and msg["type"] != "message":
                msg = None
        assert msg and msg["data"] == b"hello"
        ps.close()
        sub.close()
        proc.send_signal(stop_signal)
        assert proc.wait(30) == 0
        # every node is gone: its client port is free again
        t0 = time.monotonic()
        while not all(_free(base + i) for i in range(n)):
            assert time.monotonic() - t0 < 10, "a node outlived cluster up"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_cluster_up_serves_metrics_on_each_node():
    n = 2
    base = free_base(n)
    metrics_base = free_base(n)
    while any(not _free(metrics_base + i) for i in range(n)) or abs(metrics_base - base) < 10:
        metrics_base = free_base(n)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bloomcast.cli", "cluster", "up", "--nodes", str(n),
         "--base-port", str(base), "--metrics-base-port", str(metrics_base)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines = []
        while not lines or "ready" not in lines[-1]:
            line = proc.stdout.readline()
            assert line, f"cluster up exited: {proc.stderr.read()}"
            lines.append(line)
        for i in range(n):
            url = f"http://127.0.0.1:{metrics_base + i}"
            assert f"metrics {url}/metrics" in "".join(lines)
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/healthz", timeout=5) as r:
                        assert r.status == 200
                        break
                except urllib.error.HTTPError as exc:  # 503 until filters converge
                    assert exc.code == 503 and time.monotonic() < deadline
                    time.sleep(0.1)
            with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
                text = r.read().decode()
            assert f"bloomcast_cluster_known_nodes {float(n)}" in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_node_flags_pass_protected_mode_as_yes_or_no():
    import argparse

    from bloomcast.cluster_command import configure, node_flags_from

    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["up", "--protected-mode", "no", "--cluster-secret", "s"])
    flags = node_flags_from(args)
    assert flags[flags.index("--protected-mode") + 1] == "no"
    assert flags[flags.index("--cluster-secret") + 1] == "s"
