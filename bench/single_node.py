"""Single node vs redis-server / valkey-server, side by side in one run.

Same machine, same run, same load tool (redis-benchmark): PUBLISH throughput
with 0, 1 and 10 subscribers at ``-P 1`` and ``-P 16`` with 50 clients, and
messages per second delivered to 100 subscribers. Every case runs on every
server back to back (node, then each anchor), so machine load drifts hit
them alike; ratios are node / anchor. Nothing here asserts a speed.

:func:`profile_node` samples the node with py-spy while redis-benchmark
drives PUBLISH at it, and reduces the samples to where the time goes.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.loadgen import SubscriberPool, redis_benchmark
from bench.servers import NODE, available_anchors, start_server
from bloomcast.testing import Server

CHANNEL = b"bench:ch"
MESSAGE = b"hello"
PUBLISH_CMD = ["PUBLISH", CHANNEL.decode(), MESSAGE.decode()]


@dataclass
class SingleNodePlan:
    """Sizes of the single-node benchmark. ``quick()`` is for tests."""

    clients: int = 50
    subscriber_counts: tuple[int, ...] = (0, 1, 10)
    pipelines: tuple[int, ...] = (1, 16)
    requests: dict[int, int] = field(default_factory=lambda: {1: 100_000, 16: 400_000})
    fanout_subscribers: int = 100
    fanout_publishes: int = 20_000
    fanout_clients: int = 10
    fanout_pipeline: int = 16
    repeats: int = 1

    @classmethod
    def quick(cls) -> SingleNodePlan:
        return cls(
            subscriber_counts=(0, 1),
            pipelines=(1, 16),
            requests={1: 2_000, 16: 5_000},
            fanout_subscribers=20,
            fanout_publishes=500,
        )


def publish_case(server: Server, subscribers: int, pipeline: int, plan: SingleNodePlan) -> dict:
    """redis-benchmark PUBLISH against ``server`` with ``subscribers`` draining.

    Returns rps, latencies (ms) and ``delivered``: whether every subscriber
    got every message (a server that drops subscribers is not faster)."""
    requests = plan.requests[pipeline]
    best: dict[str, Any] | None = None
    for _ in range(plan.repeats):
        pool = SubscriberPool(server.port, CHANNEL, subscribers, MESSAGE) if subscribers else None
        with pool if pool is not None else contextlib.nullcontext():
            result = redis_benchmark(
                server.port,
                PUBLISH_CMD,
                clients=plan.clients,
                requests=requests,
                pipeline=pipeline,
            )
            delivered = pool.wait_for(requests, timeout=120) if pool is not None else True
        row = {
            "rps": result.rps,
            "p50_ms": result.p50_latency_ms,
            "p99_ms": result.p99_latency_ms,
            "delivered": delivered,
        }
        # the best of the repeats: the least disturbed by other load on the machine
        if best is None or row["rps"] > best["rps"]:
            best = row
    assert best is not None
    return best


def fanout_case(server: Server, plan: SingleNodePlan) -> dict:
    """Messages/s delivered to ``plan.fanout_subscribers`` subscribers of one channel,
    timed from the start of the PUBLISH load to the last byte received."""
    n, publishes = plan.fanout_subscribers, plan.fanout_publishes
    best: dict[str, Any] | None = None
    for _ in range(plan.repeats):
        with SubscriberPool(server.port, CHANNEL, n, MESSAGE) as pool:
            t0 = time.monotonic()
            result = redis_benchmark(
                server.port,
                PUBLISH_CMD,
                clients=plan.fanout_clients,
                requests=publishes,
                pipeline=plan.fanout_pipeline,
            )
            complete = pool.wait_for(publishes, timeout=120)
            received, last = pool.snapshot()
            elapsed = max(last - t0, 1e-9)
        row = {
            "delivered_per_s": received / elapsed,
            "messages": received,
            "expected": n * publishes,
            "complete": complete,
            "publish_rps": result.rps,
        }
        if best is None or row["delivered_per_s"] > best["delivered_per_s"]:
            best = row
    assert best is not None
    return best


def ratio(value: float, anchor: float) -> float | None:
    """``value / anchor`` or None when the anchor measured nothing."""
    return value / anchor if anchor > 0 else None


def run_single_node(plan: SingleNodePlan, servers: list[str] | None = None) -> dict:
    """Run every case on the node and each anchor; return the JSON-ready result.

    ``servers`` defaults to [NODE] + :func:`available_anchors`.
    """
    names = servers if servers is not None else [NODE, *available_anchors()]
    started: dict[str, Server] = {}
    try:
        for name in names:
            started[name] = start_server(name)
        cases = []
        for pipeline in plan.pipelines:
            for subs in plan.subscriber_counts:
                results = {
                    name: publish_case(srv, subs, pipeline, plan) for name, srv in started.items()
                }
                cases.append(
                    {
                        "subscribers": subs,
                        "pipeline": pipeline,
                        "clients": plan.clients,
                        "requests": plan.requests[pipeline],
                        "results": results,
                        "ratios": _ratios(results, "rps"),
                    }
                )
        fan = {name: fanout_case(srv, plan) for name, srv in started.items()}
        fanout = {
            "subscribers": plan.fanout_subscribers,
            "publishes": plan.fanout_publishes,
            "clients": plan.fanout_clients,
            "pipeline": plan.fanout_pipeline,
            "results": fan,
            "ratios": _ratios(fan, "delivered_per_s"),
        }
        versions = {name: srv.version for name, srv in started.items()}
    finally:
        for srv in started.values():
            srv.stop()
    return {"plan": asdict(plan), "versions": versions, "publish": cases, "fanout": fanout}


def _ratios(results: dict[str, dict], key: str) -> dict[str, float | None]:
    """node / anchor for every anchor in ``results`` (keys ``"<anchor>"``)."""
    if NODE not in results:
        return {}
    node = results[NODE][key]
    return {name: ratio(node, r[key]) for name, r in results.items() if name != NODE}


# -- profile ---------------------------------------------------------------------------


def py_spy_path() -> str | None:
    """py-spy from the venv (dev dependency) or PATH."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.*?)(?::\d+)?\)$")


