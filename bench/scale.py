"""``bloomcast bench scale``: what an idle cluster costs per node as N grows,
bloomcast next to a real Redis 7.0 Cluster, same node timeout, same machine.

The measurement the issue "Membership and heartbeats that scale" asks for
before any redesign of cluster_bus/. For each N, one system at a time
(bloomcast first, then Redis, so both see the same machine load):

1. ready time: from the first process start until every node reports the
   whole cluster (bloomcast: ``cluster_known_nodes == N`` and
   ``cluster_filters_converged:1``; Redis: ``cluster_state:ok`` and
   ``cluster_known_nodes == N``);
2. settle, then an idle window with no client traffic and no polling: bus
   bytes (kernel ``tcp_info`` bytes_sent summed over every socket on a bus
   port, both ends), CPU (time on CPU of every thread of every server process,
   ``/proc/<pid>/task/<tid>/schedstat``, ns) and RSS (``/proc/<pid>/status``), all per node;
3. sockets per node: the socket file descriptors of each server process in
   the idle window (bus links both ways and the listeners);
4. PUBLISH routing: one subscriber on each of ``subscriber_nodes`` nodes, each
   on its own channel; node 0 publishes ``publish_messages`` over those
   channels: every message must arrive once, and the bus PUBLISH messages
   per PUBLISH (``cluster_stats_messages_publish_sent`` summed over the nodes)
   are compared with the exact minimum (one per PUBLISH: one remote node has
   a subscriber; Redis Cluster broadcasts to all N - 1); then node 0's
   PUBLISH rate to one of them (redis-benchmark, 50 clients);
5. SUBSCRIBE on node 0: on one connection, ``subscribe_probes`` SUBSCRIBE +
   UNSUBSCRIBE of fresh channels, each reply awaited; the SUBSCRIBE reply
   latency p50/p99/max (what a client waits for while the cluster is N);
6. failure detection: kill -9 one node and time until every live node's
   CLUSTER NODES flags it ``fail``.

For bloomcast, *start-up work*: each node's frames sent by type at ready
(CLUSTER INFO), mean and max over the nodes: where forming a cluster of N
goes (issue 40).

The markdown section and the plot are in :mod:`bench.scale_report`.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from bench.procs import tcp_bytes_sent
from bench.redis_cluster import RedisCluster
from bloomcast.testing import LOOPBACK, LocalCluster, server_version


@dataclass
class ScalePlan:
    """Sizes and windows; ``quick()`` is the CI-sized variant."""

    sizes: tuple[int, ...] = (10, 50, 100, 200)
    node_timeout_ms: int = 15000
    settle_s: float = 5.0
    window_s: float = 20.0
    ready_timeout_s: float = 600.0
    detect_timeout_s: float = 180.0
    #: how often detection polls every live node's CLUSTER NODES
    poll_s: float = 0.25
    #: PUBLISH routing: nodes with a subscriber, messages node 0 publishes,
    #: requests of the rate measurement
    subscriber_nodes: int = 10
    publish_messages: int = 2000
    rate_requests: int = 20000
    rate_runs: int = 3  # the best kept
    #: SUBSCRIBE + UNSUBSCRIBE round trips of fresh channels on node 0
    subscribe_probes: int = 200

    @classmethod
    def quick(cls) -> ScalePlan:
        return cls(sizes=(3,), node_timeout_ms=2000, settle_s=0.5, window_s=2.0,
                   ready_timeout_s=60.0, detect_timeout_s=30.0, poll_s=0.1,
                   subscriber_nodes=2, publish_messages=200, rate_requests=2000,
                   rate_runs=1, subscribe_probes=50)  # fmt: skip


# -- /proc readings ----------------------------------------------------------------------


def descendants(pids: list[int]) -> list[int]:
    """``pids`` and every process below them (a server may fork helpers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = list(pids)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def cpu_ns(pids: list[int]) -> int:
    """Nanoseconds on CPU summed over every thread of ``pids`` (the first field
    of ``/proc/<pid>/task/<tid>/schedstat``); gone processes count 0. utime +
    stime would do, but they count in clock ticks (10 ms): an idle node uses
    about 2 of them in a 20 s window, too coarse to compare."""
    total = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total


def sockets(pid: int) -> int:
    """Socket file descriptors of ``pid`` (``/proc/<pid>/fd`` links to
    ``socket:[...]``); 0 if it is gone."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    count = 0
    for fd in fds:
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return count


def rss_mb(pid: int) -> float:
    """VmRSS of ``pid`` in MB (10^6 bytes); 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return 0.0


# -- the two systems behind one face -----------------------------------------------------


class _System:
    name = ""
    n = 0
    answering_s: float | None = None  # every process answers PING (start-up)
    ports: list[int]
    bus_ports: list[int]

    def pids(self) -> list[int]:
        raise NotImplementedError

    def suspicions(self) -> int | None:
        """Suspicions raised so far, summed over the nodes (None: not exposed)."""
        return None

    def cluster_info(self, i: int) -> dict[str, str]:
        raise NotImplementedError

    def kill(self, i: int) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


def base_port_below_ephemeral(n: int, low: int = 10000, high: int = 22000) -> int:
    """A base port with base..base+n-1 and base+10000.. (LocalCluster's rule) all
    free now and below the ephemeral range (32768+). Free ports picked by the
    kernel come from that range, and at N = 50 the links of the nodes already
    up can take the port of a node that has not started yet (it then exits
    with "address in use")."""
    for _ in range(100):
        base = random.randrange(low, high - n)
        ports = [base + i for i in range(n)] + [base + 10000 + i for i in range(n)]
        if all(_bindable(p) for p in ports):
            return base
    raise RuntimeError(f"no free range of {n} ports below {high}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


class _Bloomcast(_System):
    name = "bloomcast"

    def __init__(self, n: int, plan: ScalePlan) -> None:
        self.n = n
        self.logs = Path(tempfile.mkdtemp(prefix="bench-scale-"))
        self.cluster = LocalCluster(
            n,
            base_port=base_port_below_ephemeral(n),
            extra_args=["--node-timeout-ms", str(plan.node_timeout_ms)],
            log_dir=self.logs,
        )
        self.ports, self.bus_ports = self.cluster.ports, self.cluster.bus_ports
        self.timeout = plan.ready_timeout_s

    def start(self) -> float:
        t0 = time.monotonic()
        try:
            for i in range(self.n):
                self.cluster.start_node(i)
            self.answering_s = self._all_answering(t0)
            self.cluster.wait_ready(timeout=self.timeout)
        except RuntimeError as exc:  # a node exited: say why
            tails = [log.read_text()[-300:] for log in sorted(self.logs.glob("node-*.log"))]
            raise RuntimeError(f"{exc}; " + " | ".join(t for t in tails if t.strip())) from exc
        return time.monotonic() - t0

    def _all_answering(self, t0: float) -> float:
        """Seconds until every node process answers PING (its Python start-up:
        the part of *ready* that is not membership)."""
        pending = set(range(self.n))
        deadline = t0 + self.timeout
        while pending and time.monotonic() < deadline:
            for i in list(pending):
                try:
                    with self.cluster.client(i, socket_timeout=1) as c:
                        c.ping()
                    pending.discard(i)
                except (redis.RedisError, OSError):
                    pass
            time.sleep(0.05)
        return time.monotonic() - t0

    def pids(self) -> list[int]:
        return [p.pid for p in self.cluster.processes if p is not None]

    def cluster_info(self, i: int) -> dict[str, str]:
        return self.cluster.cluster_info(i)

    def suspicions(self) -> int | None:
        return sum(
            int(self.cluster.cluster_info(i).get("cluster_stats_suspicions", 0))
            for i in range(self.n)
        )

    def kill(self, i: int) -> None:
        self.cluster.kill(i)

    def stop(self) -> None:
        self.cluster.stop()
        shutil.rmtree(self.logs, ignore_errors=True)


class _ReadyRedisCluster(RedisCluster):
    """:class:`RedisCluster` that notes when every node first reports
    ``cluster_state:ok`` and N known nodes (then waits for full links as usual)."""

    ready_at: float | None = None

    def wait_ok(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while self.ready_at is None:
            infos = [self.cluster_info(i) for i in range(self.n)]
            if all(
                info.get("cluster_state") == "ok"
                and int(info.get("cluster_known_nodes", 0)) == self.n
                for info in infos
            ):
                self.ready_at = time.monotonic()
            elif time.monotonic() > deadline:
                raise TimeoutError(f"Redis cluster not ok after {self.start_timeout} s")
            else:
                time.sleep(0.2)
        super().wait_ok()


class _Redis(_System):
    name = "redis"

    def __init__(self, n: int, plan: ScalePlan, binary: str) -> None:
        self.n = n
        self.cluster = _ReadyRedisCluster(
            n, binary=binary, node_timeout_ms=plan.node_timeout_ms,
            start_timeout=plan.ready_timeout_s,
        )  # fmt: skip

    def start(self) -> float:
        t0 = time.monotonic()
        self.cluster.start()
        self.ports, self.bus_ports = self.cluster.ports, self.cluster.bus_ports
        assert self.cluster.ready_at is not None
        return self.cluster.ready_at - t0

    def pids(self) -> list[int]:
        return [node.proc.pid for node in self.cluster.nodes]

    def cluster_info(self, i: int) -> dict[str, str]:
        return self.cluster.cluster_info(i)

    def kill(self, i: int) -> None:
        proc = self.cluster.nodes[i].proc
        proc.kill()
        proc.wait(10)

    def stop(self) -> None:
        self.cluster.stop()


# -- measuring ---------------------------------------------------------------------------


def idle_window(system: _System, plan: ScalePlan) -> dict[str, Any]:
    """Bus bytes/s, CPU % and RSS per node over ``plan.window_s`` of silence."""
    time.sleep(plan.settle_s)
    pids = descendants(system.pids())
    suspicions0 = system.suspicions()  # read outside the window: client traffic only
    bytes0, cpu0, t0 = tcp_bytes_sent(system.bus_ports), cpu_ns(pids), time.monotonic()
    time.sleep(plan.window_s)
    bytes1, cpu1, t1 = tcp_bytes_sent(system.bus_ports), cpu_ns(pids), time.monotonic()
    suspicions1 = system.suspicions()
    seconds, n = t1 - t0, system.n
    rss = [rss_mb(pid) for pid in system.pids()]
    return {
        "window_s": round(seconds, 3),
        "bus_bytes_per_s_per_node": (bytes1 - bytes0) / seconds / n,
        "cpu_pct_per_node": 100.0 * (cpu1 - cpu0) / 1e9 / seconds / n,
        "rss_mb_mean": sum(rss) / len(rss),
        "rss_mb_max": max(rss),
        "processes": len(pids),
        "suspicions": (
            suspicions1 - suspicions0
            if suspicions0 is not None and suspicions1 is not None
            else None
        ),
    }


def startup_work(system: _System) -> dict[str, Any]:
    """Frames each node sent by type so far (CLUSTER INFO
    ``cluster_stats_messages_<type>_sent``), mean and max over the nodes, and
    the handshakes that failed (``cluster_stats_auth_failures``: timeouts)."""
    per: dict[str, list[int]] = {}
    for i in range(system.n):
        info = system.cluster_info(i)
        for key, value in info.items():
            if (key.startswith("cluster_stats_messages_") and key.endswith("_sent")) or key in (
                "cluster_stats_auth_failures",
                "cluster_stats_suspicions",
            ):
                per.setdefault(key, []).append(int(value))
    return {
        key.removeprefix("cluster_stats_").removeprefix("messages_"): {
            "mean": sum(values) / len(values),
            "max": max(values),
        }
        for key, values in sorted(per.items())
        if any(values)
    }


def socket_counts(system: _System) -> dict[str, float]:
    counts = [sockets(pid) for pid in system.pids()]
    return {"mean": sum(counts) / len(counts), "max": max(counts)}


def _publish_sent(system: _System) -> int:
    total = 0
    for i in range(system.n):
        info = system.cluster_info(i)
        total += int(info.get("cluster_stats_messages_publish_sent", 0))
        total += int(info.get("cluster_stats_messages_publishlight_sent", 0))
    return total


def publish_routing(system: _System, plan: ScalePlan) -> dict[str, Any]:
    """One subscriber on each of ``plan.subscriber_nodes`` nodes (never node 0),
    each on its own channel; node 0 publishes ``plan.publish_messages`` round
    robin over them. Delivered: messages the subscribers got (each must get
    its share once); bus PUBLISH messages per PUBLISH against the exact
    minimum, 1 (one remote node holds each channel's subscriber). Then node
    0's PUBLISH rate to the first channel (redis-benchmark, 50 clients, -P 1,
    best of ``plan.rate_runs``)."""
    from bench.loadgen import SubscriberPool, redis_benchmark

    n, k = system.n, min(plan.subscriber_nodes, system.n - 1)
    nodes = [1 + (j * (n - 1)) // k for j in range(k)]
    channels = [b"scale:%04d" % j for j in range(k)]
    message = b"m" * 16
    pools = [
        SubscriberPool(system.ports[i], ch, 1, message)
        for i, ch in zip(nodes, channels, strict=True)
    ]
    try:
        for pool in pools:
            pool.start()
        time.sleep(1.0)  # (bloomcast confirms after every peer acked; Redis needs nothing)
        sent0 = _publish_sent(system)
        each = plan.publish_messages // k
        receivers = 0
        with redis.Redis(host=LOOPBACK, port=system.ports[0], socket_timeout=30) as c:
            for start in range(0, each, 100):
                pipe = c.pipeline(transaction=False)
                for _ in range(start, min(each, start + 100)):
                    for ch in channels:
                        pipe.publish(ch, message)
                receivers += sum(pipe.execute())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and min(p.messages() for p in pools) < each:
            time.sleep(0.05)
        time.sleep(1.0)  # duplicates would come now
        got = [p.messages() for p in pools]
        published = each * k
        bus = _publish_sent(system) - sent0
        # best of three: the machine is shared, a rate is only as good as its quietest run
        rate = max(
            (
                redis_benchmark(
                    system.ports[0],
                    ["PUBLISH", channels[0].decode(), message.decode()],
                    clients=50,
                    requests=plan.rate_requests,
                )
                for _ in range(plan.rate_runs)
            ),
            key=lambda r: r.rps,
        )
    finally:
        for pool in pools:
            pool.stop()
    return {
        "subscriber_nodes": k,
        "published": published,
        "delivered": sum(got),
        "delivered_once": all(g == each for g in got),
        "receivers_reported": receivers,
        "bus_messages": bus,
        "bus_per_publish": bus / published,
        "minimum_per_publish": 1.0,
        "rate_rps": rate.rps,
        "rate_p50_ms": rate.p50_latency_ms,
    }


def _push_reply(kind: bytes, channel: bytes, count: int) -> bytes:
    """The RESP2 reply to SUBSCRIBE/UNSUBSCRIBE of one channel: [kind, channel, count]."""
    return b"*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n:%d\r\n" % (
        len(kind), kind, len(channel), channel, count,
    )  # fmt: skip


def _round_trip(sock: socket.socket, command: bytes, channel: bytes, want: bytes) -> float:
    """Send ``command channel``, read exactly ``want``; seconds from send to
    its last byte. Anything else is a RuntimeError (never a wrong number)."""
    frame = b"*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(command), command, len(channel), channel,
    )  # fmt: skip
    got = b""
    t0 = time.perf_counter()
    sock.sendall(frame)
    while len(got) < len(want):
        chunk = sock.recv(len(want) - len(got))
        if not chunk:
            raise RuntimeError(f"{command.decode()} probe: connection closed")
        got += chunk
    elapsed = time.perf_counter() - t0
    if got != want:
        raise RuntimeError(f"{command.decode()} probe: unexpected reply {got!r}")
    return elapsed


def subscribe_probe(system: _System, plan: ScalePlan) -> dict[str, Any]:
    """One connection to node 0: ``plan.subscribe_probes`` times SUBSCRIBE a
    channel never used before, await the reply, UNSUBSCRIBE it, await that
    reply. SUBSCRIBE (and UNSUBSCRIBE) reply latency in ms: p50, p99, max."""
    from bench.convergence import percentile

    tag = b"%08x" % random.getrandbits(32)
    sub_s: list[float] = []
    unsub_s: list[float] = []
    with socket.create_connection((LOOPBACK, system.ports[0]), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for j in range(plan.subscribe_probes):
            channel = b"probe:%s:%06d" % (tag, j)
            sub_s.append(_round_trip(sock, b"SUBSCRIBE", channel,
                                     _push_reply(b"subscribe", channel, 1)))  # fmt: skip
            unsub_s.append(_round_trip(sock, b"UNSUBSCRIBE", channel,
                                       _push_reply(b"unsubscribe", channel, 0)))  # fmt: skip
    sub_ms = [s * 1000 for s in sub_s]
    unsub_ms = [s * 1000 for s in unsub_s]
    return {
        "probes": len(sub_ms),
        "subscribe_p50_ms": percentile(sub_ms, 0.50),
        "subscribe_p99_ms": percentile(sub_ms, 0.99),
        "subscribe_max_ms": max(sub_ms),
        "unsubscribe_p50_ms": percentile(unsub_ms, 0.50),
        "unsubscribe_p99_ms": percentile(unsub_ms, 0.99),
    }


def _flags_of(client: redis.Redis, port: int) -> list[str] | None:
    raw = client.execute_command("CLUSTER", "NODES")
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 2 and f":{port}@" in parts[1]:
            return parts[2].split(",")
    return None  # forgotten: not failed-and-listed


def detection(system: _System, plan: ScalePlan, victim: int) -> dict[str, Any]:
    """kill -9 node ``victim``; seconds until every live node flags it ``fail``."""
    port = system.ports[victim]
    live = [i for i in range(system.n) if i != victim]
    clients = {i: redis.Redis(host=LOOPBACK, port=system.ports[i], socket_timeout=5) for i in live}
    try:
        for c in clients.values():
            c.ping()
        t0 = time.monotonic()
        system.kill(victim)
        seen: dict[int, float] = {}
        while len(seen) < len(live):
            now = time.monotonic()
            if now - t0 > plan.detect_timeout_s:
                return {"seconds": None, "victim": victim, "reported": len(seen),
                        "live": len(live)}  # fmt: skip
            for i in live:
                if i not in seen and "fail" in (_flags_of(clients[i], port) or []):
                    seen[i] = time.monotonic() - t0
            time.sleep(plan.poll_s)
        return {"seconds": max(seen.values()), "first_s": min(seen.values()),
                "victim": victim, "reported": len(seen), "live": len(live)}  # fmt: skip
    finally:
        for c in clients.values():
            c.close()


def measure(make: Callable[[], Any], plan: ScalePlan) -> dict[str, Any]:
    """One system at one N: ready, idle window, detection; always stopped."""
    system = make()
    try:
        ready = system.start()
        print(f"bench: scale {system.name} N={system.n} ready in {ready:.1f} s", flush=True)
        row: dict[str, Any] = {"ready_s": ready, "answering_s": system.answering_s}
        if system.name == "bloomcast":
            row["startup"] = startup_work(system)
        row.update(idle_window(system, plan))
        row["sockets_per_node"] = socket_counts(system)
        print(f"bench: scale {system.name} N={system.n} idle "
              f"{row['bus_bytes_per_s_per_node']:,.0f} B/s/node "
              f"{row['cpu_pct_per_node']:.2f}% CPU/node "
              f"{row['sockets_per_node']['mean']:.0f} sockets/node", flush=True)  # fmt: skip
        row["publish"] = publish_routing(system, plan)
        pub = row["publish"]
        print(f"bench: scale {system.name} N={system.n} PUBLISH "
              f"{pub['delivered']}/{pub['published']} delivered, "
              f"{pub['bus_per_publish']:.2f} bus msgs each, {pub['rate_rps']:,.0f}/s",
              flush=True)  # fmt: skip
        # after PUBLISH (it counts bus PUBLISH messages only), before a node is killed
        row["subscribe"] = subscribe_probe(system, plan)
        sub = row["subscribe"]
        print(f"bench: scale {system.name} N={system.n} SUBSCRIBE on node 0 "
              f"p50 {sub['subscribe_p50_ms']:.2f} ms p99 {sub['subscribe_p99_ms']:.2f} ms "
              f"max {sub['subscribe_max_ms']:.2f} ms", flush=True)  # fmt: skip
        row["detection"] = detection(system, plan, victim=system.n - 1)
        print(f"bench: scale {system.name} N={system.n} detection "
              f"{row['detection']['seconds']} s", flush=True)  # fmt: skip
        return row
    finally:
        system.stop()


def git_commit() -> str:
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, timeout=10)  # fmt: skip
    return out.stdout.strip() or "unknown"


def run_scale(plan: ScalePlan, redis_binary: str | None = None) -> dict[str, Any]:
    """Every N in ``plan.sizes``: bloomcast, then Redis. Sizes that fail (e.g. a
    timeout) are recorded with ``error`` and the run goes on."""
    binary = redis_binary or shutil.which("redis-server")
    if binary is None:
        raise ValueError("bench scale needs redis-server (apt-get install redis-server)")
    sizes = []
    for n in plan.sizes:
        results: dict[str, Any] = {}
        makers: dict[str, Callable[[], Any]] = {
            "bloomcast": lambda n=n: _Bloomcast(n, plan),  # type: ignore[misc]
            "redis": lambda n=n: _Redis(n, plan, binary),  # type: ignore[misc]
        }
        for name, make in makers.items():
            print(f"bench: scale {name} N={n} ...", flush=True)
            try:
                results[name] = measure(make, plan)
            except (TimeoutError, RuntimeError, redis.RedisError) as exc:
                results[name] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"bench: scale {name} N={n} failed: {exc}", flush=True)
        sizes.append({"nodes": n, "results": results})
    return {
        "versions": {"redis-server (scale)": server_version(binary)},
        "plan": asdict(plan),
        "commit": git_commit(),
        "sizes": sizes,
    }
