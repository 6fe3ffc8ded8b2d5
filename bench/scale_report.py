"""The ``scale`` section of docs/benchmarks.md and ``idle_cost_vs_n.png``, from
:func:`bench.scale.run_scale`'s result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.results import fmt_num, fmt_ratio, table

SYSTEMS = ("bloomcast", "redis")
PLOT = "idle_cost_vs_n.png"


def command(nodes: str | None, quick: bool, window_s: float | None = None) -> str:
    argv = "uv run bloomcast bench scale"
    if nodes:
        argv += f" --nodes {nodes}"
    if window_s is not None:
        argv += f" --window-s {window_s:g}"
    return argv + (" --quick" if quick else "")


def _ok(size: dict[str, Any], system: str) -> dict[str, Any] | None:
    row = size["results"].get(system)
    return row if row and "error" not in row else None


def _detect(row: dict[str, Any]) -> str:
    d = row["detection"]
    if d["seconds"] is None:
        return f"not within the limit ({d['reported']}/{d['live']})"
    return fmt_num(d["seconds"], 1)


def _sockets(row: dict[str, Any]) -> str:
    counts = row.get("sockets_per_node")
    return "" if counts is None else f"{counts['mean']:.0f}"


def publish_rows(result: dict[str, Any]) -> list[list[str]]:
    """Per N and system: delivered / published (once?), bus messages per
    PUBLISH against the minimum, node 0's PUBLISH/s."""
    rows = []
    for size in result["sizes"]:
        for system in SYSTEMS:
            row = _ok(size, system)
            pub = None if row is None else row.get("publish")
            if pub is None:
                continue
            once = "once each" if pub["delivered_once"] else "NOT once each"
            rows.append([
                str(size["nodes"]), system,
                f"{pub['delivered']:,} / {pub['published']:,} ({once})",
                f"{pub['bus_per_publish']:.2f} (minimum {pub['minimum_per_publish']:g})",
                fmt_num(pub["rate_rps"]),
            ])  # fmt: skip
    return rows


def subscribe_rows(result: dict[str, Any]) -> list[list[str]]:
    """Per N and system: node 0's SUBSCRIBE reply latency p50 / p99 / max and
    UNSUBSCRIBE p50 / p99, ms (results without the probe are left out)."""
    rows = []
    for size in result["sizes"]:
        for system in SYSTEMS:
            row = _ok(size, system)
            sub = None if row is None else row.get("subscribe")
            if sub is None:
                continue
            rows.append([
                str(size["nodes"]), system, str(sub["probes"]),
                f"{sub['subscribe_p50_ms']:.2f}", f"{sub['subscribe_p99_ms']:.2f}",
                f"{sub['subscribe_max_ms']:.2f}",
                f"{sub['unsubscribe_p50_ms']:.2f} / {sub['unsubscribe_p99_ms']:.2f}",
            ])  # fmt: skip
    return rows


#: the start-up frames shown, in this order (CLUSTER INFO names)
STARTUP_KEYS = ("meet_sent", "ping_sent", "pong_sent", "session_sent", "filter_request_sent",
                "filter_full_sent", "fail_sent", "auth_failures", "suspicions")  # fmt: skip


def startup_rows(result: dict[str, Any]) -> list[list[str]]:
    """bloomcast's frames per node at ready (mean, max in brackets)."""
    rows = []
    for size in result["sizes"]:
        row = _ok(size, "bloomcast")
        work = None if row is None else row.get("startup")
        if work is None:
            continue
        cells = [str(size["nodes"])]
        for key in STARTUP_KEYS:
            v = work.get(key)
            cells.append("0" if v is None else f"{v['mean']:.1f} ({v['max']})")
        rows.append(cells)
    return rows


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _metric(row: dict[str, Any] | None, key: str) -> float | None:
    if row is None:
        return None
    if key == "detection_s":
        return row["detection"]["seconds"]
    return row[key]


RATIO_KEYS = (
    ("bus_bytes_per_s_per_node", "idle bus B/s"),
    ("cpu_pct_per_node", "idle CPU"),
    ("rss_mb_mean", "RSS"),
    ("ready_s", "ready"),
    ("detection_s", "detection"),
)


def growth(result: dict[str, Any], system: str, key: str) -> tuple[int, int, float] | None:
    """(first N, last N, value at last / value at first) over the sizes measured."""
    points = [(s["nodes"], _metric(_ok(s, system), key)) for s in result["sizes"]]
    points = [(n, v) for n, v in points if v is not None]
    if len(points) < 2 or not points[0][1]:
        return None
    (n0, v0), (n1, v1) = points[0], points[-1]
    assert v0 is not None and v1 is not None
    return n0, n1, v1 / v0


