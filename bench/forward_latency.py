"""Latency of a forwarded PUBLISH at a steady rate (issue 29): what
``cluster-forward-linger-us`` costs a remote subscriber.

One publisher on node 0 sends ``PUBLISH lat <send time>`` at a fixed rate
and waits for each reply (``-P 1``); one subscriber of ``lat`` on node 1
reads on its own thread and takes each message's arrival time: latency =
arrival - send, both ``time.perf_counter_ns`` of this process. A 2-node
bloomcast cluster per linger value, beside Redis Cluster 7.0.15 and
Valkey 9.1 (3 masters, the smallest they build; publisher on the first,
subscriber on the second), each rate for ``seconds`` after a warm-up
second.

The linger counts from the link's last write of forwards: at a steady
rate below one forward per linger each forward leaves at the next loop
turn, as at 0; above it the link writes about once per linger and a
forward waits up to that long. The publisher here is steady (evenly
spaced PUBLISH); at random arrivals of rate r a share 1 - exp(-r * linger)
of the forwards comes within a linger of the last and waits.

``uv run python -m bench.forward_latency [--linger-us 0,5000] [--rates
50,500,2000] [--seconds 3] [--no-anchors]``: prints a Markdown table (p50 / p99 / max in
microseconds). Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from typing import Any

import hiredis

from bench.cluster_bench import start_cluster, wait_interest_known
from bench.results import table
from bench.servers import NODE
from bloomcast.testing import LOOPBACK
from bloomcast.testing.servers import REDIS, VALKEY

CHANNEL = b"lat"


def _command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class _Subscriber:
    """A raw-socket subscriber of :data:`CHANNEL` that keeps (sent, arrived) ns."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((LOOPBACK, port))
        self.sock.sendall(_command(b"SUBSCRIBE", CHANNEL))
        self.reader = hiredis.Reader()
        self.samples: list[tuple[int, int]] = []
        self._confirmed = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._confirmed.wait(10):
            raise RuntimeError("no SUBSCRIBE confirmation")

    def _run(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            now = time.perf_counter_ns()
            self.reader.feed(data)
            while (reply := self.reader.gets()) is not False:
                if reply[0] == b"message":
                    self.samples.append((int(reply[2]), now))
                else:
                    self._confirmed.set()

    def close(self) -> None:
        self.sock.close()
        self._thread.join(5)


def _publish_at(port: int, rate: float, seconds: float) -> int:
    """PUBLISH at ``rate`` per second for ``seconds`` (each reply awaited):
    the count sent."""
    sock = socket.create_connection((LOOPBACK, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = hiredis.Reader()
    period = 1e9 / rate
    start = time.perf_counter_ns()
    sent = 0
    while True:
        due = start + int(sent * period)
        now = time.perf_counter_ns()
        if now - start >= seconds * 1e9:
            break
        if due > now:
            time.sleep((due - now) / 1e9)
        sock.sendall(_command(b"PUBLISH", CHANNEL, b"%d" % time.perf_counter_ns()))
        while reader.gets() is False:
            reader.feed(sock.recv(4096))
        sent += 1
    sock.close()
    return sent


def _quantiles(values: list[int]) -> dict[str, float]:
    values = sorted(values)
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    return {
        "p50": values[len(values) // 2] / 1e3,
        "p99": values[min(len(values) - 1, int(len(values) * 0.99))] / 1e3,
        "max": values[-1] / 1e3,
    }


def measure(
    system: str, linger_us: int, rates: list[float], seconds: float
) -> list[dict[str, Any]]:
    """One cluster of ``system``; per rate, latency quantiles in microseconds."""
    n = 2 if system == NODE else 3
    extra = ["--cluster-forward-linger-us", str(linger_us)] if linger_us else []
    rows = []
    with start_cluster(system, n, extra) as cluster:
        sub = _Subscriber(cluster.ports[1])
        try:
            wait_interest_known(cluster, system)
            for rate in rates:
                _publish_at(cluster.ports[0], rate, 1.0)  # warm-up
                time.sleep(0.2)
                first = len(sub.samples)
                sent = _publish_at(cluster.ports[0], rate, seconds)
                time.sleep(0.5)
                got = sub.samples[first:]
                row = {"rate": rate, "sent": sent, "received": len(got)}
                row.update(_quantiles([arrived - at for at, arrived in got]))
                rows.append(row)
        finally:
            sub.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--linger-us", default="0,5000", help="bloomcast's values, comma-separated")
    ap.add_argument("--rates", default="50,500,2000", help="PUBLISH/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--no-anchors", action="store_true", help="bloomcast only")
    args = ap.parse_args(argv)
    rates = [float(x) for x in args.rates.split(",")]
    runs: list[tuple[str, list[dict[str, Any]]]] = []
    if not args.no_anchors:
        runs.append(("Redis Cluster 7.0.15", measure(REDIS, 0, rates, args.seconds)))
        runs.append(("Valkey 9.1", measure(VALKEY, 0, rates, args.seconds)))
    for linger in (int(x) for x in args.linger_us.split(",")):
        runs.append((f"bloomcast, linger {linger}", measure(NODE, linger, rates, args.seconds)))
    header = ["system", "PUBLISH/s", "received / sent", "p50 us", "p99 us", "max us"]
    rows = []
    for name, result in runs:
        for r in result:
            sent = f"{r['received']} / {r['sent']}"
            quantiles = [f"{r[q]:.0f}" for q in ("p50", "p99", "max")]
            rows.append([name, f"{r['rate']:.0f}", sent, *quantiles])
    print(table(header, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
