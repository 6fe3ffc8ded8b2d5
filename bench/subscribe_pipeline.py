"""Pipelined SUBSCRIBE rounds on one connection, bloomcast beside Redis
Cluster in the same run (issue 48 item 3: a socket.io adapter joining many
rooms, a redis-py pipeline).

``uv run python -m bench.subscribe_pipeline [--nodes 3] [--depth 32] [--seconds 3]``:
on node 0 of an N-node cluster, one connection sends ``depth`` SUBSCRIBEs of
fresh channels in one write and reads every confirmation, then ``depth``
UNSUBSCRIBEs the same way; rounds (a SUBSCRIBE write + an UNSUBSCRIBE write)
per second, and the p50 of the SUBSCRIBE write's reply time. Systems:
bloomcast (subscribe visibility on, the default), bloomcast with
``--subscribe-visibility-timeout 0``, Redis Cluster 7.0.15 (redis-server;
Valkey when it is not installed).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time

from bench.cluster_bench import start_cluster
from bench.servers import NODE
from bloomcast.testing import REDIS, VALKEY, redis_server_path
from bloomcast.testing.ports import LOOPBACK

OFF = f"{NODE}, visibility 0"


def _command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _read_confirmations(sock: socket.socket, n: int) -> None:
    got = b""
    while got.count(b"\r\n:") < n:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        got += chunk


def rounds(port: int, depth: int, seconds: float) -> tuple[float, float]:
    """(rounds per second, SUBSCRIBE write's reply p50 ms) on one connection."""
    waits: list[float] = []
    done = 0
    with socket.create_connection((LOOPBACK, port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        end = time.perf_counter() + seconds
        start = time.perf_counter()
        while time.perf_counter() < end:
            names = [b"sp:%d:%d" % (done, i) for i in range(depth)]
            t0 = time.perf_counter()
            sock.sendall(b"".join(_command(b"SUBSCRIBE", name) for name in names))
            _read_confirmations(sock, depth)
            waits.append(time.perf_counter() - t0)
            sock.sendall(b"".join(_command(b"UNSUBSCRIBE", name) for name in names))
            _read_confirmations(sock, depth)
            done += 1
        elapsed = time.perf_counter() - start
    return done / elapsed, statistics.median(waits) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--depth", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    anchor = REDIS if redis_server_path() is not None else VALKEY
    results: dict[str, tuple[float, float]] = {}
    for system in (NODE, OFF, anchor):
        extra = ["--subscribe-visibility-timeout", "0"] if system == OFF else []
        with start_cluster(NODE if system == OFF else system, args.nodes, extra) as cluster:
            results[system] = rounds(cluster.ports[0], args.depth, args.seconds)
    base = results[anchor][0]
    print(f"N = {args.nodes}, {args.depth} SUBSCRIBEs per write, then as many UNSUBSCRIBEs")
    print("| system | rounds/s | / anchor | SUBSCRIBE write reply p50 ms |")
    print("|---|---|---|---|")
    for system, (rate, p50) in results.items():
        print(f"| {system} | {rate:,.0f} | {rate / base:.2f}x | {p50:.2f} |")


if __name__ == "__main__":
    main()
