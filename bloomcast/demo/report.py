"""The demo's outputs: ``report.json`` and a PNG chart (matplotlib, Agg backend).

Report layout (every figure the demo prints, keys stable for tests and tools):

* ``ok`` (bool) and ``checks``: name -> ``{"ok": bool, "detail": str, "skipped":
  bool}`` (a skipped check is no failure; its detail says why);
* ``config``: nodes, seconds, seed, subscribers, phases, publishes;
* ``deliveries``: expected, delivered, lost, duplicated, unexpected;
* ``bus``: client ``publishes``, bus ``publish_sent`` / ``publish_received``
  (sums of CLUSTER INFO ``cluster_stats_messages_publish_sent`` / ``_received``
  over the nodes), ``broadcast`` (publishes x (N - 1), what Redis Cluster
  sends), ``exact_minimum`` (peers with a receiver), ``ratio_vs_broadcast``;
* ``false_positives``: observed, expected_prefix, expected_bloom;
* ``latency_ms``: per measurement ``{count, p50, p99, max}``;
* ``timeline``: per phase ``{t, publishes, bus_sent, exact_minimum, broadcast}``
  (``t`` in seconds since the workload started);
* ``stats``: the Spark job's views (hot channels, trending, per-node
  false-positive rates, forwards saved), rows as dicts, and ``live_vs_spark``:
  per live hot channel ``[name, live 1 m PUBLISH/s, Spark's, the stated bound]``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def percentiles(values: Sequence[float]) -> dict[str, float | int]:
    """``{count, p50, p99, max}`` (nearest-rank percentiles; NaN when empty)."""
    if not values:
        return {"count": 0, "p50": math.nan, "p99": math.nan, "max": math.nan}
    s = sorted(values)

    def rank(q: float) -> float:
        return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]

    return {"count": len(s), "p50": rank(0.50), "p99": rank(0.99), "max": s[-1]}


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_report(report: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``report`` as indented JSON (atomically: temp file, then rename)."""
    target = Path(path)
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_clean(report), indent=2, sort_keys=False) + "\n")
    os.replace(tmp, target)
    return target


def plot_chart(report: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Two panels: bus PUBLISH messages per client PUBLISH per phase (this cluster,
    the exact-interest minimum, and Redis Cluster's broadcast N - 1), and the
    top channels (Spark decayed counts when present, else publish counts)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = int(report["config"]["nodes"])
    timeline = report.get("timeline", [])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=100)

    ts = [p["t"] for p in timeline]
    ours = [p["bus_sent"] / p["publishes"] if p["publishes"] else 0.0 for p in timeline]
    exact = [p["exact_minimum"] / p["publishes"] if p["publishes"] else 0.0 for p in timeline]
    left.plot(
        ts, [nodes - 1] * len(ts), "--", color="tab:red", label="Redis Cluster broadcast (N - 1)"
    )
    # the minimum first, wide, so bloomcast's line stays visible on top when they coincide
    left.plot(
        ts, exact, "-", color="tab:green", linewidth=6, alpha=0.35, label="exact-interest minimum"
    )
    left.plot(ts, ours, "o-", color="tab:blue", label="bloomcast (Bloom-filter routing)")
    left.set_xlabel("time since the workload started (seconds; one point per phase)")
    left.set_ylabel("messages between nodes per client PUBLISH (count)")
    left.set_ylim(0, nodes - 1 + 0.5)
    left.set_title(f"{nodes} nodes: bus messages per PUBLISH")
    left.grid(alpha=0.3)
    left.legend(loc="lower right", fontsize=8)

    top = report.get("stats", {}).get("hot_channels") or []
    if top:
        names = [str(r["bin"]) for r in top][::-1]
        values = [float(r["decayed count"]) for r in top][::-1]
        dist = str(report["stats"].get("hot_dist", ""))
        half_life = dist.partition(":")[2] or "?"
        right.set_xlabel(
            f"PUBLISH messages, decayed count\n(each counts 1 when sent, half as much every "
            f"{half_life} after)"
        )
        title = f"hot channels (Spark, {dist})"
    else:
        counts = report.get("workload", {}).get("top_channels", [])
        names = [c for c, _ in counts][::-1]
        values = [float(n) for _, n in counts][::-1]
        right.set_xlabel("PUBLISH messages sent to the channel (count)")
        title = "top channels (workload)"
    right.barh(names, values, color="tab:purple")
    right.set_ylabel("channel")
    right.set_title(title)
    right.grid(axis="x", alpha=0.3)

    fig.tight_layout()
    target = Path(path)
    fig.savefig(target, format="png")
    plt.close(fig)
    return target
