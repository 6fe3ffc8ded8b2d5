"""The collector's hourly reclaim (router/collector.py), measured on a real node.

A node with 10,000 clients holding 100 channels each (1,000,000 channels;
the same load as ``bloomcast bench hostile``'s 10k-connection case), its
Reclaimer period shortened to ``PERIOD`` seconds by the wrapper below (the
node has no flag for it): the PING probe (10 ms) runs across the forked
check and its INFO ``# Collector`` is read before and after. Then the same
node with a check timeout of 0 (the child is killed at once, so the node
walks everything itself, as it does when a check finds frozen garbage) for
the pause the check avoids.

``uv run python -m bench.reclaim`` prints one JSON line per run; the figures
are in docs/benchmarks.md (History, issue 28). Not part of CI.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bench.hostile import _KEPT, MAX_CLIENTS, _connections, _info, _settle
from bench.probe import LatencyProbe, rss_mb
from bench.servers import LOOPBACK, NODE, Server, bloomcast_version, free_port

#: the shortened reclaim period (s): the check runs once the load is in place
PERIOD = 60.0
CLIENTS = 10_000

_WRAPPER = (
    "import sys\n"
    "from router import collector\n"
    "collector.Reclaimer.__init__.__defaults__ = (float(sys.argv[1]), float(sys.argv[2]))\n"
    "from bloomcast.cli import main\n"
    "sys.exit(main(sys.argv[3:]))\n"
)


def start(check_timeout: float) -> Server:
    import tempfile
    from pathlib import Path

    port, bus_port = free_port(), free_port()
    workdir = Path(tempfile.mkdtemp(prefix="bench-reclaim-"))
    root = str(Path(__file__).resolve().parent.parent)
    cmd = [
        sys.executable, "-c", _WRAPPER, str(PERIOD), str(check_timeout),
        "node", "--bind", LOOPBACK, "--port", str(port), "--cluster-port", str(bus_port),
        "--no-bus", "--maxclients", MAX_CLIENTS,
        "--pubsub-hard-limit", "0", "--pubsub-soft-limit", "0",
    ]  # fmt: skip
    return Server.launch(NODE, bloomcast_version(), cmd, port, workdir, cwd=root)


def run(check_timeout: float) -> dict[str, Any]:
    server = start(check_timeout)
    started = time.monotonic()
    try:
        _connections(server.port, CLIENTS)
        _settle(server.port, CLIENTS * 100)
        loaded = time.monotonic() - started
        if loaded > PERIOD - 10:
            raise RuntimeError(f"loading took {loaded:.0f} s, past the period {PERIOD:.0f} s")
        before = _info(server.port, b"collector")
        with LatencyProbe(server.port) as probe:
            while int(_info(server.port, b"collector")["gc_reclaim_checks"]) < 1:
                time.sleep(0.2)
            time.sleep(1.0)
        after = _info(server.port, b"collector")
        rss, peak = rss_mb(server.pid)
        keys = (
            "gc_reclaim_checks",
            "gc_reclaim_check_failures",
            "gc_frozen_garbage",
            "gc_reclaims",
            "gc_reclaimed_objects",
            "gc_frozen_objects",
            "gc_pause_max_ms",
        )
        return {
            "check_timeout": check_timeout,
            "worst_ping_ms": round(probe.worst * 1000, 1),
            "pings": probe.count,
            "rss_mb": round(rss),
            "peak_mb": round(peak),
            "before": {k: before[k] for k in keys},
            "after": {k: after[k] for k in keys},
        }
    finally:
        for socks in _KEPT.values():
            for s in socks:
                s.close()
        _KEPT.clear()
        server.stop()


def main() -> None:
    for timeout in (120.0, 0.0):
        print(json.dumps(run(timeout)), flush=True)


if __name__ == "__main__":
    main()