def scale_markdown(result: dict[str, Any], cmd: str) -> str:
    """Table per N and system, ratios bloomcast/Redis, growth, reproduce line."""
    plan = result["plan"]
    rows, ratio_rows = [], []
    for size in result["sizes"]:
        n = size["nodes"]
        for system in SYSTEMS:
            row = _ok(size, system)
            if row is None:
                err = size["results"].get(system, {}).get("error", "not run")
                rows.append([str(n), system, f"failed: {err}", "", "", "", "", "", ""])
                continue
            answering = row.get("answering_s")
            ready = fmt_num(row["ready_s"], 1)
            if answering is not None:
                ready += f" ({fmt_num(answering, 1)})"
            rows.append([
                str(n), system, ready,
                fmt_num(row["bus_bytes_per_s_per_node"]),
                f"{row['cpu_pct_per_node']:.2f}%",
                f"{row['rss_mb_mean']:.1f} / {row['rss_mb_max']:.1f}",
                _sockets(row),
                _detect(row),
                "n/a" if row.get("suspicions") is None else str(row["suspicions"]),
            ])  # fmt: skip
        b, r = _ok(size, "bloomcast"), _ok(size, "redis")
        ratio_rows.append(
            [str(n)] + [fmt_ratio(_ratio(_metric(b, k), _metric(r, k))) for k, _ in RATIO_KEYS]
        )
    growth_lines = []
    for system in SYSTEMS:
        parts = []
        for key, label in RATIO_KEYS[:3]:
            g = growth(result, system, key)
            if g is not None:
                parts.append(f"{label} x{g[2]:.2f}")
        g = growth(result, system, "bus_bytes_per_s_per_node")
        if g is not None:
            span = f"N = {g[0]} to N = {g[1]} (x{g[1] / g[0]:.1f} nodes)"
            growth_lines.append(f"- {system}, {span}: per node " + ", ".join(parts) + ".")
    header = ["N", "system", "ready s", "idle bus B/s per node", "idle CPU % per node",
              "RSS MB per node (mean / max)", "sockets per node", "detection s",
              "suspicions in the window"]  # fmt: skip
    timeout = plan["node_timeout_ms"]
    return "\n".join([
        f"Idle cost per node as the cluster grows, bloomcast (commit {result['commit']}, "
        f"`--node-timeout-ms {timeout}`) next to Redis Cluster "
        f"({result['versions'].get('redis-server (scale)', 'redis-server')}, "
        f"`cluster-node-timeout {timeout}`), real processes on this one machine. For each "
        "N the two systems run one after the other (bloomcast, then Redis) in the same "
        "run, so both see the same load from the other work on the machine.",
        "",
        "*ready*: first process start until every node reports the full cluster "
        "(bloomcast `cluster_known_nodes` = N and `cluster_filters_converged:1`; Redis "
        "`cluster_state:ok` and `cluster_known_nodes` = N; Redis is formed with CLUSTER "
        "MEET to every earlier node and ADDSLOTSRANGE, as in bench/redis_cluster.py); "
        "in brackets, when every bloomcast process first answered PING: the Python "
        "start-up of N processes on this machine's cores, which membership cannot "
        "shorten. "
        f"Then {plan['settle_s']:g} s to settle and a {plan['window_s']:g} s idle window "
        "(no clients, no polling): *idle bus B/s* is kernel `tcp_info` bytes_sent summed "
        "over every socket on a bus port (both ends, so both directions) / N / seconds; "
        "*CPU* is the time on CPU of every thread of every server process "
        "(`/proc/<pid>/task/<tid>/schedstat`, nanoseconds) / N; *RSS* "
        "is VmRSS at the end of the window. *detection*: kill -9 the last node, seconds "
        "until every live node's CLUSTER NODES flags it `fail` "
        f"(every live node polled every {plan['poll_s']:g} s). *suspicions*: "
        "`cluster_stats_suspicions` summed over the nodes, read just before and after the "
        "window (Redis does not count its PFAIL flags).",
        "",
        table(header, rows),
        "",
        "bloomcast / Redis (above 1: bloomcast costs more or takes longer):",
        "",
        table(["N", *[label for _, label in RATIO_KEYS]], ratio_rows),
        "",
        "Growth per node from the smallest to the largest N measured (flat would be "
        "x1.00; linear in N is the node ratio):",
        "",
        *growth_lines,
        "",
        "PUBLISH routed through the cluster: one subscriber on each of "
        f"{plan.get('subscriber_nodes', 10)} nodes, each on its own channel; node 0 "
        f"publishes {plan.get('publish_messages', 2000):,} messages round robin over them "
        "(pipelined, 100 at a time). *bus messages per PUBLISH*: "
        "`cluster_stats_messages_publish_sent` summed over every node / PUBLISH; the "
        "minimum is 1 (one remote node holds each channel's subscriber), Redis Cluster "
        "sends every PUBLISH to all N - 1 peers. *PUBLISH/s*: redis-benchmark on node 0 "
        f"({plan.get('rate_requests', 20000):,} requests, 50 clients, -P 1, best of "
        f"{plan.get('rate_runs', 1)}) to the first channel:",
        "",
        table(["N", "system", "delivered / published", "bus messages per PUBLISH",
               "node 0 PUBLISH/s"], publish_rows(result)),
        "",
        "SUBSCRIBE on node 0 once the cluster is formed (after the PUBLISH runs, before "
        "the kill): one connection, "
        f"{plan.get('subscribe_probes', 200):,} times SUBSCRIBE a channel never used "
        "before and UNSUBSCRIBE it, each reply awaited; milliseconds from sending the "
        "command to the last byte of its reply:",
        "",
        table(["N", "system", "probes", "SUBSCRIBE p50 ms", "SUBSCRIBE p99 ms",
               "SUBSCRIBE max ms", "UNSUBSCRIBE p50 / p99 ms"], subscribe_rows(result)),
        "",
        "Where forming the cluster goes (bloomcast): frames each node sent by type "
        "until ready, mean over the nodes (the largest in brackets; the seeds, nodes "
        "0 and 1, answer every joining MEET), handshakes that failed (timeouts) and "
        "suspicions. Per node each grows as N (two filters asked for and sent per "
        "peer, a MEET and a SESSION per link), not as N^2:",
        "",
        table(["N", "MEET", "PING", "PONG", "SESSION", "FILTER_REQUEST", "FILTER_FULL",
               "FAIL", "handshakes failed", "suspicions"], startup_rows(result)),
        "",
        f"![ready time, idle bus bytes/s and CPU, PUBLISH cost per node vs N]({PLOT})",
        "",
        f"Reproduce: `{cmd}` (N = 10, 50, 100, 200 takes about 30 minutes on 2 cores "
        "and 7 GB at N = 200: per N and system 25 s of settle and idle window, 16 to 23 s "
        "of failure detection at the 15 s node timeout, the PUBLISH runs, and forming, "
        "136 s for Redis at N = 200).",
    ])  # fmt: skip


