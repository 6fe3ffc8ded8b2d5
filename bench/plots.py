"""``docs/cluster_bus_messages.png``: bus messages and bytes per client PUBLISH
vs N, from the ``cluster`` part of ``docs/benchmarks.json``.

Series that coincide (Valkey and Redis Cluster both broadcast: N - 1
messages, exactly the broadcast line; bloomcast close to the exact minimum)
stay distinguishable: each system has its own marker and line style and is
drawn a little to the side of N, the references at N (the caption says so). The
caption names the workload, the sizes and the commit measured.

Redraw from the stored results, no benchmark run (a second or two):

    uv run python -m bench.plots docs/benchmarks.json docs/cluster_bus_messages.png
"""

from __future__ import annotations

import json
import sys
import textwrap
from itertools import pairwise
from pathlib import Path
from typing import Any

#: marker, line style, colour per system (anchors after bloomcast)
STYLES: dict[str, dict[str, Any]] = {
    "bloomcast": {"marker": "o", "linestyle": "-", "color": "tab:blue"},
    "valkey-server": {"marker": "s", "linestyle": "--", "color": "tab:orange"},
    "redis-server": {"marker": "^", "linestyle": "-.", "color": "tab:green"},
}
OTHER = ({"marker": "D", "linestyle": ":"}, {"marker": "v", "linestyle": (0, (3, 1, 1, 1))})
#: sideways offset of each system's points, as a share of the smallest gap between sizes
DODGE = 0.06


def _style(system: str, k: int) -> dict[str, Any]:
    return STYLES.get(system, OTHER[k % len(OTHER)])


def caption(result: dict[str, Any]) -> str:
    """Workload, sizes, versions (with bloomcast's commit)."""
    plan = result.get("plan", {})
    sizes = ", ".join(str(s["nodes"]) for s in result["sizes"])
    versions = result.get("versions", {})
    commit = str(versions.get("bloomcast", "bloomcast ?")).removeprefix("bloomcast ").strip()
    anchors = ", ".join(str(v) for k, v in sorted(versions.items()) if k != "bloomcast")
    return textwrap.fill(
        f"Workload: {plan.get('channels_per_node', '?')} x N channels, each subscribed on one "
        f"node; every node publishes {plan.get('publishes_per_node', '?')} times round-robin "
        f"over all channels. N = {sizes}. bloomcast commit {commit}; {anchors}. "
        "Left panel: Valkey and Redis Cluster both broadcast (N - 1 messages, the hollow "
        "circles) and bloomcast is close to the exact minimum (the crosses), so the systems' "
        f"points are drawn {DODGE:g} x the gap between sizes beside N (bloomcast left, "
        "anchors right) to keep each visible.",
        175,
    )


def plot_cluster(result: dict[str, Any], path: Path) -> Path | None:
    """Bus messages per PUBLISH vs N: every system, exact minimum, broadcast."""
    if not result.get("sizes"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [s["nodes"] for s in result["sizes"]]
    systems = list(result["sizes"][0]["results"])
    gap = min((b - a for a, b in pairwise(sizes)), default=1)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.9))
    # the references at N itself, big hollow markers; bloomcast just left of N,
    # the anchors just right of it, one step each, so no point hides another
    first = systems[0]
    ax.plot(
        sizes, [n - 1 for n in sizes], linestyle=":", linewidth=2, color="grey",
        marker="o", markersize=13, markerfacecolor="none", label="broadcast (N - 1)",
    )  # fmt: skip
    ax.plot(
        sizes,
        [s["results"][first]["bus"]["exact_min_per_publish"] for s in result["sizes"]],
        linestyle="--", linewidth=1.2, color="black", marker="x", markersize=9, zorder=5,
        label="exact interest (minimum)",
    )  # fmt: skip
    for k, system in enumerate(systems):
        style = _style(system, k)
        shift = (-1 if k == 0 else k) * DODGE * gap
        xs = [n + shift for n in sizes]
        msgs = [s["results"][system]["bus"]["msgs_per_publish"] for s in result["sizes"]]
        nbytes = [s["results"][system]["bus"]["bus_bytes_per_publish"] for s in result["sizes"]]
        ax.plot(xs, msgs, markersize=7, linewidth=1.4, label=system, **style)
        bx.plot(sizes, nbytes, markersize=7, linewidth=1.4, label=system, **style)
    ax.set_ylabel("bus PUBLISH messages per client PUBLISH")
    ax.set_title("messages (lower is better)", fontsize=10)
    bx.set_yscale("log")
    bx.set_ylabel("bus bytes per client PUBLISH (kernel tcp_info, log scale)")
    bx.set_title("bytes on the bus (lower is better)", fontsize=10)
    for axis in (ax, bx):
        axis.set_xlabel("nodes N")
        axis.set_xticks(sizes)
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3, which="both")
    fig.text(0.01, 0.01, caption(result), fontsize=7.5, va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m bench.plots BENCHMARKS_JSON OUT_PNG", file=sys.stderr)
        return 2
    data = json.loads(Path(argv[0]).read_text())
    if plot_cluster(data.get("cluster", {}), Path(argv[1])) is None:
        print(f"{argv[0]}: no cluster results", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
