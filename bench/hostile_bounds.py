"""Hostile clients, peers and disks against the node's bounds (issue 41),
bloomcast beside redis-server 7.0.15 where Redis has the same case; part of
``bloomcast bench hostile`` (its second table), or alone:
``python -m bench.hostile_bounds [--quick] [--only TEXT]`` prints the JSON and
the table.

Cases (each on fresh servers; a probe process PINGs every 10 ms on another
connection, :class:`bench.probe.LatencyProbe`):

- pause: two nodes (a Redis Cluster of two masters); on node A a subscriber
  that reads nothing (4 KiB receive buffer) sends PING after ``CLIENT PAUSE
  60000 ALL``, 256 MB are published on node B in 64 KiB messages. The probe
  PINGs node B (node A postpones every PING, Redis too). Node A's RSS, and
  whether the subscriber was cut at ``client-output-buffer-limit pubsub``'s
  32 MB (its socket closed).
- peer stops reading: two nodes (two masters), node timeout 2 s, a subscriber
  on node B; node B is SIGSTOPped and node A gets 60 MB in 1 KiB messages over
  ~12 s; the probe PINGs node A. Node A's RSS; after SIGCONT, what the
  subscriber got, and bloomcast's count of forwards lost.
- one million pipelined SUBSCRIBE without reading: one server, the client
  sends ``SUBSCRIBE ch:<i>`` a million times and reads nothing; the probe PINGs
  it. Whether the client was cut (its ~45 MB of confirmations pass the pubsub
  hard limit), the channels left once it is gone, RSS.
- slow disk under the tap (bloomcast only: Redis has no traffic tap): a node
  whose every file call takes 0.2 s (:mod:`bloomcast.testing.slow_disk`) with
  ``--traffic-dir`` and ``--cluster-config-file``, 2,000 PUBLISH a second for
  10 s to a subscriber; the probe PINGs it. INFO's traffic counters: every
  event written or counted as dropped.
- idle connections to the metrics port (bloomcast only: Redis has no HTTP
  port; issue 49): 1,000 TCP connections that send nothing, each reopened
  as soon as the node closes it, for 12 s, while ``/healthz`` is asked every
  100 ms on a new connection; the probe PINGs the client port. How many
  ``/healthz`` answered 200, the slowest, and the node's count of idle
  connections it closed to make room (``bloomcast_http_refused_total``).
- spool downloads that stop reading (bloomcast only; issue 49): a node with a
  tap gets 60,000 PUBLISH, then 64 clients ask for its first completed spool
  file and read nothing, for 15 s (past the 10 s drain timeout), while
  ``/healthz`` is asked every 100 ms. How many ``/healthz`` answered 200,
  and the node's counts of downloads cut by the drain timeout and requests
  refused as busy.

- a bus flood (:mod:`bench.hostile_bus`): three nodes under ``ulimit -n``
  256, 400 bare connections held on node 0's bus port for 5 s; the probe
  PINGs node 0. Then a new client's PING, ``cluster_state`` on every node,
  the connections closed at once and the count of them.

Speed is reported, never asserted (tests/integration/test_slow_disk.py,
tests/differential/test_paused_subscriber.py and tests/router assert the
behaviour).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench.hostile_bus import bus_flood
from bench.hostile_bus import outcome as flood_outcome
from bench.probe import LatencyProbe, bulk, connect, rss_mb
from bench.redis_cluster import RedisCluster
from bench.results import fmt_num, table
from bench.servers import NODE, start_node
from bloomcast.testing import (
    REDIS,
    LocalCluster,
    free_ports,
    redis_server_path,
    start_anchor,
    stop_process,
    wait_port,
)
from bloomcast.testing.slow_disk import command as slow_node

ROOT = Path(__file__).resolve().parent.parent


def _server_closed(s: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the server closed its end of client socket ``s`` within
    ``timeout``: no established socket of the server's port to ``s``'s any
    more (``ss``; without reading ``s``, whose tiny window could take minutes
    to drain what the kernels hold)."""
    local, peer = s.getsockname()[1], s.getpeername()[1]
    query = f"( sport = :{peer} and dport = :{local} )"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["ss", "-Htn", "state", "established", query], capture_output=True, text=True
        ).stdout
        if not out.strip():
            return True
        time.sleep(0.2)
    return False


