"""Memory per node (issue 18): an idle node, and what 1,000 subscribed channels
and 1,000 patterns add, next to redis-server 7.0.15 in the same run.

Each server starts alone (bloomcast: ``bloomcast node``, a one-node cluster
with its bus; Redis: ``redis-server --cluster-enabled yes``, what one Redis
Cluster node holds, and plain ``redis-server``). After 2 s idle its memory is
read from ``/proc/<pid>/smaps_rollup`` (kB, Linux):

- *RSS*: resident pages, shared library pages included (what ``ps`` shows);
- *USS*: pages only this process maps (``Private_Clean + Private_Dirty``): what
  one more node on the same machine costs, since libpython, libssl and the
  other libraries' pages are shared between nodes;
- *anon*: heap and stacks (``Anonymous``).

Then ``--clients`` connections SUBSCRIBE to ``--channels`` channels (names of
24 bytes, split evenly), and RSS is read again; the same with PSUBSCRIBE to as
many patterns, and with ``--idle-clients`` connections that each sent one PING
(per-connection state: the client object, its parser and buffers). The figure
is the growth per 1,000, in MB (10^6 bytes).

For scale, the interpreter's floor: a Python process that imports asyncio and
uvloop, which every node needs, and nothing else.

``uv run python -m bench.memory [--channels 10000] [--clients 10]``: prints a
Markdown table. Nothing here asserts a size.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.servers import NODE, start_node
from bloomcast.testing import Server
from bloomcast.testing.ports import free_port
from bloomcast.testing.servers import REDIS, start_anchor

MB = 1_000_000


def smaps_kb(pid: int) -> dict[str, int]:
    """``/proc/<pid>/smaps_rollup`` as {field: kB}."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def footprint(pid: int) -> dict[str, float]:
    """RSS, USS and anonymous memory of ``pid`` in MB."""
    s = smaps_kb(pid)
    return {
        "rss_mb": s["Rss"] * 1024 / MB,
        "uss_mb": (s["Private_Clean"] + s["Private_Dirty"]) * 1024 / MB,
        "anon_mb": s["Anonymous"] * 1024 / MB,
    }


def _subscribe_all(
    port: int, command: bytes, names: list[bytes], clients: int
) -> list[socket.socket]:
    """``clients`` connections, each (P)SUBSCRIBEd to its share of ``names``;
    returns once every confirmation has been read."""
    socks = []
    share = -(-len(names) // clients)
    for i in range(clients):
        mine = names[i * share : (i + 1) * share]
        if not mine:
            break
        sock = socket.create_connection(("127.0.0.1", port))
        request = b"".join(
            b"*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(command), command, len(n), n) for n in mine
        )
        sock.sendall(request)
        # every confirmation ends with the subscription count: read until the last
        want = b":%d\r\n" % len(mine)
        got = b""
        while not got.endswith(want):
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"server closed while subscribing ({command.decode()})")
            got = got[-64:] + chunk
        socks.append(sock)
    return socks


def _idle_connections(port: int, n: int) -> list[socket.socket]:
    """``n`` connections that each sent PING and read its +PONG."""
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"PING\r\n")
        if sock.recv(16) != b"+PONG\r\n":
            raise ConnectionError("no +PONG")
        socks.append(sock)
    return socks


def measure_server(
    start: Callable[[], Server], channels: int, clients: int, idle_clients: int
) -> dict[str, Any]:
    """Idle footprint, then growth per 1,000 channels, patterns and idle clients."""
    result: dict[str, Any] = {}
    server = start()
    try:
        time.sleep(2.0)
        before = footprint(server.pid)["rss_mb"]
        socks = _idle_connections(server.port, idle_clients)
        time.sleep(1.0)
        grown = footprint(server.pid)["rss_mb"] - before
        result["per_1000_clients_mb"] = grown * 1000 / idle_clients
        for sock in socks:
            sock.close()
    finally:
        server.stop()
    for kind, command in (("channels", b"SUBSCRIBE"), ("patterns", b"PSUBSCRIBE")):
        server = start()
        try:
            time.sleep(2.0)
            idle = footprint(server.pid)
            result.setdefault("idle", idle)
            names = [b"bench:mem:%s:%012d" % (kind[:2].encode(), i) for i in range(channels)]
            socks = _subscribe_all(server.port, command, names, clients)
            time.sleep(1.0)
            after = footprint(server.pid)
            result[f"per_1000_{kind}_mb"] = (after["rss_mb"] - idle["rss_mb"]) * 1000 / channels
            for sock in socks:
                sock.close()
        finally:
            server.stop()
    return result


def python_floor() -> dict[str, float]:
    """Footprint of ``python -c 'import asyncio, uvloop'`` (then sleeping)."""
    code = "import asyncio, uvloop, sys, time; print('ok', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        time.sleep(0.5)
        return footprint(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def _start_redis_cluster_node() -> Server:
    """A ``redis-server --cluster-enabled yes`` with its bus on a free port of
    its own (``--cluster-port``, as bench/redis_cluster.py starts them: the
    default, port + 10000, does not exist for a port above 55535)."""
    return start_anchor(
        REDIS,
        "--cluster-enabled", "yes",
        "--cluster-config-file", "nodes-bench.conf",
        "--cluster-port", str(free_port()),
    )  # fmt: skip


def run_memory(channels: int, clients: int, idle_clients: int) -> dict[str, Any]:
    systems: dict[str, Callable[[], Server]] = {
        f"{NODE} (one-node cluster, bus on)": start_node,
        "redis-server --cluster-enabled yes": _start_redis_cluster_node,
        "redis-server": lambda: start_anchor(REDIS),
    }
    out: dict[str, Any] = {"channels": channels, "clients": clients, "systems": {}}
    for name, start in systems.items():
        out["systems"][name] = measure_server(start, channels, clients, idle_clients)
    out["python_floor"] = python_floor()
    return out


def markdown(result: dict[str, Any]) -> str:
    rows = [
        "| system | idle RSS MB | idle USS MB | idle anon MB | RSS MB per 1,000 channels | "
        "RSS MB per 1,000 patterns | RSS MB per 1,000 idle clients |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in result["systems"].items():
        idle = r["idle"]
        rows.append(
            f"| {name} | {idle['rss_mb']:.1f} | {idle['uss_mb']:.1f} | {idle['anon_mb']:.1f} | "
            f"{r['per_1000_channels_mb']:.3f} | {r['per_1000_patterns_mb']:.3f} | "
            f"{r['per_1000_clients_mb']:.2f} |"
        )
    floor = result["python_floor"]
    rows.append(
        f"| python + asyncio + uvloop, nothing else | {floor['rss_mb']:.1f} | "
        f"{floor['uss_mb']:.1f} | {floor['anon_mb']:.1f} | - | - | - |"
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--channels", type=int, default=10_000, help="channels (and patterns)")
    parser.add_argument("--clients", type=int, default=10, help="subscriber connections")
    parser.add_argument("--idle-clients", type=int, default=2000, help="idle connections")
    args = parser.parse_args(argv)
    print(markdown(run_memory(args.channels, args.clients, args.idle_clients)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