def plot_scale(result: dict[str, Any], path: Path, cmd: str) -> Path | None:
    """Ready time, idle bus bytes/s and CPU % per node, and bus messages per
    PUBLISH vs N, both systems."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(2, 2, figsize=(11, 8))
    (rx, ax), (bx, px) = grid
    styles = {"bloomcast": dict(marker="o", linestyle="-"),
              "redis": dict(marker="s", linestyle="--")}  # fmt: skip
    drawn = False
    for system in SYSTEMS:
        pts = [(s["nodes"], _ok(s, system)) for s in result["sizes"]]
        good = [(n, r) for n, r in pts if r is not None]
        if not good:
            continue
        drawn = True
        ns = [n for n, _ in good]
        rx.plot(ns, [r["ready_s"] for _, r in good], label=system, **styles[system])
        ax.plot(ns, [r["bus_bytes_per_s_per_node"] for _, r in good], label=system,
                **styles[system])  # fmt: skip
        bx.plot(ns, [r["cpu_pct_per_node"] for _, r in good], label=system,
                **styles[system])  # fmt: skip
        pubs = [(n, r["publish"]) for n, r in good if r.get("publish")]
        if pubs:
            px.plot([n for n, _ in pubs], [p["bus_per_publish"] for _, p in pubs],
                    label=system, **styles[system])  # fmt: skip
    if not drawn:
        plt.close(fig)
        return None
    sizes = [s["nodes"] for s in result["sizes"]]
    for axis, label in ((rx, "ready s (all started at once)"),
                        (ax, "idle bus bytes/s per node (kernel tcp_info)"),
                        (bx, "idle CPU % per node (schedstat)"),
                        (px, "bus messages per PUBLISH (minimum 1)")):  # fmt: skip
        axis.set_xlabel("nodes N")
        axis.set_ylabel(label)
        axis.set_xticks(sizes)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend()
    timeout = result["plan"]["node_timeout_ms"]
    fig.suptitle(
        f"Clusters of N, node timeout {timeout} ms both systems, idle "
        f"{result['plan']['window_s']:g} s window; bloomcast {result['commit']} vs "
        f"{result['versions'].get('redis-server (scale)', 'Redis')}; `{cmd}`",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
