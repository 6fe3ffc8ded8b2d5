"""bench/cluster_cost.py's counters, on real processes and sockets (no cluster)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from bench.cluster_cost import SyscallCounter, bus_tcp_counts, cpu_ns, perf_path
from bloomcast.testing.ports import LOOPBACK, free_port

#: a child that writes 500 times to /dev/null, once it is told to start
_WRITER = """
import os, sys
sys.stdin.readline()
fd = os.open(os.devnull, os.O_WRONLY)
for _ in range(500):
    os.write(fd, b"x")
sys.stdin.readline()
"""


def test_syscall_counter_counts_a_processes_writes_by_kind():
    perf = perf_path()
    if perf is None:
        pytest.skip("perf cannot count syscall tracepoints here")
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER], stdin=subprocess.PIPE, text=True, bufsize=1
    )
    assert child.stdin is not None
    try:
        counter = SyscallCounter(perf, child.pid)
        time.sleep(0.5)  # perf attached
        child.stdin.write("go\n")
        time.sleep(0.5)
        counts = counter.stop()
    finally:
        child.stdin.write("end\n")
        child.wait(timeout=10)
    assert 500 <= counts["write"] < 520
    assert counts["total"] >= counts["write"] + counts["other"]


def test_bus_tcp_counts_reads_bytes_and_segments_of_the_given_port():
    port = free_port()
    with socket.create_server((LOOPBACK, port)) as server:
        client = socket.create_connection((LOOPBACK, port))
        peer, _ = server.accept()
        with client, peer:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            before = bus_tcp_counts([port])
            for _ in range(10):
                client.sendall(b"y" * 100)
                assert peer.recv(100)  # one segment each, acknowledged
            after = bus_tcp_counts([port])
    assert after[0] - before[0] >= 1000
    assert after[1] - before[1] >= 10


def test_cpu_ns_grows_with_the_cpu_a_process_spends():
    before = cpu_ns(os.getpid())
    sum(i * i for i in range(300_000))
    assert cpu_ns(os.getpid()) > before


def test_markdown_puts_bloomcast_beside_redis_with_their_ratio():
    from bench.cluster_cost import markdown
    from bench.servers import NODE
    from bloomcast.testing import REDIS

    def system(cpu: float, calls: float) -> dict[str, object]:
        sums = {"cpu_us": cpu, "user_us": cpu / 2, "system_us": cpu / 2, "wakeups": 0.1}
        sums |= {"sys_total": calls, "sys_read": calls / 2, "sys_write": calls / 2}
        return {
            "cluster": sums,
            "bus_msgs_per_publish": 1.0,
            "bus_segments_per_publish": 0.5,
            "bus_bytes_per_msg": 50.0,
            "publish_per_s": 1000.0,
            "machine_idle": 0.0,
        }

    result = {
        "pipeline": 1,
        "perf": True,
        "versions": {NODE: "bloomcast x", REDIS: "Redis y"},
        "rows": [{"nodes": 3, NODE: system(30.0, 2.0), REDIS: system(20.0, 8.0)}],
    }
    lines = markdown(result).splitlines()
    (cpu,) = [line for line in lines if line.startswith("| CPU us")]
    assert cpu == "| CPU us (schedstat) | 30.00 | 20.00 | 1.50x | 10.00 | 6.67 |"
    (calls,) = [line for line in lines if line.startswith("| system calls, all")]
    assert "| 0.25x |" in calls