def _pair(name: str) -> Any:
    """Two nodes of ``name``: a LocalCluster or a Redis Cluster of two masters."""
    if name == NODE:
        return LocalCluster(2, extra_args=["--node-timeout-ms", "2000"])
    return RedisCluster(2, binary=redis_server_path(), node_timeout_ms=2000)


def _pids(pair: Any) -> list[int]:
    if isinstance(pair, LocalCluster):
        return [p.pid for p in pair.processes]  # type: ignore[union-attr]
    return [n.proc.pid for n in pair.nodes]


# ---------------------------------------------------------------- pause


def _pause(name: str, scale: float) -> dict[str, Any]:
    size, total = 64 * 1024, int(256 * 1024 * 1024 * scale)
    with _pair(name) as pair:
        a, b = pair.ports
        pid = _pids(pair)[0]
        idle, _ = rss_mb(pid)
        sub = connect(a)
        sub.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sub.sendall(bulk(b"SUBSCRIBE", b"ch"))
        ctl, pub = connect(a), connect(b)
        time.sleep(0.5)  # bloomcast: the filter reaches node B
        ctl.sendall(b"CLIENT PAUSE 60000 ALL\r\n")
        ctl.recv(64)
        sub.sendall(b"PING\r\n")
        n = total // size
        with LatencyProbe(b) as probe:
            start = time.perf_counter()
            reader = threading.Thread(target=_replies, args=(pub, n))
            reader.start()
            message = b"x" * size
            for _ in range(n):
                pub.sendall(bulk(b"PUBLISH", b"ch", message))
            reader.join()
            seconds = time.perf_counter() - start
            time.sleep(1.0)
        after, peak = rss_mb(pid)
        cut = _server_closed(sub)
        for s in (sub, ctl, pub):
            s.close()
    return {"seconds": seconds, "worst_ping": probe.worst, "rss_idle_mb": idle,
            "rss_mb": after, "peak_mb": peak, "published_mb": total / 2**20,
            "cut": cut}  # fmt: skip


def _replies(s: socket.socket, n: int) -> None:
    got = 0
    while got < n:
        chunk = s.recv(1 << 16)
        if not chunk:
            return
        got += chunk.count(b"\r\n")


# ---------------------------------------------------------------- a peer stops reading


