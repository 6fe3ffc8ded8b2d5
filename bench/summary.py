"""The summary of docs/benchmarks.md, generated from one ``bloomcast bench`` run
(issue 48): plain sentences first (where bloomcast wins and where it costs more,
by N and pipeline depth, from the ratios of that run), then the summary tables,
each figure read from benchmarks.json.

``bloomcast bench`` (``all``, the short parts) also takes here the two printed
measures the summary quotes: CPU per request on one node beside redis-server
(:func:`run_cpu_per_request`, bench/cpu_cost.py) and the latency of a PUBLISH
across nodes at a steady rate (:func:`run_forward_latency`,
bench/forward_latency.py), and writes the summary after its sections.

``uv run python -m bench.summary [--json docs/benchmarks.json] [--page
docs/benchmarks.md]`` renders the summary and the short parts' sections again
from a benchmarks.json, without a run (its short parts must come from one run,
``short_run``: the page names its commit).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.results import fmt_num, fmt_ratio, table
from bench.servers import NODE

HEADING = "Summary: against Redis Cluster and Valkey"
REDIS = "redis-server"
VALKEY = "valkey-server"
OFF = "bloomcast, visibility 0"
#: the short parts' sections, in page order: each names the summary's commit
SHORT_SECTIONS = (
    "single node",
    "cluster",
    "cluster: Zipf-popular channels",
    "convergence",
    "subscribe visibility",
    "faults",
    "hostile input",
)
#: the long parts, run only when named: each section names its own commit
LONG_SECTIONS = ("scale", "overload", "chaos")
#: a ratio within this of 1 is "about even"
EVEN = 0.05

# -- the two printed measures, run by ``bloomcast bench`` ----------------------------------


def run_cpu_per_request(quick: bool) -> dict[str, Any]:
    """bench.cpu_cost on one node: server CPU per PUBLISH (us) of bloomcast,
    redis-server and the uvloop floor, 0, 1, 10 and 100 subscribers, ``-P 1``
    and ``-P 16``."""
    from bench.cpu_cost import run_cpu_cost
    from bench.servers import bloomcast_version

    # quick: enough that each server reads a few 10 ms clock ticks (/proc/<pid>/stat)
    requests = {1: 20_000, 16: 100_000} if quick else {1: 60_000, 16: 300_000}
    subscribers = (0,) if quick else (0, 1, 10, 100)
    result = run_cpu_cost(requests, "PUBLISH", subscribers)
    result["requests"] = {str(p): n for p, n in requests.items()}
    result["versions"] = {"bloomcast": bloomcast_version()}
    return result


def run_forward_latency(quick: bool) -> dict[str, Any]:
    """bench.forward_latency: PUBLISH on one node to a subscriber on another at
    50, 500 and 2,000 PUBLISH/s (each reply awaited), bloomcast (2 nodes),
    Valkey and Redis Cluster (3 masters); quantiles in microseconds. ``quick``:
    bloomcast alone, one rate, half a second."""
    from bench.forward_latency import measure
    from bloomcast.testing.servers import redis_server_path

    rates = [200.0] if quick else [50.0, 500.0, 2000.0]
    seconds = 0.5 if quick else 3.0
    systems = [NODE] if quick else [NODE, VALKEY]  # --quick: that it runs, in seconds
    if not quick and redis_server_path() is not None:
        systems.append(REDIS)
    from bench.servers import bloomcast_version

    return {
        "rates": rates,
        "seconds": seconds,
        "systems": {s: measure(s, 0, rates, seconds) for s in systems},
        "versions": {"bloomcast": bloomcast_version()},
    }


def _cpu_ratio(row: dict[str, Any]) -> float | None:
    """bloomcast / redis-server CPU per request; None when redis-server's
    measured nothing (a ``--quick`` run's few requests can read 0 clock ticks)."""
    return row[NODE] / row[REDIS] if row[REDIS] else None


def cpu_cost_markdown(result: dict[str, Any]) -> str:
    """The single node section's CPU table: a row per ``-P``, a column per
    subscriber count."""
    from bench.cpu_cost import FLOOR

    subs = sorted({r["subscribers"] for r in result["rows"]})
    rows = []
    for p in sorted({r["pipeline"] for r in result["rows"]}):
        row = [str(p)]
        for n in subs:
            r = next(
                (r for r in result["rows"] if (r["pipeline"], r["subscribers"]) == (p, n)), None
            )
            if r is None:
                row.append("-")
                continue
            floor = f" / {r[FLOOR]:.2f}" if r.get(FLOOR) is not None else ""
            row.append(f"{r[NODE]:.2f} / {r[REDIS]:.2f}{floor} ({fmt_ratio(_cpu_ratio(r))})")
        rows.append(row)
    req = result.get("requests", {})
    return "\n".join(
        [
            "CPU per request (`bench.cpu_cost`): user + system time of the server process "
            "(`/proc/<pid>/stat`) over redis-benchmark PUBLISH `-c 50`, "
            + ", ".join(f"`-n {n}` at `-P {p}`" for p, n in req.items())
            + "; microseconds per request, bloomcast / redis-server / a uvloop server that "
            "only answers each request (the event loop's own floor; no subscribers), "
            "bloomcast / redis-server in brackets:",
            "",
            table(["-P", *[_subs(n) for n in subs]], rows),
        ]
    )


def forward_latency_markdown(result: dict[str, Any]) -> str:
    """The cluster section's latency table (milliseconds)."""
    systems = [s for s in (NODE, VALKEY, REDIS) if s in result["systems"]]
    rows = []
    for i, rate in enumerate(result["rates"]):
        row = [fmt_num(rate)]
        for s in systems:
            r = result["systems"][s][i]
            row.append(_quantiles_ms(r) + f" ({r['received']}/{r['sent']})")
        rows.append(row)
    return "\n".join(
        [
            "Latency across nodes (`bench.forward_latency`): PUBLISH on one node at a steady "
            "rate, each reply awaited, to a subscriber on another; "
            f"{result['seconds']:g} s per rate after a warm-up second; bloomcast 2 nodes, "
            "Valkey and Redis Cluster 3 masters; p50 / p99 / max in ms (received / sent):",
            "",
            table(["PUBLISH/s", *[_name(s) for s in systems]], rows),
        ]
    )


def _quantiles_ms(r: dict[str, Any]) -> str:
    return " / ".join(f"{r[q] / 1e3:.2f}" for q in ("p50", "p99", "max"))


def _name(system: str) -> str:
    return {REDIS: "Redis Cluster", VALKEY: "Valkey"}.get(system, system)


# -- the summary --------------------------------------------------------------------------

#: json keys of the short parts whose figures the summary reads
SHORT_KEYS = (
    "single_node",
    "cpu_cost",
    "cluster",
    "forward_latency",
    "cluster_zipf",
    "convergence",
    "visibility",
    "faults",
    "hostile",
)


def short_run_commit(data: dict[str, Any]) -> str:
    """``bloomcast <commit>`` of the run behind the summary; ValueError when a
    short part in ``data`` was taken by another commit."""
    run = data.get("short_run") or data["meta"]
    commit = str(run["versions"]["bloomcast"])
    for key in SHORT_KEYS:
        other = data.get(key, {}).get("versions", {}).get("bloomcast")
        if other is not None and other != commit:
            raise ValueError(f"benchmarks.json: {key} comes from {other}, the run from {commit}")
    return commit


def summary_markdown(data: dict[str, Any], page: str = "") -> str:
    """The summary section's body from ``data`` (benchmarks.json of one
    ``bloomcast bench`` run); ``page``: the page, for the long parts' commits."""
    run = data.get("short_run") or data["meta"]
    commit = short_run_commit(data)
    load = ", ".join(f"{x:.2f}" for x in run["machine"]["loadavg"])
    wins: list[str] = []
    even: list[str] = []
    costs: list[str] = []
    for claim in _claims(data):
        (wins, even, costs)[claim[0]].append(claim[1])
    parts = [
        f"From one run: `{run['command']}` at **{commit}**, {run['date']} "
        f"({run['machine']['cores']} cores shared with other work, load average at the end "
        f"{load}). Every figure in this summary and in the sections *single node*, *cluster*, "
        "*cluster: Zipf-popular channels*, *convergence*, *subscribe visibility*, *faults* "
        "and *hostile input* comes from that run; the command writes this summary from its "
        "benchmarks.json. Ratios are bloomcast / anchor in the same run.",
        "",
        "**Where bloomcast wins:**",
        *[f"- {w}" for w in wins or ["nowhere in this run."]],
        "",
        "**Where it costs more:**",
        *[f"- {c}" for c in costs or ["nowhere in this run."]],
    ]
    if even:
        parts += ["", "**About even** (within 5%): " + "; ".join(even) + "."]
    # the latency table is the cluster section's (the sentences above quote it)
    for render in (_cluster_table, _single_table, _subscribe_table):
        block = render(data)
        if block:
            parts += ["", block]
    long_runs = _long_runs(page)
    if long_runs:
        parts += ["", long_runs]
    return "\n".join(parts)


# -- sentences -----------------------------------------------------------------------------

Claim = tuple[int, str]


def _cls(ratio: float, higher_better: bool) -> int:
    """0: bloomcast wins, 1: about even, 2: costs more."""
    if abs(ratio - 1) <= EVEN:
        return 1
    return 0 if (ratio > 1) == higher_better else 2


def _grouped(
    items: Iterable[tuple[str, float, str]],
    higher_better: bool,
    what: str,
    bracket: str = " ({})",
) -> list[Claim]:
    """``items``: (label such as ``3`` for N = 3, ratio, bracket text); one
    claim per class (wins, about even, costs more) with its items in order:
    ``what`` with ``{labels}`` and ``{ratios}`` filled, then ``bracket`` with
    the bracket texts (when there are any)."""
    by: dict[int, list[tuple[str, float, str]]] = {}
    for item in items:
        by.setdefault(_cls(item[1], higher_better), []).append(item)
    claims = []
    for cls, group in sorted(by.items()):
        labels = " / ".join(g[0] for g in group)
        ratios = " / ".join(fmt_ratio(g[1]) for g in group)
        brackets = [g[2] for g in group if g[2]]
        tail = bracket.format(" / ".join(brackets)) if brackets else ""
        text = what.format(labels=labels, ratios=ratios)
        if labels == "1":  # one subscriber, one node
            text = text.replace(" 1 subscribers", " 1 subscriber").replace(" 1 nodes", " 1 node")
        claims.append((cls, text + tail))
    return claims


def _anchor(results: dict[str, Any]) -> str | None:
    return REDIS if REDIS in results else (VALKEY if VALKEY in results else None)


def _claims(data: dict[str, Any]) -> list[Claim]:
    claims: list[Claim] = []
    for key, label in (("cluster", "each channel on one node"),
                       ("cluster_zipf", "Zipf-popular channels and patterns")):  # fmt: skip
        sizes = data.get(key, {}).get("sizes", [])
        for p in ("P1", "P16"):
            items = []
            for size in sizes:
                anchor = _anchor(size["ratios"])
                if anchor is None:
                    continue
                r = size["ratios"][anchor].get(f"throughput_{p}")
                v = size["ratios"].get(VALKEY, {}).get(f"throughput_{p}")
                if r is not None:
                    bracket = fmt_ratio(v) if anchor == REDIS and v else ""
                    items.append((str(size["nodes"]), r, bracket))
            anchor_name = "Redis Cluster" if sizes and REDIS in sizes[0]["ratios"] else "Valkey"
            claims += _grouped(
                items,
                True,
                f"`-P {p[1:]}`, {label}, on {{labels}} nodes: {{ratios}} {anchor_name}'s PUBLISH/s",
                " (Valkey's {})",
            )
    claims += _bus_claims(data)
    claims += _single_claims(data)
    claims += _latency_claims(data)
    claims += _subscribe_claims(data)
    claims += _fault_claims(data)
    return claims


def _bus_claims(data: dict[str, Any]) -> list[Claim]:
    claims: list[Claim] = []
    for key, label in (("cluster", "each channel on one node"),
                       ("cluster_zipf", "Zipf-popular")):  # fmt: skip
        sizes = [s for s in data.get(key, {}).get("sizes", []) if _anchor(s["ratios"])]
        if not sizes:
            continue
        items = [(str(s["nodes"]), s["ratios"][_anchor(s["ratios"]) or ""]["msgs_per_publish"],
                  "") for s in sizes]  # fmt: skip
        bytes_ = " / ".join(
            fmt_ratio(s["ratios"][_anchor(s["ratios"]) or ""].get("bus_bytes_per_publish"))
            for s in sizes
        )
        for cls, text in _grouped(
            items, False, f"bus messages per PUBLISH, {label}, on {{labels}} nodes: {{ratios}}"
        ):
            anchor = "Redis Cluster's" if REDIS in sizes[0]["ratios"] else "Valkey's"
            claims.append((cls, f"{text} {anchor} (bytes {bytes_})"))
    return claims


def _single_claims(data: dict[str, Any]) -> list[Claim]:
    claims: list[Claim] = []
    single = data.get("single_node")
    if single:
        for p in (1, 16):
            items = [
                (str(c["subscribers"]), c["ratios"][REDIS], "")
                for c in single["publish"]
                if c["pipeline"] == p and REDIS in c["ratios"]
            ]
            claims += _grouped(
                items,
                True,
                f"one node, `-P {p}`, {{labels}} subscribers: {{ratios}} redis-server's PUBLISH/s",
            )
        fan = single["fanout"]
        if REDIS in fan["ratios"]:
            claims += _grouped(
                [(str(fan["subscribers"]), fan["ratios"][REDIS], "")],
                True,
                "one node, fan-out to {labels} subscribers of one channel: {ratios} "
                "redis-server's messages delivered per second",
            )
    cpu = data.get("cpu_cost")
    if cpu:
        for p in (1, 16):
            items = [
                (str(r["subscribers"]), r[NODE] / r[REDIS], "")
                for r in cpu["rows"]
                if r["pipeline"] == p and r[REDIS]
            ]
            claims += _grouped(
                items,
                False,
                f"one node, `-P {p}`, {{labels}} subscribers: {{ratios}} redis-server's CPU "
                "per PUBLISH",
            )
    hostile = data.get("hostile", {}).get("servers", {})
    if NODE in hostile and REDIS in hostile:
        node = _median([c["rss_idle_mb"] for c in hostile[NODE].values() if "rss_idle_mb" in c])
        redis = _median([c["rss_idle_mb"] for c in hostile[REDIS].values() if "rss_idle_mb" in c])
        if node and redis:
            claims += _grouped(
                [("", node / redis, f"{node:.0f} MB against {redis:.0f} MB")],
                False,
                "memory of an idle node (RSS, median over the hostile cases' fresh "
                "servers){labels}: {ratios} redis-server's",
            )
    return claims


def _subs(n: int) -> str:
    return f"{n} subscriber" + ("" if n == 1 else "s")


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    return values[len(values) // 2] if values else None


def _latency_claims(data: dict[str, Any]) -> list[Claim]:
    lat = data.get("forward_latency")
    if not lat:
        return []
    anchor = _anchor(lat["systems"])
    if anchor is None:
        return []
    claims: list[Claim] = []
    for q in ("p50", "p99"):
        items = []
        for i, rate in enumerate(lat["rates"]):
            node, other = lat["systems"][NODE][i][q], lat["systems"][anchor][i][q]
            if node == node and other == other and other > 0:  # not NaN
                items.append(
                    (fmt_num(rate), node / other, f"{node / 1e3:.2f} ms against {other / 1e3:.2f}")
                )
        claims += _grouped(
            items,
            False,
            f"latency of a PUBLISH to a subscriber on another node, {q}, at {{labels}} "
            f"PUBLISH/s: {{ratios}} {_name(anchor)}'s",
        )
    return claims


def _subscribe_claims(data: dict[str, Any]) -> list[Claim]:
    claims: list[Claim] = []
    vis = data.get("visibility", {}).get("sizes", [])
    if vis:
        anchor = _anchor(vis[0]["results"]) or REDIS
        rows = [s for s in vis if NODE in s["results"] and anchor in s["results"]]

        def items(
            system: str, field: str, digits: int = 2, unit: str = " ms"
        ) -> list[tuple[str, float, str]]:
            return [
                (
                    str(s["nodes"]),
                    s["results"][system][field] / s["results"][anchor][field],
                    f"{s['results'][system][field]:,.{digits}f}{unit} against "
                    f"{s['results'][anchor][field]:,.{digits}f}",
                )
                for s in rows
                if system in s["results"]
            ]

        claims += _grouped(
            items(NODE, "subscribe_p50_ms"),
            False,
            "SUBSCRIBE reply p50 (subscribe visibility on, the default) on {labels} nodes: "
            f"{{ratios}} {_name(anchor)}'s",
        )
        claims += _grouped(
            items(OFF, "subscribe_p50_ms"),
            False,
            "SUBSCRIBE reply p50 with `--subscribe-visibility-timeout 0` on {labels} nodes: "
            f"{{ratios}} {_name(anchor)}'s",
        )
        claims += _grouped(
            items(NODE, "churn_per_s", 0, ""),
            True,
            "SUBSCRIBE + UNSUBSCRIBE cycles per second on one connection, {labels} nodes: "
            f"{{ratios}} {_name(anchor)}'s",
        )
    conv = data.get("convergence", {}).get("sizes", [])
    if conv:
        anchor = _anchor(conv[0]["results"]) or REDIS
        claims += _grouped(
            [
                (
                    str(s["nodes"]),
                    s["results"][NODE]["p99_ms"] / s["results"][anchor]["p99_ms"],
                    f"{s['results'][NODE]['p99_ms']:.2f} ms against "
                    f"{s['results'][anchor]['p99_ms']:.2f}",
                )
                for s in conv
                if NODE in s["results"] and anchor in s["results"]
            ],
            False,
            "from a SUBSCRIBE's reply to the first delivery of a PUBLISH looping on another "
            f"node, p99, on {{labels}} nodes: {{ratios}} {_name(anchor)}'s",
        )
    return claims


def _fault_totals(row: dict[str, Any]) -> tuple[int, int, int]:
    subs = row["subscribers"].values()
    return (
        sum(s["expected"] for s in subs),
        sum(s["delivered"] for s in subs),
        sum(s["lost"] for s in subs),
    )


def _fault_claims(data: dict[str, Any]) -> list[Claim]:
    claims: list[Claim] = []
    faults = data.get("faults")
    if faults:
        node, redis = faults["results"]["bloomcast"], faults["results"]["redis"]
        owed = sum(_fault_totals(node[s])[0] for s in faults["scenarios"])
        got = sum(_fault_totals(node[s])[1] for s in faults["scenarios"])
        got_r = sum(_fault_totals(redis[s])[1] for s in faults["scenarios"])
        counted = all(
            node[s]["counted"] is not None
            and all(v["lost"] == node[s]["counted"] for v in node[s]["subscribers"].values())
            for s in faults["scenarios"]
        )
        claims += _grouped(
            [("", got / max(1, got_r), f"{got:,} against {got_r:,} of {owed:,} owed")],
            True,
            "bus link faults (" + ", ".join(faults["scenarios"]) + "){labels}: delivered "
            "{ratios} Redis Cluster's"
            + (", every loss counted (Redis counts none)" if counted else ""),
        )
    hostile = data.get("hostile", {}).get("servers", {})
    if NODE in hostile and REDIS in hostile:
        node_w = max(c["worst_ping"] for c in hostile[NODE].values()) * 1e3
        redis_w = max(c["worst_ping"] for c in hostile[REDIS].values()) * 1e3
        worse = sum(
            1
            for label, c in hostile[NODE].items()
            if label in hostile[REDIS] and c["worst_ping"] > hostile[REDIS][label]["worst_ping"]
        )
        claims += _grouped(
            [("", node_w / redis_w, f"{node_w:,.1f} ms against {redis_w:,.1f} ms")],
            False,
            f"hostile input, {len(hostile[NODE])} cases{{labels}}: another client's worst "
            f"PING wait {{ratios}} redis-server's (longer than redis-server's in {worse})",
        )
    return claims


# -- tables ---------------------------------------------------------------------------------


def _ratio_pair(ratios: dict[str, Any], field: str) -> str:
    redis, valkey = ratios.get(REDIS, {}), ratios.get(VALKEY, {})
    return f"{fmt_ratio(redis.get(field))}; {fmt_ratio(valkey.get(field))}"


def _bus_cells(res: dict[str, Any], field: str, digits: int) -> str:
    return " / ".join(
        fmt_num(res[s]["bus"][field], digits) if s in res else "-" for s in (NODE, VALKEY, REDIS)
    )


def _cluster_table(data: dict[str, Any]) -> str:
    uniform = {s["nodes"]: s for s in data.get("cluster", {}).get("sizes", [])}
    zipf = {s["nodes"]: s for s in data.get("cluster_zipf", {}).get("sizes", [])}
    rows = []
    for n in sorted(set(uniform) | set(zipf)):
        u, z = uniform.get(n), zipf.get(n)
        rows.append(
            [
                str(n),
                _bus_cells(u["results"], "msgs_per_publish", 2) if u else "-",
                _bus_cells(u["results"], "bus_bytes_per_publish", 0) if u else "-",
                _ratio_pair(u["ratios"], "throughput_P1") if u else "-",
                _ratio_pair(u["ratios"], "throughput_P16") if u else "-",
                _bus_cells(z["results"], "msgs_per_publish", 2) if z else "-",
                _ratio_pair(z["ratios"], "throughput_P1") if z else "-",
                _ratio_pair(z["ratios"], "throughput_P16") if z else "-",
            ]
        )
    if not rows:
        return ""
    return "\n".join(
        [
            "**A cluster of N nodes** (*cluster* and *cluster: Zipf-popular channels* below): "
            "every node publishing, 50 clients in all; Redis Cluster and Valkey broadcast "
            "every PUBLISH to all N - 1 peers, bloomcast forwards it to the nodes whose Bloom "
            "filters hold the channel. Each channel on one node, then Zipf-popular channels "
            "and patterns:",
            "",
            table(
                [
                    "N",
                    "bus messages per PUBLISH: bloomcast / Valkey / Redis Cluster",
                    "bus bytes per PUBLISH: same order",
                    "PUBLISH/s `-P 1` vs Redis Cluster; vs Valkey",
                    "PUBLISH/s `-P 16` vs Redis Cluster; vs Valkey",
                    "Zipf: bus messages per PUBLISH",
                    "Zipf: PUBLISH/s `-P 1`",
                    "Zipf: PUBLISH/s `-P 16`",
                ],
                rows,
            ),
            "",
            "![bus messages and bus bytes per PUBLISH against N, bloomcast, Valkey and "
            "Redis Cluster](cluster_bus_messages.png)",
        ]
    )


def _single_table(data: dict[str, Any]) -> str:
    single = data.get("single_node")
    cpu = {(r["subscribers"], r["pipeline"]): r for r in data.get("cpu_cost", {}).get("rows", [])}
    rps = {(c["subscribers"], c["pipeline"]): c for c in single["publish"]} if single else {}
    if not rps and not cpu:
        return ""

    def rps_cell(key: tuple[int, int]) -> str:
        c = rps.get(key)
        if c is None:
            return "-"
        return f"{fmt_ratio(c['ratios'].get(REDIS))} ({fmt_ratio(c['ratios'].get(VALKEY))})"

    def cpu_cell(key: tuple[int, int]) -> str:
        r = cpu.get(key)
        if r is None:
            return "-"
        return f"{fmt_ratio(_cpu_ratio(r))} ({r[NODE]:.2f} / {r[REDIS]:.2f})"

    rows = [
        [str(n), rps_cell((n, 1)), cpu_cell((n, 1)), rps_cell((n, 16)), cpu_cell((n, 16))]
        for n in sorted({k[0] for k in (*rps, *cpu)})
    ]
    if single:
        fan = single["fanout"]
        rows.append(
            [
                f"fan-out: one channel, {fan['subscribers']} subscribers, messages delivered/s "
                f"(`-P {fan['pipeline']}`)",
                "-",
                "-",
                f"{fmt_ratio(fan['ratios'].get(REDIS))} ({fmt_ratio(fan['ratios'].get(VALKEY))})",
                "-",
            ]
        )
    return "\n".join(
        [
            "**One node** (*single node* below): redis-benchmark PUBLISH, 50 clients, "
            "subscribers draining on raw sockets, against a lone redis-server and "
            "valkey-server; CPU per request from /proc (`bench.cpu_cost`; us: bloomcast / "
            "redis-server).",
            "",
            table(
                [
                    "subscribers",
                    "`-P 1` PUBLISH/s vs redis-server (vs Valkey)",
                    "`-P 1` CPU per request vs redis-server",
                    "`-P 16` PUBLISH/s",
                    "`-P 16` CPU per request",
                ],
                rows,
            ),
        ]
    )


def _subscribe_table(data: dict[str, Any]) -> str:
    vis = {s["nodes"]: s["results"] for s in data.get("visibility", {}).get("sizes", [])}
    conv = {s["nodes"]: s["results"] for s in data.get("convergence", {}).get("sizes", [])}
    if not vis and not conv:
        return ""

    def cells(
        results: dict[str, Any] | None,
        systems: tuple[str, ...],
        field: str,
        fmt: Callable[[float], str],
    ) -> str:
        if not results:
            return "-"
        return " / ".join(fmt(results[s][field]) if s in results else "-" for s in systems)

    vsys = (NODE, OFF, REDIS, VALKEY)
    rows = [
        [
            str(n),
            cells(vis.get(n), vsys, "subscribe_p50_ms", lambda v: f"{v:.2f}"),
            cells(vis.get(n), vsys, "churn_per_s", lambda v: fmt_num(v)),
            cells(conv.get(n), (NODE, REDIS, VALKEY), "p99_ms", lambda v: f"{v:.2f}"),
        ]
        for n in sorted(set(vis) | set(conv))
    ]
    return "\n".join(
        [
            "**SUBSCRIBE** (*subscribe visibility* and *convergence* below): a bloomcast "
            "SUBSCRIBE is confirmed once every peer holds the filter change (subscribe "
            "visibility, on by default; `--subscribe-visibility-timeout 0` confirms at once).",
            "",
            table(
                [
                    "N",
                    "SUBSCRIBE reply p50 ms: bloomcast / visibility 0 / Redis Cluster / Valkey",
                    "SUBSCRIBE + UNSUBSCRIBE cycles/s, one connection: same order",
                    "SUBSCRIBE to first remote delivery p99 ms: bloomcast / Redis Cluster / Valkey",
                ],
                rows,
            ),
        ]
    )


def _long_runs(page: str) -> str:
    found = []
    for heading in LONG_SECTIONS:
        m = re.search(
            rf"^## {re.escape(heading)}\n\nCommand: `([^`]+)` \(([^,]+), (bloomcast \w+)",
            page,
            re.M,
        )
        if m:
            found.append(f"*{heading}* (`{m.group(1)}`, {m.group(3)}, {m.group(2)[:10]})")
    if not found:
        return ""
    return (
        "The long parts run only when named and keep their own runs: "
        + "; ".join(found)
        + ". Each section names its run at its top."
    )


def rewrite(data: dict[str, Any], page: Path) -> None:
    """The summary and the short parts' sections of ``page`` from ``data`` (a
    benchmarks.json holding one ``bloomcast bench`` run: ``short_run``), the
    cluster plot redrawn beside it; every other section left as it is.
    ValueError when the json has no such run or mixes commits."""
    from bench.bench_command import how_taken, short_sections
    from bench.results import update_markdown

    run = data.get("short_run")
    if run is None:
        raise ValueError("benchmarks.json holds no `bloomcast bench` (all) run: no short_run")
    short_run_commit(data)
    results = {key: data[key] for key in SHORT_KEYS if key in data}
    sections = {"How these numbers were taken": how_taken(run, data)}
    sections.update(short_sections(results, run, page.parent))
    sections[HEADING] = summary_markdown(data, page.read_text() if page.exists() else "")
    update_markdown(page, sections)


def main(argv: list[str] | None = None) -> int:
    """Render the summary and the short parts' sections again from a
    benchmarks.json, without a run."""
    import json

    ap = argparse.ArgumentParser(prog="python -m bench.summary", description=__doc__)
    ap.add_argument("--json", default="docs/benchmarks.json")
    ap.add_argument("--page", default="docs/benchmarks.md")
    args = ap.parse_args(argv)
    data = json.loads(Path(args.json).read_text())
    page = Path(args.page)
    try:
        rewrite(data, page)
    except ValueError as exc:
        print(f"bench.summary: {exc}", file=sys.stderr)
        return 2
    print(f"bench.summary: wrote the summary and the short parts of {page} from {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
