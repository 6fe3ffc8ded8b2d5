"""Instructions per PUBLISH, counted with callgrind, bloomcast beside
redis-server 7.0.15 and Redis Cluster in the same run (issue 48 items 1-2).

``uv run python -m bench.publish_cg`` runs each server process under
``valgrind --tool=callgrind --instr-atstart=no`` (the method of
:mod:`bench.subscribe_cg`: instrumentation on once the server is up, a
short and a long run of PUBLISH on one raw connection, each batch's replies
awaited, (long - short) / (the PUBLISH between them)). ``--pipeline``: the
PUBLISH sent per batch (``-P 1``: each awaited).

Rows, each with 0 and with 1 subscriber (a raw connection subscribed to the
channel, drained by a thread; in a cluster on node 1, the publisher on
node 0):

- ``redis-server`` (cluster-enabled no) and ``bloomcast --no-bus``: one node;
- Redis Cluster (3 redis-server, ``cluster-enabled yes``) and a 3-node
  bloomcast cluster: node 0 (the origin), node 1 (the subscriber's), node 2,
  each per PUBLISH of node 0, and their sum: what the cluster spends on one
  PUBLISH.

Counts are user-space instructions (the kernel's part of a read or write is
not in them), ``PYTHONHASHSEED=0``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from bench.subscribe_cg import VALGRIND, _command, _control, _dump_total
from bloomcast.testing import LocalCluster, redis_server_path
from bloomcast.testing.ports import LOOPBACK, free_ports, wait_for_ping

#: (short, long) PUBLISH per measurement
RUNS = (200, 1000)
CHANNEL = b"cg:ch"
MESSAGE = b"hello"


class Subscriber:
    """A raw connection subscribed to :data:`CHANNEL`, drained by a thread;
    ``got`` counts the message frames read."""

    FRAME = b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(CHANNEL),
        CHANNEL,
        len(MESSAGE),
        MESSAGE,
    )

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((LOOPBACK, port), timeout=300)
        self.sock.sendall(_command(b"SUBSCRIBE", CHANNEL))
        confirm = b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(CHANNEL), CHANNEL)
        got = b""
        while len(got) < len(confirm):
            got += self.sock.recv(4096)
        self.bytes = len(got) - len(confirm)
        self._stop = False
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    @property
    def got(self) -> int:
        return self.bytes // len(self.FRAME)

    def _drain(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            self.bytes += len(chunk)

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.sock.close()


def publishes(sock: socket.socket, n: int, depth: int) -> int:
    """``n`` PUBLISH (rounded down to whole batches) in batches of ``depth``,
    each batch's replies read; returns how many were sent."""
    request = _command(b"PUBLISH", CHANNEL, MESSAGE)
    for _ in range(n // depth):
        sock.sendall(request * depth)
        want = depth
        buf = b""
        while buf.count(b"\r\n") < want:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            buf += chunk
        if not buf.startswith(b":"):
            raise RuntimeError(f"unexpected reply {buf[:40]!r}")
    return n // depth * depth


def per_publish(
    measured: Sequence[tuple[int, str]],
    port: int,
    depth: int,
    runs: tuple[int, int],
    sub: Subscriber | None,
) -> list[float]:
    """Instructions per PUBLISH on ``port`` of each measured process (pid,
    callgrind output prefix); with ``sub``, every message must reach it."""
    with socket.create_connection((LOOPBACK, port), timeout=300) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if sub is not None:  # the subscription known where the PUBLISH lands
            deadline = time.monotonic() + 120
            while sub.got == 0:
                publishes(sock, 1, 1)
                time.sleep(0.2)
                if time.monotonic() > deadline:
                    raise RuntimeError("the subscriber got nothing")
        for pid, _ in measured:
            _control(pid, "-i", "on")
        publishes(sock, 5 * depth, depth)  # warm
        totals: list[list[int]] = []
        sent: list[int] = []
        for n in runs:
            for pid, _ in measured:
                _control(pid, "-z")
            before = sub.got if sub is not None else 0
            n = publishes(sock, n, depth)  # (whole batches: 192 of 200 at -P 16)
            sent.append(n)
            if sub is not None:
                deadline = time.monotonic() + 120
                while sub.got < before + n:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"lost messages: {sub.got - before} of {n}")
                    time.sleep(0.05)
            totals.append([_dump_total(pid, prefix) for pid, prefix in measured])
    short, long = sent
    return [(totals[1][j] - totals[0][j]) / (long - short) for j in range(len(measured))]


