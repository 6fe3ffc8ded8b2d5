"""A connection flood on the bus port (issue 49, finding 2), real processes.

Node 0 of a three-node cluster runs with a descriptor limit of 256
(``prlimit --nofile=256:256``): it fits ``maxclients`` to it at start with
Redis's three log lines (and shrinks the bus's automatic handshake cap to 40:
a quarter of what the limit leaves after Redis's 32 and 64 for peers' links).
Then 400 bare TCP connections to its bus port, 100 from the peers' address
and 300 from twenty other loopback addresses, are held open: the node keeps
at most ``cluster-max-handshakes`` of them in their handshake, at most
``cluster-max-handshakes-per-ip`` (16) from one address, and closes the rest
at once (the per-address cap first, then the one in all), counting them
(CLUSTER INFO / INFO ``cluster_stats_links_rejected``) and logging them
rate-limited. Meanwhile a new client's PING is answered, its peers stay
linked, and the cluster stays ``ok`` on every node.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest
import redis

from bloomcast.testing import LocalCluster
from bloomcast.testing.bus_flood import PingWatch, closed_count, open_bare
from bloomcast.testing.ports import free_port, wait_port
from router.fdlimit import BUS_PEER_FDS, MIN_RESERVED_FDS
from tests.integration.conftest import wait_for

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)"),
]

LIMIT = 256
MAXCLIENTS_ERROR = b"-ERR max number of clients reached\r\n"
SOURCES = tuple(f"127.0.0.{i}" for i in range(2, 22))


def test_a_node_with_256_descriptors_under_400_bus_connections_serves_and_counts(tmp_path):
    cluster = LocalCluster(3, log_dir=tmp_path, extra_args=["--node-timeout-ms", "3000"])
    try:
        cluster.start_node(0, ["prlimit", f"--nofile={LIMIT}:{LIMIT}", *cluster.node_args(0)])
        cluster.start_node(1)
        cluster.start_node(2)
        cluster.wait_ready(60)
        r0 = cluster.client(0)
        log0 = (tmp_path / "node-0.log").read_text()
        cap = 128
        if "Increased maximum number of open files" not in log0:  # (no CAP_SYS_RESOURCE)
            cap = (LIMIT - MIN_RESERVED_FDS - BUS_PEER_FDS) // 4  # the bus's share shrunk: 40
            fitted = LIMIT - MIN_RESERVED_FDS - BUS_PEER_FDS - cap  # 120 clients
            assert r0.config_get("maxclients") == {"maxclients": str(fitted)}
            assert "You requested maxclients of 10000 requiring at least 10224" in log0
            assert "Server can't set maximum open files to 10224 because of OS error" in log0
            assert f"maxclients has been reduced to {fitted} to compensate for low ulimit" in log0

        # 100 from the peers' own address: over the per-address cap (16)
        socks = open_bare(cluster.bus_ports[0], 100)
        try:
            wait_for(
                lambda: int(cluster.cluster_info(0)["cluster_stats_links_rejected"]) == 100 - 16,
                30,
                "the per-address cap",
            )
            # 300 more from twenty others: over the cap in all
            socks += open_bare(cluster.bus_ports[0], 300, SOURCES)
            assert len(socks) == 400
            with PingWatch(cluster.ports[0]) as watch:

                def rejected() -> int:
                    return int(cluster.cluster_info(0)["cluster_stats_links_rejected"])

                wait_for(lambda: rejected() >= 400 - cap, 30, "refusals counted")
                wait_for(lambda: watch.pings >= 20, 10, "PINGs answered")
            assert watch.errors == []
            assert closed_count(socks) >= 400 - cap
            info = r0.info("everything")
            assert info["cluster_stats_links_rejected"] >= 400 - cap
            with cluster.client(0) as fresh:  # a new client during the flood
                assert fresh.ping() is True
            for i in range(3):  # the peers stay linked: the cluster is ok everywhere
                ci = cluster.cluster_info(i)
                assert ci["cluster_state"] == "ok", (i, ci)
                assert ci["cluster_known_nodes"] == "3", (i, ci)
                assert int(ci["cluster_links_connected"]) == 4, (i, ci)
            log0 = (tmp_path / "node-0.log").read_text()
            refused = [line for line in log0.splitlines() if "refused: " in line]
            assert 2 <= len(refused) <= 1 + len(SOURCES)  # rate-limited: one per address
            assert "(cluster-max-handshakes-per-ip 16)" in refused[0]
            assert f"(cluster-max-handshakes {cap})" in refused[-1]
        finally:
            for s in socks:
                s.close()
        cluster.wait_ready(30)
    finally:
        cluster.stop()


def test_accept_errors_are_counted_logged_and_no_connection_is_reset(tmp_path):
    """A node with 64 descriptors (``--no-bus``: maxclients fitted to 32),
    stopped while 150 clients connect, then let go: its first accepts run out
    of descriptors. Each failed accept() is counted (INFO
    ``total_accept_errors``) and logged in Redis's words, and every one of
    the 150 gets an answer: PONG, or Redis's maxclients error (uvloop's own
    listener reset such connections and said nothing)."""
    port = free_port()
    log = tmp_path / "node.log"
    cmd = ["prlimit", "--nofile=64:64", sys.executable, "-m", "bloomcast.cli", "node"]
    with open(log, "wb") as err:
        proc = subprocess.Popen([*cmd, "--port", str(port), "--no-bus"], stderr=err)
    socks: list[socket.socket] = []
    try:
        wait_port(port, timeout=30)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            socks = open_bare(port, 150)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        replies = []
        for s in socks:
            s.settimeout(10)
            try:
                s.sendall(b"PING\r\n")
                replies.append(s.recv(64))
            except OSError as exc:
                replies.append(repr(exc).encode())
        answered = {r for r in replies if r in (b"+PONG\r\n", MAXCLIENTS_ERROR)}
        assert len(answered) == 2 and replies.count(b"+PONG\r\n") >= 1, set(replies)
        assert all(r in answered for r in replies), set(replies)
        for s in socks:
            s.close()
        socks = []
        with redis.Redis(port=port, socket_timeout=10) as r:
            info = r.info("stats")
        assert info["total_accept_errors"] >= 1
        text = log.read_text()
        assert "Accepting client connection: accept: Too many open files" in text
        assert text.count("Accepting client connection") == 1  # once a minute
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        proc.wait(10)
