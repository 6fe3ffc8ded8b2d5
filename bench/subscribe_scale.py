"""Where a SUBSCRIBE's visibility wait goes as N grows (issue 48 item 3).

``uv run python -m bench.subscribe_scale --nodes 10,30``: for each N, a
converged bloomcast cluster (``bench.scale``'s machinery, node timeout 15 s)
and then a Redis Cluster of N: ``--probes`` SUBSCRIBE + UNSUBSCRIBE cycles of
fresh channels on one connection to node 0 (``bench.scale.subscribe_probe``,
the scale bench's own probe), and the CPU (schedstat, every thread) that the
cycles cost: node 0 (the origin) and the other nodes summed (its peers), the
idle CPU of the same span subtracted (measured just before). Prints one line
per (system, N) and, with ``--json``, writes the rows there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from typing import Any

from bench.scale import ScalePlan, _Bloomcast, _Redis, _System, cpu_ns, subscribe_probe


def _cpu(system: _System) -> tuple[int, int]:
    pids = system.pids()
    return cpu_ns(pids[:1]), cpu_ns(pids[1:])


def probe_row(system: _System, plan: ScalePlan, idle_s: float) -> dict[str, Any]:
    """Idle CPU over ``idle_s``, then the probe and its CPU less the idle rate."""
    o0, p0 = _cpu(system)
    t0 = time.monotonic()
    time.sleep(idle_s)
    o1, p1 = _cpu(system)
    idle_span = time.monotonic() - t0
    t1 = time.monotonic()
    sub = subscribe_probe(system, plan)
    span = time.monotonic() - t1
    o2, p2 = _cpu(system)
    cycles = sub["probes"]
    origin_idle = (o1 - o0) / idle_span * span
    peers_idle = (p1 - p0) / idle_span * span
    sub["origin_us_per_cycle"] = max(0.0, (o2 - o1 - origin_idle) / cycles / 1000)
    sub["peers_us_per_cycle"] = max(0.0, (p2 - p1 - peers_idle) / cycles / 1000)
    sub["wall_ms_per_cycle"] = span / cycles * 1000
    return sub


def run(sizes: list[int], probes: int, idle_s: float, redis: bool) -> list[dict[str, Any]]:
    plan = ScalePlan(sizes=tuple(sizes), subscribe_probes=probes)
    binary = shutil.which("redis-server")
    rows: list[dict[str, Any]] = []
    for n in sizes:
        makers: list[tuple[str, Any]] = [("bloomcast", lambda n=n: _Bloomcast(n, plan))]
        if redis and binary is not None:
            makers.append(("redis", lambda n=n: _Redis(n, plan, binary)))
        for name, make in makers:
            system = make()
            try:
                ready = system.start()
                time.sleep(2.0)  # settle
                row = {"system": name, "nodes": n, "ready_s": ready}
                row.update(probe_row(system, plan, idle_s))
                rows.append(row)
                print(
                    f"{name:9} N={n:3} SUBSCRIBE p50 {row['subscribe_p50_ms']:6.2f} ms "
                    f"p99 {row['subscribe_p99_ms']:6.2f} ms max {row['subscribe_max_ms']:6.2f}"
                    f" | per cycle: wall {row['wall_ms_per_cycle']:6.2f} ms, CPU origin "
                    f"{row['origin_us_per_cycle']:7.0f} us, peers {row['peers_us_per_cycle']:7.0f}"
                    f" us ({row['peers_us_per_cycle'] / max(1, n - 1):5.0f} us/peer)",
                    flush=True,
                )
            finally:
                system.stop()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.subscribe_scale")
    parser.add_argument("--nodes", default="10,30")
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--no-redis", action="store_true")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.nodes.split(",") if n]
    rows = run(sizes, args.probes, args.idle_s, not args.no_redis)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