def _stopped_peer(name: str, scale: float) -> dict[str, Any]:
    seconds_of_traffic, rate, size = 12 * max(scale, 0.1), 5000, 1024
    with _pair(name) as pair:
        a, b = pair.ports
        pid_a, pid_b = _pids(pair)
        idle, _ = rss_mb(pid_a)
        sub = redis.Redis(port=b)
        ps = sub.pubsub()
        ps.subscribe("feed")
        time.sleep(0.5)
        pub = redis.Redis(port=a)
        os.kill(pid_b, signal.SIGSTOP)
        sent = 0
        try:
            with LatencyProbe(a) as probe:
                start = time.monotonic()
                while time.monotonic() - start < seconds_of_traffic:
                    with pub.pipeline(transaction=False) as pipe:
                        for _ in range(rate // 100):
                            pipe.publish("feed", b"x" * size)
                        pipe.execute()
                    sent += rate // 100
                    time.sleep(max(0.0, start + sent / rate - time.monotonic()))
            after, peak = rss_mb(pid_a)
            replay = None
            if name == NODE:  # what the replay buffer holds for the stopped peer
                replay = int(pub.info("everything").get("cluster_replay_buffer_bytes", 0))
        finally:
            os.kill(pid_b, signal.SIGCONT)
        got, deadline = 0, time.monotonic() + 20
        while time.monotonic() < deadline:
            m = ps.get_message(timeout=1.0)
            if m is None:
                if got:
                    break
                continue
            got += m["type"] == "message"
        lost = None
        if name == NODE:
            info = pub.info("everything")
            lost = int(info.get("cluster_stats_publish_lost_to_peers", 0))
        ps.close()
        sub.close()
        pub.close()
    return {"worst_ping": probe.worst, "rss_idle_mb": idle, "rss_mb": after, "peak_mb": peak,
            "sent": sent, "delivered": got, "counted_lost": lost,
            "replay_mb": replay / 2**20 if replay is not None else None}  # fmt: skip


# ---------------------------------------------------------------- 1,000,000 SUBSCRIBE, no reading


def _subscribe_flood(name: str, scale: float) -> dict[str, Any]:
    n = max(1000, int(1_000_000 * scale))
    server = start_node(["--no-bus"]) if name == NODE else start_anchor(name)
    with server:
        idle, _ = rss_mb(server.pid)
        # (no small SO_RCVBUF: on loopback a 4 KiB receive buffer drops the
        # server's segments and stalls the client's own sending, with Redis)
        s = connect(server.port)
        host, local_port = s.getsockname()[:2]
        addr = f"{host}:{local_port}"
        payload = b"".join(b"SUBSCRIBE ch:%d\r\n" % i for i in range(n))
        r = redis.Redis(port=server.port)
        with LatencyProbe(server.port) as probe:
            start = time.perf_counter()
            sender = threading.Thread(target=_send_ignoring_reset, args=(s, payload))
            sender.start()
            cut, subscribed = _watch(r, addr, n)
            seconds = time.perf_counter() - start
        after, peak = rss_mb(server.pid)
        s.close()
        sender.join(60)
        deadline = time.monotonic() + 60
        while (channels := r.info("stats")["pubsub_channels"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        r.close()
    return {"seconds": seconds, "worst_ping": probe.worst, "rss_idle_mb": idle,
            "rss_mb": after, "peak_mb": peak, "cut": cut, "subscribed": subscribed,
            "channels_left": channels}  # fmt: skip


def _send_ignoring_reset(s: socket.socket, payload: bytes) -> None:
    with contextlib.suppress(OSError):  # a server that cut the client resets the rest
        s.sendall(payload)


def _watch(r: redis.Redis, addr: str, n: int, timeout: float = 600) -> tuple[bool, int]:
    """Until the client at ``addr`` is gone (cut: True) or holds ``n``
    subscriptions (CLIENT LIST's ``sub=``), without reading its replies."""
    deadline, subscribed = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        listed = r.execute_command("CLIENT", "LIST", "TYPE", "pubsub")
        text = listed.decode() if isinstance(listed, bytes) else str(listed)
        line = next((x for x in text.splitlines() if f" addr={addr} " in x), None)
        if line is None and subscribed:
            return True, subscribed
        if line is not None:
            subscribed = int(line.split(" sub=")[1].split(" ")[0])
            if subscribed >= n:
                return False, subscribed
        time.sleep(0.2)
    return False, subscribed


# ---------------------------------------------------------------- a slow disk under the tap


def _slow_disk(name: str, scale: float) -> dict[str, Any]:
    rate, seconds_of_traffic = 2000, 10 * max(scale, 0.2)
    port, bus, metrics = free_ports(3)
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--port", str(port), "--cluster-port", str(bus), "--metrics-port", str(metrics),
                "--traffic-dir", f"{tmp}/spool",
                "--cluster-config-file", f"{tmp}/nodes.conf"]  # fmt: skip
        proc = subprocess.Popen(slow_node(0.2, args), cwd=ROOT, stdout=subprocess.DEVNULL)
        try:
            wait_port(port, proc, 60, ping=True)
            idle, _ = rss_mb(proc.pid)
            r = redis.Redis(port=port)
            ps = r.pubsub()
            ps.subscribe("feed")
            sent = 0
            with LatencyProbe(port) as probe:
                start = time.monotonic()
                while time.monotonic() - start < seconds_of_traffic:
                    with r.pipeline(transaction=False) as pipe:
                        for _ in range(rate // 100):
                            pipe.publish("feed", b"x" * 100)
                        pipe.execute()
                    sent += rate // 100
                    ps.get_message(timeout=0)
                    time.sleep(max(0.0, start + sent / rate - time.monotonic()))
            after, peak = rss_mb(proc.pid)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                info = r.info("everything")
                if info["traffic_events_written"] + info["traffic_events_dropped"] >= sent:
                    break
                time.sleep(0.2)
            ps.close()
            r.close()
        finally:
            stop_process(proc, timeout=60)
    return {"worst_ping": probe.worst, "rss_idle_mb": idle, "rss_mb": after, "peak_mb": peak,
            "sent": sent, "written": info["traffic_events_written"],
            "dropped": info["traffic_events_dropped"],
            "disk_errors": info["traffic_disk_errors"]}  # fmt: skip


# ---------------------------------------------------------------- idle HTTP connections


def _healthz(metrics: int) -> tuple[int, float]:
    """(status, seconds) of one ``GET /healthz`` on a new connection (0: none)."""
    import http.client

    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", metrics, timeout=10)
    try:
        conn.request("GET", "/healthz")
        status = conn.getresponse().status
    except OSError:
        status = 0
    finally:
        conn.close()
    return status, time.monotonic() - start


def _renew(metrics: int, socks: list[socket.socket]) -> int:
    """Reopen every idle connection the node closed; returns how many."""
    renewed = 0
    for i, s in enumerate(socks):
        try:
            closed = s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
        except BlockingIOError:
            closed = False
        except OSError:
            closed = True
        if closed:
            s.close()
            socks[i] = socket.create_connection(("127.0.0.1", metrics), 5)
            renewed += 1
    return renewed


def _idle_http(name: str, scale: float) -> dict[str, Any]:
    idle_count, seconds = max(100, int(1000 * scale)), 12 * max(scale, 0.25)
    port, metrics = free_ports(2)
    args = ["--port", str(port), "--no-bus", "--metrics-port", str(metrics)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "bloomcast.cli", "node", *args], cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    socks: list[socket.socket] = []
    try:
        wait_port(port, proc, 60, ping=True)
        wait_port(metrics, proc, 60)
        idle, _ = rss_mb(proc.pid)
        socks = [socket.create_connection(("127.0.0.1", metrics), 5) for _ in range(idle_count)]
        answers: list[tuple[int, float]] = []
        renewed = 0
        with LatencyProbe(port) as probe:
            start = time.monotonic()
            while time.monotonic() - start < seconds:
                answers.append(_healthz(metrics))
                renewed += _renew(metrics, socks)
                time.sleep(0.1)
        after, peak = rss_mb(proc.pid)
        import urllib.request

        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read()
        closed = 0.0
        for line in text.decode().splitlines():
            if line.startswith('bloomcast_http_refused_total{reason="idle_closed"}'):
                closed = float(line.split()[-1])
    finally:
        for s in socks:
            s.close()
        stop_process(proc, timeout=30)
    return {"worst_ping": probe.worst, "rss_idle_mb": idle, "rss_mb": after, "peak_mb": peak,
            "healthz_total": len(answers), "healthz_ok": sum(a[0] == 200 for a in answers),
            "healthz_worst_ms": max(a[1] for a in answers) * 1000, "idle": idle_count,
            "renewed": renewed, "idle_closed": int(closed)}  # fmt: skip


def _refused(metrics: int) -> dict[str, int]:
    """``bloomcast_http_refused_total`` by reason, scraped."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read()
    out = {}
    for line in text.decode().splitlines():
        if line.startswith('bloomcast_http_refused_total{reason="'):
            out[line.split('"')[1]] = int(float(line.split()[-1]))
    return out


def _stalled_downloads(name: str, scale: float) -> dict[str, Any]:
    downloads, seconds = 64, 15.0  # past the 10 s drain timeout, whatever the scale
    port, metrics = free_ports(2)
    socks: list[socket.socket] = []
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--port", str(port), "--no-bus", "--metrics-port", str(metrics),
                "--traffic-dir", f"{tmp}/spool"]  # fmt: skip
        proc = subprocess.Popen(
            [sys.executable, "-m", "bloomcast.cli", "node", *args], cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_port(port, proc, 60, ping=True)
            wait_port(metrics, proc, 60)
            with redis.Redis(port=port) as r:
                for _ in range(60):
                    with r.pipeline(transaction=False) as pipe:
                        for _ in range(1000):
                            pipe.publish("feed", b"x" * 100)
                        pipe.execute()
            import urllib.request

            deadline = time.monotonic() + 60
            files: list[list[Any]] = []
            while not files and time.monotonic() < deadline:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/spool") as reply:
                    files = json.load(reply)["files"]
                time.sleep(0.2)
            file_name, size = files[0][0], files[0][1]
            idle, _ = rss_mb(proc.pid)
            for _ in range(downloads):
                s = socket.create_connection(("127.0.0.1", metrics), 5)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.sendall(f"GET /spool/files/{file_name} HTTP/1.0\r\n\r\n".encode())
                socks.append(s)
            answers: list[tuple[int, float]] = []
            with LatencyProbe(port) as probe:
                start = time.monotonic()
                while time.monotonic() - start < seconds:
                    answers.append(_healthz(metrics))
                    time.sleep(0.1)
            after, peak = rss_mb(proc.pid)
            refused = _refused(metrics)
        finally:
            for s in socks:
                s.close()
            stop_process(proc, timeout=30)
    return {"worst_ping": probe.worst, "rss_idle_mb": idle, "rss_mb": after, "peak_mb": peak,
            "healthz_total": len(answers), "healthz_ok": sum(a[0] == 200 for a in answers),
            "healthz_worst_ms": max(a[1] for a in answers) * 1000, "file_bytes": size,
            "stalled": downloads, "cut": refused.get("timeout", 0),
            "busy": refused.get("busy", 0)}  # fmt: skip


CASES: list[tuple[str, Callable[[str, float], dict[str, Any]], bool]] = [
    # (label, run, has a Redis counterpart)
    ("CLIENT PAUSE ALL, a subscriber that reads nothing, 256 MB published on the other node",
     _pause, True),
    ("a peer stops reading its bus link (SIGSTOP), 5,000 PUBLISH/s of 1 KiB for 12 s",
     _stopped_peer, True),
    ("1,000,000 pipelined SUBSCRIBE, the client reads nothing", _subscribe_flood, True),
    ("a slow disk (0.2 s per file call) under the tap and the nodes file, 2,000 PUBLISH/s",
     _slow_disk, False),
    ("1,000 idle connections to the metrics port, renewed as closed; /healthz every 100 ms",
     _idle_http, False),
    ("64 spool downloads that stop reading; /healthz every 100 ms", _stalled_downloads, False),
    ("400 bare connections held on a bus port, 3 nodes under ulimit -n 256", bus_flood, True),
]  # fmt: skip


def run_bounds(quick: bool = False, only: str = "") -> dict[str, Any]:
    """Every case, bloomcast then redis-server (when installed and the case has one)."""
    scale = 0.05 if quick else 1.0
    out: dict[str, dict[str, Any]] = {}
    for label, run, has_redis in CASES:
        if only and only not in label:
            continue
        servers = [NODE] + ([REDIS] if has_redis and redis_server_path() is not None else [])
        out[label] = {}
        for name in servers:
            print(f"  {name}: {label} ...", flush=True)
            out[label][name] = run(name, scale)
    return {"scale": scale, "cases": out}


def _cell(figures: dict[str, Any] | None, key: str, scale: float = 1, digits: int = 0) -> str:
    if not figures or figures.get(key) is None:
        return "-"
    value = figures[key]
    if isinstance(value, bool):
        return "yes" if value else "no"
    return fmt_num(value * scale, digits)


def _rss(figures: dict[str, Any] | None) -> str:
    return " / ".join(_cell(figures, key) for key in ("rss_idle_mb", "rss_mb", "peak_mb"))


def _outcome(figures: dict[str, Any] | None) -> str:
    if not figures:
        return "-"
    if "stalled" in figures:
        return (
            f"/healthz {figures['healthz_ok']} of {figures['healthz_total']} answered 200 "
            f"(slowest {figures['healthz_worst_ms']:.0f} ms); {figures['cut']} of "
            f"{figures['stalled']} stalled downloads ({figures['file_bytes'] / 1e6:.1f} MB) cut "
            f"by the drain timeout, {figures['busy']} refused as busy"
        )
    if "subscribed" in figures:
        state = "cut" if figures["cut"] else "not cut"
        return (
            f"{state} after {figures['subscribed']:,} subscriptions, "
            f"{figures['channels_left']:,} channels left once gone"
        )
    if "flood" in figures:
        return flood_outcome(figures)
    if "cut" in figures:
        return "cut" if figures["cut"] else "not cut"
    if "healthz_total" in figures:
        return (
            f"/healthz {figures['healthz_ok']} of {figures['healthz_total']} answered 200 "
            f"(slowest {figures['healthz_worst_ms']:.0f} ms); {figures['idle_closed']:,} idle "
            f"connections closed to make room, {figures['renewed']:,} reopened"
        )
    if "written" in figures:
        return (
            f"{figures['written']:,} written + {figures['dropped']:,} dropped (counted) "
            f"of {figures['sent']:,}; {figures['disk_errors']} disk errors"
        )
    lost = figures.get("counted_lost")
    counted = f"; {lost:,} counted lost" if lost is not None else "; nothing counted"
    replay = figures.get("replay_mb")
    held = f"; replay buffer {replay:.0f} MB while stopped" if replay is not None else ""
    return f"{figures['delivered']:,} of {figures['sent']:,} delivered{counted}{held}"


def bounds_markdown(result: dict[str, Any]) -> str:
    rows = []
    for label, by_server in result["cases"].items():
        node, anchor = by_server.get(NODE), by_server.get(REDIS)
        rows.append(
            [
                label,
                _cell(node, "worst_ping", 1000, 1),
                _cell(anchor, "worst_ping", 1000, 1),
                _rss(node),
                _rss(anchor),
                _outcome(node),
                _outcome(anchor),
            ]
        )
    header = ["case", "bloomcast worst wait ms", "redis-server worst wait ms",
              "bloomcast RSS MB idle / after / peak", "redis-server RSS MB idle / after / peak",
              "bloomcast outcome", "redis-server outcome"]  # fmt: skip
    scale = result.get("scale", 1.0)
    sized = "" if scale == 1.0 else f" (sizes scaled by {scale}: --quick)"
    return (
        "Bounds under hostile clients, peers and disks (issue 41; `bench/hostile_bounds.py`"
        + sized
        + "): bloomcast nodes beside redis-server 7.0.15 (a Redis Cluster of two masters "
        "for the two-node cases), fresh servers per case, a probe PINGing every 10 ms "
        "(the publishing node in the pause case: node A postpones every PING, Redis too). "
        "RSS of the node under attack (`/proc/<pid>/status`).\n\n" + table(header, rows)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="")
    args = parser.parse_args(argv)
    result = run_bounds(args.quick, args.only)
    print(json.dumps(result, indent=1))
    print(bounds_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
