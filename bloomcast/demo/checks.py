"""The demo's verdict: the pass/fail checks and the delivery ledger.

Everything the demo claims about the product is a :class:`Check` here, judged
from what the driver recorded (:class:`bloomcast.demo.drive.DriveResult`) and
from the nodes' own counters: every expected message delivered exactly once
and nothing else (the ledger: lost, duplicated, unexpected), PUBLISH replies
equal to the local receivers, fewer bus messages than Redis Cluster's
broadcast, bus accounting that adds up to the exact-interest minimum plus the
false positives, no visibility timeouts, no bus loss, every probe delivered,
every node still up, the live cluster-wide hot channels against the exact
oracle, and the Spark job's output. Kept apart from the printing
so the report and the summary show the same verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from bloomcast.demo.drive import CONFIRM_TIMEOUT, SUMMED_COUNTERS, DriveResult


@dataclass
class Check:
    ok: bool
    detail: str


def counter_delta(result: DriveResult) -> dict[str, int]:
    """How much each of :data:`SUMMED_COUNTERS` grew during the workload (all nodes)."""
    before, after = result.counters_before, result.counters_after
    return {k: after[k] - before[k] for k in SUMMED_COUNTERS}


def ledger(v: Any) -> dict[str, Any]:
    """The delivery ledger of a ``VerifyResult``: expected against what arrived."""
    return {
        "expected": v.expected,
        "delivered": v.delivered,
        "lost": v.lost,
        "duplicated": v.duplicated,
        "unexpected": v.unexpected,
        "examples": v.examples,
    }


def run_checks(result: DriveResult, alive: list[bool]) -> dict[str, Check]:
    """Every check of the cluster run (the Spark job's is :func:`spark_check`)."""
    v, rt = result.verify, result.routing
    delta = counter_delta(result)
    sent = delta["cluster_stats_messages_publish_sent"]
    received = delta["cluster_stats_messages_publish_received"]
    fp = delta["cluster_stats_false_positives_received"]
    return {
        "deliveries": Check(
            v.ok,
            f"{v.delivered}/{v.expected} delivered, lost {v.lost}, duplicated {v.duplicated}, "
            f"unexpected {v.unexpected}" + (f"; e.g. {v.examples[:3]}" if v.examples else ""),
        ),
        "PUBLISH replies": Check(
            result.reply_mismatches == 0,
            f"{result.reply_mismatches} replies differ from the local receiver count"
            + (f"; e.g. {result.reply_examples[:2]}" if result.reply_examples else ""),
        ),
        "fewer bus messages than broadcast": Check(
            sent < rt.broadcast, f"{sent} bus PUBLISH messages vs broadcast {rt.broadcast}"
        ),
        "bus accounting": Check(
            received == sent and sent == rt.exact_minimum + fp,
            f"sent {sent} = received {received} = exact minimum {rt.exact_minimum} "
            f"+ false positives {fp}",
        ),
        "subscribe visibility": Check(
            delta["cluster_subscribe_visibility_timeouts"] == 0,
            f"{delta['cluster_subscribe_visibility_waits']} waits, "
            f"{delta['cluster_subscribe_visibility_timeouts']} timeouts",
        ),
        "no bus loss": Check(
            delta["cluster_stats_publish_lost"] == 0
            and delta["cluster_stats_sequence_gaps"] == 0
            and delta["cluster_stats_publish_held_no_link"] == 0,
            f"{delta['cluster_stats_publish_lost']} lost, "
            f"{delta['cluster_stats_sequence_gaps']} sequence gaps, "
            f"{delta['cluster_stats_publish_held_no_link']} held for want of a link",
        ),
        "subscribe-to-remote-delivery probes": Check(
            result.probe_failures == 0,
            f"{len(result.probe_total_ms)} delivered, {result.probe_failures} not within "
            f"{CONFIRM_TIMEOUT:g}s",
        ),
        "nodes stayed up": Check(all(alive), f"{sum(alive)}/{len(alive)} alive at the end"),
        "live hot channels (1 m)": hot_check(result),
    }


#: what a live rate may differ from the oracle's beyond the stated error: the
#: clocks read a few milliseconds apart (1 m decay: ~1.2 % a second)
HOT_SLACK = 0.01


def hot_check(result: DriveResult, top: int = 10) -> Check:
    """``BLOOMCAST.HOTCHANNELS CLUSTER COUNT 10`` at the end of the workload
    against the exact oracle (what the demo published, decayed the same way):
    each live rate within its stated error of the exact one; each channel of
    the exact top 10 in the live top 10 unless its exact rate is within the
    error of the live 10th; the live order never inverts two channels whose
    exact rates differ by more than their errors."""
    if result.hot_error or not result.hot_live:
        return Check(False, f"no live answer: {result.hot_error or 'empty'}")
    live = result.hot_live
    exact = {c: result.exact_rate(c) for c in result.hot_exact}
    oracle = sorted(exact, key=lambda c: (-exact[c], c))[:top]
    worst = max(e for _, _, e in live)
    bad: list[str] = []
    off = 0.0
    for name, rate, err in live:
        x = exact.get(name, 0.0)
        off = max(off, abs(rate - x))
        if abs(rate - x) > err + HOT_SLACK * x + 1e-9:
            bad.append(f"{name} live {rate:.4g}/s vs exact {x:.4g}/s (error {err:.3g})")
    names = [n for n, _, _ in live]
    cut = live[-1][1] + worst if len(live) >= top else 0.0
    for c in oracle:
        if c not in names and exact[c] > cut * (1 + HOT_SLACK) + 1e-9:
            bad.append(f"{c} (exact {exact[c]:.4g}/s) missing from the live top {top}")
    for (a, _, ea), (b, _, eb) in pairwise(live):
        if exact.get(b, 0.0) - exact.get(a, 0.0) > ea + eb + HOT_SLACK * exact.get(b, 0.0):
            bad.append(f"{a} ranked above {b}")
    agree = len(set(oracle) & set(names))
    return Check(
        not bad,
        f"{agree}/{len(oracle)} of the exact top {top} by 1 m rate in the live top {top}, "
        f"max |live - exact| {off:.3g}/s, stated error <= {worst:.3g}/s"
        + (f"; {'; '.join(bad[:3])}" if bad else ""),
    )


def spark_check(stats: dict[str, Any], code: int, seconds: float, log: Path) -> Check:
    """The Spark job exited 0, read events and produced hot channels."""
    events = stats.get("counters", {}).get("events", 0)
    return Check(
        code == 0 and events > 0 and bool(stats.get("hot_channels")),
        f"exit {code} in {seconds:.1f}s, {events} events, "
        f"{len(stats.get('hot_channels', []))} hot channels (log: {log})",
    )
