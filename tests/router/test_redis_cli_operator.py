"""An operator's redis-cli against real node processes (issue 43):
``redis-cli shutdown`` stopping a node of a cluster (a LEAVE the other node
logs), ``--stat``, ``--latency`` / ``--latency-history`` and ``monitor``.

redis-cli buffers its output when it is not writing to a terminal and is
stopped by a timeout here, so the long-running modes write line-buffered
(``stdbuf -oL``) and are read as they print."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest

from tests.integration.test_node_log import node, wait_line

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        shutil.which("redis-cli") is None,
        reason="redis-cli not installed (Debian package redis-tools; .ci/run installs it)",
    ),
]


def cli(port: int, *args: str, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_redis_cli_shutdown_stops_a_cluster_node_with_a_leave(tmp_path):
    log1, log2 = tmp_path / "n1.log", tmp_path / "n2.log"
    with node(log1) as (_, port1):
        seed = f"127.0.0.1:{_bus_port(port1)}"
        with node(log2, "--join", seed) as (proc2, port2):
            wait_line(log1, "joined the cluster")
            node2 = wait_line(log2, "Ready to accept connections")["message"].split()[2]
            done = cli(port2, "shutdown")
            # redis-cli takes the closed connection for success, prints nothing
            assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
            assert proc2.wait(15) == 0
            assert wait_line(log1, f"node {node2} left the cluster")["symbol"] == "*"
            assert wait_line(log2, "User requested shutdown")["symbol"] == "#"
            assert wait_line(log2, "Shutdown requested: sending LEAVE")
            assert cli(port1, "PING").stdout == "PONG\n"  # the other node goes on


def _bus_port(port: int) -> int:
    nodes = cli(port, "CLUSTER", "NODES").stdout
    myself = next(x for x in nodes.splitlines() if "myself" in x).split()[1]
    return int(myself.split("@")[1])


def _lines(argv: list[str], count: int, timeout: float = 15.0) -> list[str]:
    """The first ``count`` lines a long-running redis-cli mode prints."""
    proc = subprocess.Popen(
        ["stdbuf", "-oL", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        while len(out) < count and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            out.append(line.rstrip("\n"))
    finally:
        proc.kill()
        proc.wait()
    return out


def test_redis_cli_stat(tmp_path):
    with node(tmp_path / "n.log", bus=False) as (_, port):
        lines = _lines(["redis-cli", "-p", str(port), "--stat", "-i", "0.2"], 5)
    assert lines[0].startswith("------- data ------ ---")
    assert lines[1].split()[:5] == ["keys", "mem", "clients", "blocked", "requests"]
    rows = [row.split() for row in lines[2:5]]
    assert all(r[0] == "0" and r[1].endswith("M") and r[3] == "0" for r in rows)
    # clients: --stat's own connection (under load the first row may still
    # count the readiness probe, whose close the node had not read yet)
    assert [r[2] for r in rows][-2:] == ["1", "1"]
    # requests: --stat's own INFO, one more each time
    counts = [int(r[4]) for r in rows]
    assert counts == sorted(counts) and counts[-1] > counts[0]


def test_redis_cli_monitor_sees_a_subscriber_and_a_publisher(tmp_path):
    with node(tmp_path / "n.log", bus=False) as (_, port):
        argv = ["stdbuf", "-oL", "redis-cli", "-p", str(port), "monitor"]
        mon = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            assert mon.stdout is not None and mon.stdout.readline() == "OK\n"
            sub = subprocess.Popen(
                ["redis-cli", "-p", str(port), "SUBSCRIBE", "news"], stdout=subprocess.PIPE
            )
            try:
                assert cli(port, "PUBLISH", "news", "hi there").stdout in ("0\n", "1\n")
                seen = [mon.stdout.readline().rstrip("\n") for _ in range(2)]
            finally:
                sub.kill()
                sub.wait()
        finally:
            mon.kill()
            mon.wait()
    line = re.compile(r"^\d+\.\d{6} \[0 127\.0\.0\.1:\d+\] (.*)$")
    shown = sorted(m[1] for m in map(line.match, seen) if m)
    assert shown == ['"PUBLISH" "news" "hi there"', '"SUBSCRIBE" "news"'], seen


def test_redis_cli_latency_and_latency_history(tmp_path):
    with node(tmp_path / "n.log", bus=False) as (_, port):
        # --latency --raw: one line "min max avg samples" after -i seconds, then exits
        done = cli(port, "--latency", "--raw", "-i", "0.5", timeout=20)
        history = _lines(["redis-cli", "-p", str(port), "--latency-history", "-i", "0.3"], 2)
    assert done.returncode == 0, done.stderr
    low, high, avg, samples = done.stdout.split()
    assert 0 <= int(low) <= float(avg) <= int(high) and int(samples) > 10
    # not a terminal: --latency-history prints the same four numbers per -i period
    assert len(history) == 2
    for row in history:
        low, high, avg, samples = row.split()
        assert int(low) <= int(high) and int(samples) > 0
