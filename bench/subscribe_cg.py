"""Instructions per SUBSCRIBE + UNSUBSCRIBE cycle, counted with callgrind,
bloomcast beside redis-server 7.0.15 in the same run (issue 48 item 3).

``uv run python -m bench.subscribe_cg`` runs each server process under
``valgrind --tool=callgrind --instr-atstart=no`` (start-up runs
uninstrumented), and once it is up (in a cluster: converged) turns
instrumentation on (``callgrind_control -i on``), zeroes the counters, runs
K cycles on one raw connection (SUBSCRIBE of a fresh channel, its reply
read, UNSUBSCRIBE, its reply read: each cycle adds a name to the filter and
removes it), and dumps the counters; twice, with a short and a long K. Per
cycle = (long - short) / (K_long - K_short): what does not grow with the
cycles (the first connection, warming) cancels out. Counts are user-space
instructions only (the kernel's part of a read or write is not in them) and
do not move with the machine's load, except for the timers a process runs
meanwhile (Redis's ``serverCron``, the bus's tick), which the slower
instrumented run sees more of: a few hundred instructions per cycle.

Rows:

- ``redis-server``: cluster-enabled no (Redis Cluster's SUBSCRIBE is the
  same local work);
- bloomcast ``--no-bus``: the node's local part (reply, tables, counting
  filter, FilterChange, merge);
- bloomcast node 0 of a 3-node cluster (visibility on, the default): the
  origin's whole part (local + FILTER_DELTA to 2 peers + 2 ACKs read);
- bloomcast node 1 of that cluster, per cycle of node 0: what a peer pays for
  two remote subscribe changes (the frames read, each delta applied, each ACK
  written).

Both instrumented nodes of the cluster run in one cluster run (node 2 runs
plainly); ``PYTHONHASHSEED=0``.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bloomcast.testing import LocalCluster, redis_server_path
from bloomcast.testing.ports import LOOPBACK, free_ports, wait_for_ping

#: (short, long) cycles per measurement
CYCLES = (100, 500)
VALGRIND = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]


def _reply(kind: bytes, name: bytes, count: int) -> bytes:
    return b"*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n:%d\r\n" % (len(kind), kind, len(name), name, count)


def _command(*args: bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


def cycles(port: int, n: int, tag: str) -> None:
    """``n`` SUBSCRIBE + UNSUBSCRIBE cycles of fresh channels on one
    connection, each reply awaited."""
    with socket.create_connection((LOOPBACK, port), timeout=120) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(n):
            name = b"cg:%s:%d" % (tag.encode(), i)
            for verb, count in ((b"subscribe", 1), (b"unsubscribe", 0)):
                sock.sendall(_command(verb, name))
                want = _reply(verb, name, count)
                got = b""
                while len(got) < len(want):
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise RuntimeError("connection closed")
                    got += chunk
                if got != want:
                    raise RuntimeError(f"unexpected reply {got!r}")


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def _dump_total(pid: int, out_prefix: str) -> int:
    """Dump ``pid``'s counters and return the dump's total."""
    before = set(glob.glob(out_prefix + ".*"))
    _control(pid, "-d")
    deadline = time.monotonic() + 60
    while True:
        new = set(glob.glob(out_prefix + ".*")) - before
        if new:
            path = max(new, key=os.path.getmtime)
            time.sleep(0.2)  # let callgrind finish writing it
            text = Path(path).read_text()
            m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            if m is not None:
                return int(m.group(1))
        if time.monotonic() > deadline:
            raise RuntimeError("no callgrind dump")
        time.sleep(0.2)


def per_cycle(
    measured: Sequence[tuple[int, str]], port: int, runs: tuple[int, int] = CYCLES
) -> list[float]:
    """Instructions per cycle on ``port`` of each measured process (pid,
    callgrind output prefix)."""
    for pid, _ in measured:
        _control(pid, "-i", "on")
    cycles(port, 20, "warm")
    totals: list[list[int]] = []
    for n in runs:
        for pid, _ in measured:
            _control(pid, "-z")
        cycles(port, n, f"run{n}")
        totals.append([_dump_total(pid, prefix) for pid, prefix in measured])
    short, long = runs
    return [(totals[1][j] - totals[0][j]) / (long - short) for j in range(len(measured))]


def redis_row(tmp: str, runs: tuple[int, int]) -> float:
    binary = redis_server_path()
    if binary is None:
        raise RuntimeError("redis-server is not installed")
    port = free_ports(1)[0]
    prefix = os.path.join(tmp, "redis.cg")
    cmd = [*VALGRIND, f"--callgrind-out-file={prefix}", binary]
    cmd += ["--port", str(port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_ping(port, 60)
        return per_cycle([(proc.pid, prefix)], port, runs)[0]
    finally:
        proc.terminate()
        proc.wait(30)


def _node_cmd(prefix: str, args: list[str]) -> list[str]:
    return [*VALGRIND, f"--callgrind-out-file={prefix}", *args]


def single_row(tmp: str, runs: tuple[int, int]) -> float:
    port = free_ports(1)[0]
    prefix = os.path.join(tmp, "single.cg")
    args = [sys.executable, "-m", "bloomcast.cli", "node", "--no-bus"]
    args += ["--bind", LOOPBACK, "--port", str(port)]
    proc = subprocess.Popen(
        _node_cmd(prefix, args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_ping(port, 120)
        return per_cycle([(proc.pid, prefix)], port, runs)[0]
    finally:
        proc.terminate()
        proc.wait(30)


def cluster_rows(tmp: str, runs: tuple[int, int], extra: Sequence[str] = ()) -> tuple[float, float]:
    """(origin, peer) per cycle on node 0 of 3 (node timeout 60 s: an
    instrumented node is slow)."""
    cluster = LocalCluster(3, extra_args=["--node-timeout-ms", "60000", *extra])
    prefixes = [os.path.join(tmp, f"node{i}.cg") for i in range(2)]
    try:
        for i in range(3):
            args = cluster.node_args(i)
            cluster.start_node(i, _node_cmd(prefixes[i], args) if i < 2 else args)
        cluster.wait_ready(300)
        measured = []
        for i in range(2):
            proc = cluster.processes[i]
            assert proc is not None
            measured.append((proc.pid, prefixes[i]))
        origin, peer = per_cycle(measured, cluster.ports[0], runs)
        return origin, peer
    finally:
        cluster.stop(30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default=f"{CYCLES[0]},{CYCLES[1]}", help="short,long cycles")
    ap.add_argument("--rows", default="redis,single,cluster", help="comma-separated")
    ap.add_argument("--keep", help="a directory to keep the callgrind dumps in")
    args = ap.parse_args(argv)
    short, long = (int(x) for x in args.runs.split(","))
    runs = (short, long)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed", file=sys.stderr)
        return 1
    os.environ["PYTHONHASHSEED"] = "0"
    rows = args.rows.split(",")
    print("| SUBSCRIBE + UNSUBSCRIBE cycle, fresh channel | instructions per cycle |")
    print("|---|---|")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = args.keep or tmp_dir
        if "redis" in rows:
            print(f"| redis-server 7.0.15 | {redis_row(tmp, runs):,.0f} |", flush=True)
        if "single" in rows:
            print(f"| bloomcast --no-bus | {single_row(tmp, runs):,.0f} |", flush=True)
        if "cluster" in rows:
            origin, peer = cluster_rows(tmp, runs)
            print(f"| bloomcast node 0 of 3 (origin, visibility on) | {origin:,.0f} |")
            print(f"| bloomcast node 1 of 3 (a peer, 2 remote changes) | {peer:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