def _run(cmd: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def single(tmp: str, redis: bool, subs: int, depth: int, runs: tuple[int, int]) -> float:
    port = free_ports(1)[0]
    prefix = os.path.join(tmp, f"{'redis' if redis else 'node'}{subs}.cg")
    if redis:
        binary = redis_server_path()
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        args = [binary, "--port", str(port), "--bind", LOOPBACK, "--save", ""]
        args += ["--appendonly", "no"]
    else:
        args = [sys.executable, "-m", "bloomcast.cli", "node", "--no-bus"]
        args += ["--bind", LOOPBACK, "--port", str(port)]
    proc = _run([*VALGRIND, f"--callgrind-out-file={prefix}", *args])
    sub = None
    try:
        wait_for_ping(port, 120)
        sub = Subscriber(port) if subs else None
        return per_publish([(proc.pid, prefix)], port, depth, runs, sub)[0]
    finally:
        if sub is not None:
            sub.close()
        proc.terminate()
        proc.wait(30)


def redis_cluster(tmp: str, subs: int, depth: int, runs: tuple[int, int]) -> list[float]:
    from bench.redis_cluster import RedisCluster

    binary = redis_server_path()
    out = os.path.join(tmp, f"rc{subs}.cg.%p")
    wrapper = [*VALGRIND, f"--callgrind-out-file={out}"]
    cluster = RedisCluster(3, binary=binary, wrapper=wrapper, node_timeout_ms=60_000)
    cluster.start_timeout = 300
    sub = None
    with cluster:
        measured = [(n.proc.pid, out.replace("%p", str(n.proc.pid))) for n in cluster.nodes]
        sub = Subscriber(cluster.ports[1]) if subs else None
        try:
            return per_publish(measured, cluster.ports[0], depth, runs, sub)
        finally:
            if sub is not None:
                sub.close()


def bloomcast_cluster(tmp: str, subs: int, depth: int, runs: tuple[int, int]) -> list[float]:
    cluster = LocalCluster(3, extra_args=["--node-timeout-ms", "60000"])
    prefixes = [os.path.join(tmp, f"bc{subs}.node{i}.cg") for i in range(3)]
    sub = None
    try:
        for i in range(3):
            args = cluster.node_args(i)
            cluster.start_node(i, [*VALGRIND, f"--callgrind-out-file={prefixes[i]}", *args])
        cluster.wait_ready(300)
        measured = []
        for i in range(3):
            proc = cluster.processes[i]
            assert proc is not None
            measured.append((proc.pid, prefixes[i]))
        sub = Subscriber(cluster.ports[1]) if subs else None
        return per_publish(measured, cluster.ports[0], depth, runs, sub)
    finally:
        if sub is not None:
            sub.close()
        cluster.stop(30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default=f"{RUNS[0]},{RUNS[1]}", help="short,long PUBLISH")
    ap.add_argument("--pipeline", type=int, default=1, help="PUBLISH per batch")
    ap.add_argument("--subscribers", default="0,1", help="comma-separated: 0 and/or 1")
    ap.add_argument("--rows", default="redis,single,rc,cluster", help="comma-separated")
    ap.add_argument("--keep", help="a directory to keep the callgrind dumps in")
    args = ap.parse_args(argv)
    short, long = (int(x) for x in args.runs.split(","))
    runs = (short, long)
    depth = args.pipeline
    if shutil.which("valgrind") is None:
        print("valgrind is not installed", file=sys.stderr)
        return 1
    os.environ["PYTHONHASHSEED"] = "0"
    rows = args.rows.split(",")
    print(
        f"| PUBLISH -P {depth} (instructions per PUBLISH) | subscribers | node 0 | node 1 "
        "| node 2 | sum |"
    )
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = args.keep or tmp_dir
        for subs in (int(s) for s in args.subscribers.split(",")):
            if "redis" in rows:
                n = single(tmp, True, subs, depth, runs)
                print(f"| redis-server 7.0.15 | {subs} | {n:,.0f} | | | {n:,.0f} |", flush=True)
            if "single" in rows:
                n = single(tmp, False, subs, depth, runs)
                print(f"| bloomcast --no-bus | {subs} | {n:,.0f} | | | {n:,.0f} |", flush=True)
            for row, label, fn in (
                ("rc", "Redis Cluster 7.0.15, 3 nodes", redis_cluster),
                ("cluster", "bloomcast, 3 nodes", bloomcast_cluster),
            ):
                if row in rows:
                    a, b, c = fn(tmp, subs, depth, runs)
                    print(
                        f"| {label} | {subs} (node 1) | {a:,.0f} | {b:,.0f} | {c:,.0f} "
                        f"| {a + b + c:,.0f} |",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
