"""The demo's outputs for people: the console summary (rich) and the report
behind it.

:func:`build_report` gathers every figure once (checks, delivery ledger, bus
accounting against broadcast and the exact-interest minimum, false positives
against the filters' theory, latencies, the Spark views) into the dict that
becomes ``report.json``; :func:`print_summary` only formats that dict, so the
console and the file cannot disagree.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from bloomcast.demo.checks import Check, counter_delta, ledger, run_checks
from bloomcast.demo.drive import VISIBILITY_TIMEOUT_MS, DriveResult
from bloomcast.demo.report import percentiles
from bloomcast.demo.stats_view import TRENDING_MIN_SHARE

if TYPE_CHECKING:
    from rich.console import Console

    from bloomcast.demo.workload import Workload


def _ms(p: dict[str, Any]) -> str:
    if not p.get("count"):
        return "n/a"
    return f"p50 {p['p50']:.2f} ms, p99 {p['p99']:.2f} ms (n={p['count']})"


def print_summary(console: Console, report: dict[str, Any]) -> None:
    from rich.table import Table

    d, bus, fp, lat = (report[k] for k in ("deliveries", "bus", "false_positives", "latency_ms"))
    fills = ", ".join(f"{f['fill_ratio']:.4f}" for f in fp.get("node_filters", [])) or "n/a"
    console.rule("[bold]bloomcast demo: results")
    console.print(
        f"messages delivered: [bold]{d['delivered']}[/] of {d['expected']} expected "
        f"(lost {d['lost']}, duplicated {d['duplicated']}, unexpected {d['unexpected']})"
    )
    console.print(
        f"bus PUBLISH messages: [bold]{bus['publish_sent']}[/] for {bus['publishes']} PUBLISH "
        f"({bus['per_publish']:.3f} per PUBLISH); Redis Cluster's broadcast would send "
        f"{bus['broadcast']} ({report['config']['nodes'] - 1} per PUBLISH): "
        f"[bold]{bus['ratio_vs_broadcast']:.3f}x[/] of broadcast, "
        f"{bus['broadcast'] / max(1, bus['publish_sent']):.2f}x fewer; "
        f"exact-interest minimum {bus['exact_minimum']}"
    )
    console.print(
        f"false-positive forwards: observed [bold]{fp['observed']}[/]; theory "
        f"{fp['expected_total']:.3g} = {fp['expected_prefix']} pattern-prefix forwards "
        f"+ {fp['expected_bloom']:.3g} Bloom false positives ({fp['trials']} PUBLISH routed "
        f"past peers without a receiver; filter fill {fills})"
    )
    console.print(f"subscribe-to-remote-delivery delay: {_ms(lat['subscribe_to_remote_delivery'])}")
    console.print(f"  of which SUBSCRIBE confirmation: {_ms(lat['subscribe_confirmation'])}")
    if lat["probes_message_before_confirmation"]:
        console.print(
            f"[yellow]warning: in {lat['probes_message_before_confirmation']} probe(s) a message "
            "arrived before the SUBSCRIBE confirmation (Redis confirms first)[/]"
        )
    console.print(f"publish-to-delivery latency: {_ms(lat['publish_to_delivery'])}")
    stats = report.get("stats") or {}
    if stats.get("hot_channels"):
        for key, title in (
            ("hot_channels", "hot channels"),
            ("trending", f"trending channels (>= {TRENDING_MIN_SHARE:.0%} of recent traffic)"),
            ("false_positive_rate", "per-node false-positive rate"),
            ("forwards", "forwards sent vs saved (decayed)"),
        ):
            rows = stats.get(key) or []
            if not rows:
                continue
            table = Table(title=f"{title} — Spark {stats.get(key + '_dist', '')}")
            cols = list(rows[0])
            for i, c in enumerate(cols):
                table.add_column(c, justify="left" if i == 0 else "right")
            for r in rows:
                table.add_row(
                    *(
                        v if isinstance(v, str) else ("inf" if v is None else f"{v:.4g}")
                        for v in r.values()
                    )
                )
            console.print(table)
    table = Table(title="checks")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail")
    for name, c in report["checks"].items():
        verdict = "[yellow]skipped[/]" if c.get("skipped") else "[green]ok[/]"
        table.add_row(name, verdict if c["ok"] else "[red]FAILED[/]", c["detail"])
    console.print(table)


def build_report(
    args: argparse.Namespace,
    workload: Workload,
    result: DriveResult,
    stats: dict[str, Any],
    checks: dict[str, Check],
    alive: list[bool],
) -> dict[str, Any]:
    """The report (layout in :mod:`bloomcast.demo.report`): the verdict of every
    check (``checks``: extra ones, e.g. the Spark job's) and the figures behind it."""
    v, rt = result.verify, result.routing
    delta = counter_delta(result)
    sent = delta["cluster_stats_messages_publish_sent"]
    received = delta["cluster_stats_messages_publish_received"]
    fp = delta["cluster_stats_false_positives_received"]
    all_checks = run_checks(result, alive)
    all_checks.update(checks)
    return {
        "ok": all(c.ok for c in all_checks.values()),
        "checks": {k: asdict(c) for k, c in all_checks.items()},
        "config": {
            "nodes": args.nodes,
            "seconds": args.duration,
            "seed": args.seed,
            "subscribers": len(workload.subscribers),
            "phases": len(workload.phases),
            "publishes": workload.total_publishes(),
            "rate": args.rate,
            "subscribe_visibility_timeout_ms": VISIBILITY_TIMEOUT_MS,
            "workload": asdict(workload.spec),
        },
        "deliveries": ledger(v),
        "bus": {
            "publishes": rt.publishes,
            "publish_sent": sent,
            "publish_received": received,
            "per_publish": sent / rt.publishes if rt.publishes else 0.0,
            "broadcast": rt.broadcast,
            "exact_minimum": rt.exact_minimum,
            "ratio_vs_broadcast": sent / rt.broadcast if rt.broadcast else 0.0,
            "suppressed": delta["cluster_stats_publish_suppressed"],
            "filter_deltas_sent": delta["cluster_stats_filter_deltas_sent"],
            "filter_resizes": delta["cluster_stats_filter_resizes"],
        },
        "false_positives": {
            "observed": fp,
            "expected_prefix": rt.prefix_forwards,
            # sum over PUBLISH of each uninterested peer's (X/m)^k, X/m read from the node
            "expected_bloom": result.bloom_fp_from_fill,
            # the same with (1 - e^(-kn/m))^k, n = the peer's distinct channels, at the
            # configured first filter size
            "expected_bloom_formula": rt.bloom_fp_expected,
            "expected_total": rt.prefix_forwards + result.bloom_fp_from_fill,
            "trials": sum(rt.exposure.values()),
            "node_filters": result.filters,
        },
        "latency_ms": {
            "publish_to_delivery": percentiles(v.latencies_ms),
            "subscribe_to_remote_delivery": percentiles(result.probe_total_ms),
            "subscribe_confirmation": percentiles(result.probe_confirm_ms),
            "confirmation_to_remote_delivery": percentiles(result.probe_after_confirm_ms),
            "probes_message_before_confirmation": result.probe_order_violations,
        },
        "workload": {
            "seconds": round(result.workload_seconds, 2),
            "top_channels": result.channel_counts.most_common(10),
        },
        # BLOOMCAST.HOTCHANNELS CLUSTER at the end: name, live 1 m PUBLISH/s, the
        # exact oracle's, the stated error (the "live hot channels" check)
        "hot_channels_live": [
            [name, rate, result.exact_rate(name), err] for name, rate, err in result.hot_live
        ],
        "timeline": result.timeline,
        "stats": stats,
    }