def short_frame(frame: str) -> str:
    """``"handle (/…/site-packages/redis/x.py:12)"`` -> ``"handle (redis/x.py)"``:
    line numbers dropped (time is summed per function), paths shortened."""
    m = _FRAME.match(frame)
    if m is None:
        return frame
    path = m.group("file")
    root = str(Path(__file__).resolve().parent.parent) + "/"
    if "/site-packages/" in path:
        path = path.split("/site-packages/", 1)[1]
    elif path.startswith(root):
        path = path[len(root) :]
    elif "/lib/python3" in path:
        path = "stdlib/" + path.rsplit("/lib/python3", 1)[1].split("/", 1)[-1]
    return f"{m.group('func')} ({path})"


def parse_collapsed(text: str) -> tuple[Counter[str], Counter[str], int]:
    """py-spy ``--format raw`` (collapsed stacks: ``f1;f2;leaf count``) ->
    (self samples per function, inclusive samples per function, total samples)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [short_frame(f) for f in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    return own, inclusive, total


def profile_node(seconds: float = 10.0, pipeline: int = 16, top: int = 80) -> dict:
    """py-spy samples of a node under redis-benchmark PUBLISH load (1 subscriber).

    ``--native``: C frames are sampled too, so the time in ``read``/``write``
    system calls shows as its own frames (``write (libc.so.6)``) instead of
    being charged to the Python function that made the call.

    Returns ``{"samples", "self": [[frame, share], ...], "inclusive": [...]}``
    with shares of all samples, or ``{"error": ...}`` when py-spy is missing
    or cannot attach (it needs ptrace rights)."""
    spy = py_spy_path()
    if spy is None:
        return {"error": "py-spy not found: uv sync (dev group)"}
    out_dir = Path(tempfile.mkdtemp(prefix="bench-pyspy-"))
    raw = out_dir / "profile.txt"
    try:
        with start_server(NODE) as node, SubscriberPool(node.port, CHANNEL, 1, MESSAGE):
            stop = threading.Event()

            def load() -> None:
                while not stop.is_set():
                    redis_benchmark(
                        node.port, PUBLISH_CMD, clients=50, requests=100_000, pipeline=pipeline
                    )

            loader = threading.Thread(target=load, daemon=True)
            loader.start()
            time.sleep(0.5)
            proc = subprocess.run(
                [
                    spy, "record", "--pid", str(node.pid), "--duration", str(int(seconds)),
                    "--rate", "250", "--format", "raw", "--native", "--output", str(raw),
                ],
                capture_output=True, text=True, timeout=seconds + 60,
            )  # fmt: skip
            stop.set()
            loader.join(timeout=120)
        if proc.returncode != 0 or not raw.exists():
            return {"error": f"py-spy failed: {proc.stderr.strip()[-300:]}"}
        own, inclusive, total = parse_collapsed(raw.read_text())
        return {
            "samples": total,
            "pipeline": pipeline,
            "self": [[f, n / total] for f, n in own.most_common(top)] if total else [],
            "inclusive": [[f, n / total] for f, n in inclusive.most_common(top)] if total else [],
        }
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
