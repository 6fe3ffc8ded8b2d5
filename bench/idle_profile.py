"""What one idle node does per minute, by cluster size: the function calls a
deterministic profile counts (a measure of work that no clock or cache
effect moves) and the CPU time of the other nodes.

``uv run python -m bench.idle_profile --nodes 10 50 --window-s 60``: for each N
a LocalCluster (node timeout 15000 ms) whose node 0 runs under
bench/profiled_node.py; after ready + 15 s, node 0 is profiled for the
window; prints calls, profiled seconds and the top functions by call count,
and writes ``/tmp/idle-N.prof`` (read with ``python -m pstats``).
"""

from __future__ import annotations

import argparse
import os
import pstats
import signal
import sys
import tempfile
import time
from pathlib import Path

from bench.scale import base_port_below_ephemeral, cpu_ns
from bloomcast.testing.local_cluster import LocalCluster


def profile(n: int, window_s: float, out: Path) -> None:
    logs = Path(tempfile.mkdtemp(prefix="idle-profile-"))
    cluster = LocalCluster(
        n,
        base_port=base_port_below_ephemeral(n),
        extra_args=["--node-timeout-ms", "15000"],
        log_dir=logs,
    )
    try:
        for i in range(n):
            args = cluster.node_args(i)
            if i == 0:  # python -m bloomcast.cli ... -> python -m bench.profiled_node OUT ...
                args = [args[0], "-m", "bench.profiled_node", str(out), *args[3:]]
            cluster.start_node(i, args)
        cluster.wait_ready(timeout=300)
        time.sleep(15)
        node0 = cluster.processes[0]
        assert node0 is not None
        others = [p.pid for p in cluster.processes[1:] if p is not None]
        before = cpu_ns(others)
        os.kill(node0.pid, signal.SIGUSR1)
        time.sleep(window_s)
        os.kill(node0.pid, signal.SIGUSR2)
        other_ms = (cpu_ns(others) - before) / len(others) / window_s / 1e6
        time.sleep(1)
    finally:
        cluster.stop()
    stats = pstats.Stats(str(out))
    print(
        f"N={n}: node 0 made {stats.total_calls} calls in {window_s:.0f} s "  # type: ignore[attr-defined]
        f"({stats.total_tt * 1000:.0f} ms profiled); other nodes {other_ms:.2f} ms CPU/s each"  # type: ignore[attr-defined]
    )
    stats.sort_stats("ncalls").print_stats(8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_profile", description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 50], help="cluster sizes")
    parser.add_argument("--window-s", type=float, default=60.0, help="profiled seconds per N")
    args = parser.parse_args(argv)
    for n in args.nodes:
        profile(n, args.window_s, Path(f"/tmp/idle-{n}.prof"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
