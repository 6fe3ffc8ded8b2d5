"""What is hot now (issue 51): the summary's cost where the issue sets it a bar.

``uv run python -m bench.hot_channels --million`` publishes to 1,000,000
distinct channels (``--channels``), pipelined 10,000 a write, at one node
with the summary on (``hot-channels-size`` 128, the default), at one with it
off (0), and at redis-server 7.0.15, each fresh and without a bus, while a
:class:`bench.probe.LatencyProbe` sends PING every 10 ms on another
connection: per server the wall time, the probe's worst wait, and the RSS
the run added (``/proc``). The summary holds K names per kind whatever the
number of channels, so the node's growth with it on is the growth with it
off (the allocator's, the parser's) give or take K entries.

``uv run python -m bench.hot_channels --cluster 12 --calls 50`` starts a
:class:`bloomcast.testing.local_cluster.LocalCluster` of N node processes,
publishes ``--names`` distinct channels at every node (each name its own
number of times, so the merged top differs from any one node's), then calls
``BLOOMCAST.HOTCHANNELS CLUSTER`` ``--calls`` times on node 0, one at a time:
the time to answer (p50, p99, worst) and the bytes each call moved (every
node's ``cluster_stats_stats_bytes_sent`` before and after, headers
included): per peer (a request and a reply) and in all, beside the bound
from K (:func:`peer_bound`).

``uv run python -m bench.hot_channels --cpu`` is ``bench.cpu_cost``'s
reading (server CPU per PUBLISH, ``redis-benchmark -c 50``) at one node with
the summary on and off, ``-P 1`` and ``-P 16``, 0 and 1 subscriber, the two
alternated ``--rounds`` times (each case a fresh node): the ratio on / off of
the summed CPU.

Speed is reported here, never asserted (tests/router/test_hotchannels.py
asserts the behaviour).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time
from typing import Any

from bench.probe import LatencyProbe, bulk, connect, rss_mb
from bench.servers import start_node
from bloomcast.testing import REDIS, redis_server_path, start_anchor

#: PUBLISH requests a write (and replies read before the next)
BATCH = 10_000


def _publish_distinct(port: int, channels: int) -> float:
    """``channels`` PUBLISH to distinct names on one connection, ``BATCH``
    pipelined a write (sent from a thread while the replies are read);
    returns the seconds until the last reply."""
    s = connect(port)
    start = time.perf_counter()
    try:
        for first in range(0, channels, BATCH):
            n = min(BATCH, channels - first)
            payload = b"".join(
                bulk(b"PUBLISH", b"hot:%d" % i, b"m") for i in range(first, first + n)
            )
            sender = threading.Thread(target=s.sendall, args=(payload,), daemon=True)
            sender.start()
            want = 4 * n  # ":0\r\n" each: nobody subscribes
            got = 0
            while got < want:
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise ConnectionError(f"closed after {got} of {want} bytes")
                got += len(chunk)
            sender.join()
        return time.perf_counter() - start
    finally:
        s.close()


def million(channels: int) -> list[dict[str, Any]]:
    """Each server fresh, the run under the latency probe (module doc)."""
    runs: list[tuple[str, Any]] = [
        ("bloomcast, hot channels on (K = 128)", lambda: start_node(["--no-bus"])),
        (
            "bloomcast, hot channels off",
            lambda: start_node(["--no-bus", "--hot-channels-size", "0"]),
        ),
    ]
    if redis_server_path() is not None:
        runs.append(("redis-server", lambda: start_anchor(REDIS)))
    out = []
    for label, start in runs:
        print(f"  {label} ...", flush=True)
        server = start()
        try:
            before, _ = rss_mb(server.pid)
            with LatencyProbe(server.port) as probe:
                seconds = _publish_distinct(server.port, channels)
            after, peak = rss_mb(server.pid)
        finally:
            server.stop()
        out.append(
            {
                "server": label,
                "seconds": seconds,
                "worst_ping_ms": probe.worst * 1000,
                "pings": probe.count,
                "rss_before_mb": before,
                "rss_growth_mb": after - before,
                "peak_growth_mb": peak - before,
            }
        )
    return out


def million_markdown(rows: list[dict[str, Any]], channels: int) -> str:
    lines = [
        f"| {channels:,} distinct channels PUBLISHed | s | worst PING wait ms | "
        "RSS before MB | RSS added MB | peak added MB |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['server']} | {r['seconds']:.1f} | {r['worst_ping_ms']:.1f} | "
            f"{r['rss_before_mb']:.1f} | {r['rss_growth_mb']:.1f} | {r['peak_growth_mb']:.1f} |"
        )
    return "\n".join(lines)


def cpu(requests: dict[int, int], rounds: int) -> list[dict[str, Any]]:
    """Server CPU per PUBLISH, summary on and off, alternated (module doc)."""
    from bench.cpu_cost import one_case

    settings = {"on": ["--no-bus"], "off": ["--no-bus", "--hot-channels-size", "0"]}
    rows = []
    for pipeline in sorted(requests):
        for subs in (0, 1):
            us: dict[str, list[float]] = {"on": [], "off": []}
            for _ in range(rounds):
                for name, args in settings.items():
                    server = start_node(args)
                    try:
                        time.sleep(0.5)
                        us[name].append(one_case(server, pipeline, subs, requests[pipeline]))
                    finally:
                        server.stop()
            print(f"  -P {pipeline}, {subs} subscribers: {us}", flush=True)
            rows.append({"pipeline": pipeline, "subscribers": subs, **us})
    return rows


def cpu_markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| -P | subscribers | on us/PUBLISH (runs) | off us/PUBLISH (runs) | on / off |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        on, off = r["on"], r["off"]
        lines.append(
            f"| {r['pipeline']} | {r['subscribers']} | {' / '.join(f'{x:.2f}' for x in on)} | "
            f"{' / '.join(f'{x:.2f}' for x in off)} | {sum(on) / sum(off):.2f}x |"
        )
    return "\n".join(lines)


# -- the cluster-wide command ------------------------------------------------------------


def peer_bound(k: int, name_bytes: int) -> int:
    """The bytes one call moves per peer, at most, for one half-life: the
    STATS_REQUEST frame (header and id 18, the query 12) and the STATS_REPLY
    frame (18, the part's head 1 + 13 + 8, and K rows of 68 bytes + the name:
    router.commands.hot.serve), the rows never more than its 64 KiB budget."""
    from cluster_bus.stats_query import FRAME_BYTES
    from router.commands.hot import REPLY_BUDGET, Query, encode_query

    request = FRAME_BYTES + len(encode_query(Query()))
    return request + FRAME_BYTES + 1 + 13 + 8 + min(REPLY_BUDGET, k * (68 + name_bytes))


def _bytes_sent(cluster: Any) -> int:
    return sum(
        int(cluster.cluster_info(i)["cluster_stats_stats_bytes_sent"]) for i in range(cluster.size)
    )


def _request(s: socket.socket, payload: bytes) -> tuple[Any, float]:
    """One command: its whole reply (hiredis reads it) and the seconds it took."""
    import hiredis

    reader = hiredis.Reader()
    start = time.perf_counter()
    s.sendall(payload)
    reply: Any = False
    while reply is False:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the node closed the connection")
        reader.feed(chunk)
        reply = reader.gets()
    return reply, time.perf_counter() - start


def cluster_calls(nodes: int, calls: int, names: int) -> dict[str, Any]:
    from bloomcast.testing.local_cluster import LocalCluster

    with LocalCluster(nodes) as cluster:
        print(f"  {nodes} nodes up; publishing ...", flush=True)
        for i in range(nodes):
            # name j published (j % 7) + 1 times at node i, the top differs per node
            reqs = [
                bulk(b"PUBLISH", b"ch:%d" % ((j * (i + 1)) % names), b"m")
                for j in range(names)
                for _ in range((j % 7) + 1)
            ]
            s = connect(cluster.ports[i])
            s.sendall(b"".join(reqs))
            want = 4 * len(reqs)
            got = 0
            while got < want:
                got += len(s.recv(1 << 20))
            s.close()
        s = connect(cluster.ports[0])
        cmd = bulk(b"BLOOMCAST.HOTCHANNELS", b"COUNT", b"10", b"CLUSTER")
        s.settimeout(10.0)
        _request(s, cmd)  # (warm: the first call's imports)
        before = _bytes_sent(cluster)
        waits = []
        reply: Any = None
        for _ in range(calls):
            reply, seconds = _request(s, cmd)
            waits.append(seconds)
        moved = _bytes_sent(cluster) - before
        s.close()
        unanswered = sum(
            int(cluster.cluster_info(i)["cluster_stats_stats_unanswered"]) for i in range(nodes)
        )
    waits.sort()
    peers = nodes - 1
    return {
        "nodes": nodes,
        "calls": calls,
        "names": names,
        "p50_ms": statistics.median(waits) * 1000,
        "p99_ms": waits[min(len(waits) - 1, int(0.99 * len(waits)))] * 1000,
        "worst_ms": waits[-1] * 1000,
        "bytes_per_call": moved / calls,
        "bytes_per_peer": moved / calls / peers,
        "bound_per_peer": peer_bound(128, len(b"ch:%d" % names)),
        "unanswered": unanswered,
        "entries": len(reply) if isinstance(reply, list) else repr(reply),
    }


def cluster_markdown(r: dict[str, Any]) -> str:
    return (
        "| N | calls | p50 ms | p99 ms | worst ms | bytes per call | per peer | "
        "bound per peer (K = 128) | unanswered |\n|---|---|---|---|---|---|---|---|---|\n"
        f"| {r['nodes']} | {r['calls']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
        f"{r['worst_ms']:.1f} | {r['bytes_per_call']:,.0f} | {r['bytes_per_peer']:,.0f} | "
        f"{r['bound_per_peer']:,} | {r['unanswered']} |"
    )


def main(argv: list[str] | None = None) -> int:
    import json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--million", action="store_true", help="distinct channels at one node")
    ap.add_argument("--channels", type=int, default=1_000_000)
    ap.add_argument("--cluster", type=int, default=0, metavar="N", help="the command at N nodes")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--names", type=int, default=1000, help="distinct channels per node")
    ap.add_argument("--cpu", action="store_true", help="server CPU per PUBLISH, on and off")
    ap.add_argument("--requests-p1", type=int, default=30_000)
    ap.add_argument("--requests-p16", type=int, default=150_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    if not (args.million or args.cluster or args.cpu):
        ap.error("say --million, --cluster N or --cpu")
    if args.cpu:
        rows = cpu({1: args.requests_p1, 16: args.requests_p16}, args.rounds)
        print(cpu_markdown(rows))
    if args.million:
        rows = million(args.channels)
        print(json.dumps(rows, indent=1))
        print(million_markdown(rows, args.channels))
    if args.cluster:
        r = cluster_calls(args.cluster, args.calls, args.names)
        print(json.dumps(r, indent=1))
        print(cluster_markdown(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
