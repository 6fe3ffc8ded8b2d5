"""Writing benchmark results: ``docs/benchmarks.json`` and the tables of
``docs/benchmarks.md``, plus PNG plots.

The markdown file is shared: other parts own some ``## `` sections (bloom,
simulation, spark). :func:`replace_section` edits one section in place and
leaves every other section byte for byte as it was; the JSON file is
merged key by key the same way.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

from bench.servers import NODE

# -- shared file editing ---------------------------------------------------------------


def replace_section(text: str, heading: str, body: str) -> str:
    """Replace the ``## heading`` section of ``text`` (up to the next ``## `` heading
    or the end) with ``## heading`` + ``body``; append it when absent.

    ``heading`` is matched exactly (without the ``## ``)."""
    section = f"## {heading}\n\n{body.strip()}\n\n"
    pattern = re.compile(rf"^## {re.escape(heading)}[ \t]*\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(text):
        return pattern.sub(lambda _: section, text, count=1)
    if text and not text.endswith("\n"):
        text += "\n"
    if text and not text.endswith("\n\n"):
        text += "\n"
    return text + section


def update_markdown(path: Path, sections: dict[str, str], title: str = "# Benchmarks") -> None:
    """Replace (or append) each ``heading -> body`` of ``sections`` in ``path``."""
    text = path.read_text() if path.exists() else f"{title}\n\n"
    for heading, body in sections.items():
        text = replace_section(text, heading, body)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def update_json(path: Path, parts: dict[str, Any]) -> dict[str, Any]:
    """Merge top-level ``parts`` into the JSON object at ``path``; return the whole."""
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            data = {}
    data.update(parts)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return data


# -- machine and versions ----------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """CPU model, core count, kernel, Python, load average (the machine is shared)."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "loadavg": list(os.getloadavg()),
    }


# -- formatting --------------------------------------------------------------------------


def fmt_num(value: float | None, digits: int = 0) -> str:
    """Thousands separators; ``-`` for None."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def fmt_ratio(value: float | None) -> str:
    """``0.25x``; three decimals below 0.1 so small ratios do not print as 0.00x."""
    if value is None:
        return "-"
    return f"{value:.3f}x" if abs(value) < 0.1 else f"{value:.2f}x"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def single_node_markdown(result: dict[str, Any]) -> str:
    """Tables of :func:`bench.single_node.run_single_node`'s result."""
    servers = list(result["versions"])
    anchors = [s for s in servers if s != NODE]
    header = ["subscribers", "-P", *[f"{s} PUBLISH/s" for s in servers]]
    header += [f"{NODE} / {a}" for a in anchors if NODE in servers]
    rows = []
    for case in result["publish"]:
        row = [str(case["subscribers"]), str(case["pipeline"])]
        for s in servers:
            r = case["results"][s]
            row.append(fmt_num(r["rps"]) + ("" if r["delivered"] else " (lost)"))
        row += [fmt_ratio(case["ratios"].get(a)) for a in anchors if NODE in servers]
        rows.append(row)
    fan = result["fanout"]
    fan_header = ["subscribers", *[f"{s} msgs/s delivered" for s in servers]]
    fan_header += [f"{NODE} / {a}" for a in anchors if NODE in servers]
    fan_row = [str(fan["subscribers"])]
    for s in servers:
        r = fan["results"][s]
        fan_row.append(fmt_num(r["delivered_per_s"]) + ("" if r["complete"] else " (incomplete)"))
    fan_row += [fmt_ratio(fan["ratios"].get(a)) for a in anchors if NODE in servers]
    plan = result["plan"]
    parts = [
        f"PUBLISH throughput, redis-benchmark `-c {plan['clients']}`, "
        + ", ".join(f"`-n {n}` at `-P {p}`" for p, n in plan["requests"].items())
        + f"; subscribers draining on raw sockets; best of {plan['repeats']} run(s):",
        "",
        table(header, rows),
        "",
        f"Fan-out: one channel, {fan['subscribers']} subscribers, {fan['publishes']} PUBLISH "
        f"(`-c {fan['clients']} -P {fan['pipeline']}`), messages delivered per second:",
        "",
        table(fan_header, [fan_row]),
    ]
    profile = result.get("profile")
    if profile:
        parts += ["", profile_markdown(profile)]
    return "\n".join(parts)


def _meets(value: float | None, goal: float, at_least: bool = True) -> str:
    if value is None:
        return "not measured"
    ok = value >= goal if at_least else value <= goal
    return "meets" if ok else "misses"


def profile_markdown(profile: dict[str, Any], rows: int = 6) -> str:
    """The top frames by self time and inclusive time from a py-spy profile,
    two lines (the page stays one a reader can take in, issue 43; every
    frame is in benchmarks.json's ``single.profile``)."""
    if "error" in profile:
        return f"Profile: not taken ({profile['error']})."

    def shares(frames: list[tuple[str, float]]) -> str:
        return ", ".join(f"`{f}` {s:.1%}" for f, s in frames[:rows])

    return "\n".join(
        [
            f"py-spy profile of the node under redis-benchmark PUBLISH `-P {profile['pipeline']}` "
            f"with 1 subscriber ({profile['samples']} samples; `--native`, so C frames such as "
            "`write (libc.so.6)` are the node's system calls; every frame: benchmarks.json, "
            "`single.profile`).",
            "",
            f"- Self time: {shares(profile['self'])}.",
            "- Inclusive time of Python frames below the event loop's entry frames: "
            f"{shares(_below_loop(profile))}.",
        ]
    )


def _below_loop(profile: dict[str, Any], rows: int = 12) -> list[tuple[str, float]]:
    """Inclusive Python frames minus the entry chain (main, runpy, the loop's
    run), which all carry the same, largest share; C frames (uvloop, libc) are
    in the self-time table."""
    inclusive = [(f, s) for f, s in profile["inclusive"] if f.endswith(".py)")]
    if not inclusive:
        return []
    top = inclusive[0][1]
    return [(f, s) for f, s in inclusive if s < top - 1e-9][:rows]


def cluster_markdown(result: dict[str, Any]) -> str:
    """Tables of :func:`bench.cluster_bench.run_cluster`'s result."""
    rows_msgs = []
    rows_tp = []
    for size in result["sizes"]:
        n = size["nodes"]
        for system, res in size["results"].items():
            bus = res["bus"]
            ratio_cells = []
            if system == NODE:
                ratio_cells.append(
                    fmt_ratio(size["ratios"].get("exact_min", {}).get("msgs_per_publish"))
                )
            else:
                ratio_cells.append("-")
            rows_msgs.append(
                [
                    str(n),
                    system,
                    f"{bus['msgs_per_publish']:.3f}",
                    f"{bus['exact_min_per_publish']:.3f}",
                    str(bus["broadcast_per_publish"]),
                    *ratio_cells,
                    fmt_num(bus["bus_bytes_per_publish"], 1),
                    "yes" if bus["delivered_all"] else "NO",
                ]
            )
            tp = res["throughput"]
            rows_tp.append(
                [str(n), system, *[fmt_num(tp[k]["rps"]) for k in sorted(tp, key=_pkey)]]
            )
    p_keys = (
        sorted(result["sizes"][0]["results"][NODE]["throughput"], key=_pkey)
        if (result["sizes"] and NODE in result["sizes"][0]["results"])
        else ["P1", "P16"]
    )
    ratio_rows = []
    for size in result["sizes"]:
        for anchor, r in size["ratios"].items():
            if anchor == "exact_min":
                continue
            ratio_rows.append(
                [
                    str(size["nodes"]),
                    f"{NODE} / {anchor}",
                    fmt_ratio(r.get("msgs_per_publish")),
                    fmt_ratio(r.get("bus_bytes_per_publish")),
                    *[fmt_ratio(r.get(f"throughput_{k}")) for k in p_keys],
                ]
            )
    plan = result["plan"]
    return "\n".join(
        [
            f"Workload: {plan['channels_per_node']} x N channels, each subscribed on one node; "
            f"every node publishes {plan['publishes_per_node']} times round-robin over all "
            "channels. Bus messages: `cluster_stats_messages_publish_sent` summed over nodes; "
            "bus bytes: kernel `tcp_info` bytes_sent on every bus socket, idle PING/PONG rate "
            "subtracted."
            + (
                f" bloomcast nodes ran with `{' '.join(plan['node_args'])}`."
                if plan.get("node_args")
                else ""
            ),
            "",
            table(
                [
                    "N",
                    "system",
                    "bus msgs / PUBLISH",
                    "exact min",
                    "broadcast",
                    "vs exact",
                    "bus bytes / PUBLISH",
                    "all delivered",
                ],
                rows_msgs,
            ),
            "",
            f"Aggregate PUBLISH/s: one redis-benchmark per node at once, `-c {plan['clients']}` "
            "split over the nodes, `-r` over the channels, total requests / wall time:",
            "",
            table(["N", "system", *[f"-P {k[1:]}" for k in p_keys]], rows_tp),
            "",
            "Ratios (bloomcast / anchor; below 1 is fewer messages/bytes, above 1 is faster):",
            "",
            table(
                ["N", "ratio", "bus msgs", "bus bytes", *[f"PUBLISH/s -P {k[1:]}" for k in p_keys]],
                ratio_rows,
            ),
        ]
    )


def _pkey(key: str) -> int:
    return int(key[1:])


def convergence_markdown(result: dict[str, Any]) -> str:
    """Table of :func:`bench.convergence.run_convergence`'s result."""
    rows = []
    for size in result["sizes"]:
        for system, r in size["results"].items():
            rows.append(
                [
                    str(size["nodes"]),
                    system,
                    fmt_num(r.get("p50_ms"), 2),
                    fmt_num(r.get("p99_ms"), 2),
                    fmt_num(r.get("max_ms"), 2),
                    f"{r['trials'] - r['timeouts']}/{r['trials']}",
                ]
            )
    return "\n".join(
        [
            "Delay from the SUBSCRIBE confirmation on node A to the first delivery of a "
            "PUBLISH sent in a tight loop on node B (fresh channel per trial, pairs rotate; "
            "resolution: one PUBLISH round trip):",
            "",
            table(["N", "system", "p50 ms", "p99 ms", "max ms", "delivered"], rows),
            "",
            "Goal (issue 4): bloomcast p99 <= 5 ms on loopback: "
            + "; ".join(
                f"N = {size['nodes']}: "
                + _meets(size["results"][NODE].get("p99_ms"), 5.0, at_least=False)
                for size in result["sizes"]
                if NODE in size["results"]
            )
            + ".",
        ]
    )
