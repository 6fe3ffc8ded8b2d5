"""Subscribe-to-remote-delivery delay: how long after a SUBSCRIBE confirmation on
node A a PUBLISH on node B first reaches the subscriber.

Each trial uses a fresh channel. The subscriber (a raw socket on A) sends
SUBSCRIBE; the clock starts when the confirmation arrives; then a client on
B publishes to the channel in a tight loop (one PUBLISH round trip at a
time), polling the subscriber socket between publishes; the clock stops at
the first message. The resolution is one PUBLISH round trip on B.

bloomcast needs the filter delta to reach B (section 5, convergence); Redis
Cluster broadcasts every PUBLISH, so its delay is one round trip plus one bus
hop — the anchor. With subscribe visibility on (the default since issue 27;
docs/architecture.md §4) the confirmation waits for B, so the delay after it
should be as small as Redis's; the row "bloomcast, visibility 0" is the node
confirming at once, as before.
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

import redis

from bench.cluster_bench import BusCluster, start_cluster, system_version
from bench.loadgen import message_frame, subscribe_reply
from bench.servers import NODE
from bloomcast.testing import LOOPBACK, REDIS, VALKEY, redis_server_path

MESSAGE = b"c"


@dataclass
class ConvergencePlan:
    """Sizes of the convergence benchmark; ``quick()`` is for tests."""

    sizes: tuple[int, ...] = (3, 6, 12)
    systems: tuple[str, ...] = (NODE, VALKEY, REDIS)
    trials: int = 200
    trial_timeout_s: float = 5.0
    #: also run bloomcast with --subscribe-visibility-timeout 0 (confirm at once)
    visibility_off: bool = True

    @classmethod
    def quick(cls) -> ConvergencePlan:
        return cls(sizes=(3,), systems=(NODE, VALKEY), trials=5, visibility_off=False)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def one_trial(sub_port: int, pub: redis.Redis, channel: bytes, timeout: float) -> float | None:
    """Seconds from SUBSCRIBE confirmation on ``sub_port`` to first delivery of a
    PUBLISH sent through ``pub``; None on timeout."""
    frame = message_frame(channel, MESSAGE)
    confirm = subscribe_reply(channel, 1)
    with socket.create_connection((LOOPBACK, sub_port), timeout=timeout) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(channel), channel))
        got = b""
        while len(got) < len(confirm):
            chunk = s.recv(len(confirm) - len(got))
            if not chunk:
                raise ConnectionError("subscriber closed before the confirmation")
            got += chunk
        t0 = time.perf_counter()
        if got != confirm:
            raise ConnectionError(f"unexpected SUBSCRIBE reply {got!r}")
        deadline = t0 + timeout
        buf = b""
        while time.perf_counter() < deadline:
            pub.publish(channel, MESSAGE)
            readable, _, _ = select.select([s], [], [], 0)
            if readable:
                buf += s.recv(4096)
                if len(buf) >= len(frame):
                    # the clock stops when the first message is in hand
                    return time.perf_counter() - t0
        return None


def measure_delays(cluster: BusCluster, trials: int, timeout: float, tag: str) -> dict[str, Any]:
    """``trials`` trials, node pairs (A, B) rotating over all ordered pairs."""
    n = len(cluster.ports)
    clients = [redis.Redis(host=LOOPBACK, port=p, socket_timeout=timeout) for p in cluster.ports]
    delays: list[float] = []
    timeouts = 0
    try:
        for t in range(trials):
            a = t % n
            b = (a + 1 + (t // n) % (n - 1)) % n
            channel = b"conv:%s:%08d" % (tag.encode(), t)
            d = one_trial(cluster.ports[a], clients[b], channel, timeout)
            if d is None:
                timeouts += 1
            else:
                delays.append(d)
    finally:
        for c in clients:
            c.close()
    out: dict[str, Any] = {"trials": trials, "timeouts": timeouts}
    if delays:
        out.update(
            {
                "p50_ms": percentile(delays, 0.5) * 1000,
                "p99_ms": percentile(delays, 0.99) * 1000,
                "max_ms": max(delays) * 1000,
                "mean_ms": sum(delays) / len(delays) * 1000,
            }
        )
    return out


def run_convergence(plan: ConvergencePlan) -> dict[str, Any]:
    """Every system at every size; plus bloomcast without subscribe visibility when asked."""
    systems = [s for s in plan.systems if s != REDIS or redis_server_path() is not None]
    rows = []
    for n in plan.sizes:
        results: dict[str, Any] = {}
        for system in systems:
            with start_cluster(system, n) as cluster:
                results[system] = measure_delays(
                    cluster, plan.trials, plan.trial_timeout_s, f"{system}{n}"
                )
        if plan.visibility_off and NODE in systems:
            args = ["--subscribe-visibility-timeout", "0"]
            with start_cluster(NODE, n, extra_args=args) as cluster:
                results[f"{NODE}, visibility 0"] = measure_delays(
                    cluster, plan.trials, plan.trial_timeout_s, f"vis{n}"
                )
        rows.append({"nodes": n, "results": results})
    return {
        "plan": asdict(plan),
        "versions": {s: system_version(s) for s in systems},
        "sizes": rows,
    }
