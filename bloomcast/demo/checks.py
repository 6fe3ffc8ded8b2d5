"""The demo's verdict: the pass/fail checks and the delivery ledger.

Everything the demo claims about the product is a :class:`Check` here, judged
from what the driver recorded (:class:`bloomcast.demo.drive.DriveResult`) and
from the nodes' own counters: every expected message delivered exactly once
and nothing else (the ledger: lost, duplicated, unexpected), PUBLISH replies
equal to the local receivers, fewer bus messages than Redis Cluster's
broadcast, bus accounting that adds up to the exact-interest minimum plus the
false positives, no visibility timeouts, no bus loss, every probe delivered,
every node still up, the live cluster-wide hot channels against the exact
oracle and against the Spark job's ``channels:1m``, and the Spark job's
output. Kept apart from the printing
so the report and the summary show the same verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from bloomcast.demo.drive import CONFIRM_TIMEOUT, HOT_HALF_LIFE, SUMMED_COUNTERS, DriveResult
from spark.decay import half_life_label


@dataclass
class Check:
    ok: bool
    detail: str
    #: not judged (its detail says why); counts as no failure, shown as skipped
    skipped: bool = False


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


#: the most a live weight's time may lag its PUBLISH: a node's summary weighs a
#: PUBLISH with the time of its last tick, every 100 ms while PUBLISHes come and
#: every second while none do (router.node.HOT_IDLE_TICK_SECONDS)
TICK_LAG = 1.0
SPARK_HOT = "live hot channels vs Spark (1 m)"


def stated_bound(live: float, spark: float, error: float, skew: float, half_life: float) -> float:
    """What a channel's live and Spark rates (per second) may differ by: the
    summary's space-saving ``error`` (the most its live count is short by) plus
    what ``skew`` seconds between the two decay times make of the larger rate,
    ``rate x (2^(skew / half-life) - 1)``."""
    return error + max(live, spark) * math.expm1(math.log(2.0) * skew / half_life)


def spark_hot_check(
    live: Sequence[tuple[str, float, float]],
    spark: Mapping[str, float],
    skew: float,
    half_life: float = HOT_HALF_LIFE,
    top: int = 10,
) -> Check:
    """The live cluster-wide top ``top`` (name, rate/s, stated error/s, in the
    node's order) against the Spark job's rates (name -> rate/s under the same
    half-life, decayed to the live answer's time, ``skew`` seconds at most from
    every weight's time on the live side), by the rule of :func:`hot_check`
    with :func:`stated_bound` as each channel's bound: each live rate within
    its bound of Spark's; no two channels whose Spark rates differ by more than
    their two bounds in the wrong order, where a channel of Spark's top ``top``
    missing from the live one ranks below it (with the largest live error as
    its error; with fewer than ``top`` live rows its live rate is 0)."""
    if not live:
        return Check(False, "no live answer")
    if not spark:
        return Check(False, "the Spark job has no channels under this half-life")
    worst = max(e for _, _, e in live)
    names = {n for n, _, _ in live}
    ranked = sorted(spark, key=lambda c: (-spark[c], c))[:top]
    # (name, live rate or None when not in the live top, its bound), in the live order
    order: list[tuple[str, float | None, float]] = [
        (n, r, stated_bound(r, spark.get(n, 0.0), e, skew, half_life)) for n, r, e in live
    ]
    for c in ranked:
        if c not in names:
            rate = 0.0 if len(live) < top else None
            order.append((c, rate, stated_bound(rate or 0.0, spark[c], worst, skew, half_life)))
    bad: list[str] = []
    for name, rate, bound in order:
        x = spark.get(name, 0.0)
        if rate is None or abs(rate - x) <= bound + 1e-9:
            continue
        if name in names:
            bad.append(f"{name} live {rate:.4g}/s vs Spark {x:.4g}/s (bound {bound:.3g}/s)")
        else:
            bad.append(
                f"{name} (Spark {x:.4g}/s) missing from the live top {top}, "
                f"which holds only {len(live)}"
            )
    bad += _inversions(order, spark, names, top)
    agree = len(set(ranked) & names)
    off = max(abs(r - spark.get(n, 0.0)) for n, r, _ in live)
    return Check(
        not bad,
        f"{agree}/{len(ranked)} of Spark's channels:{half_life_label(half_life)} top {top} in "
        f"the live top {top}, max |live - Spark| {off:.3g}/s, stated bound <= "
        f"{max(b for _, _, b in order):.3g}/s (space-saving error + rate x "
        f"(2^({skew:.2f} s / {half_life:g} s) - 1))" + (f"; {'; '.join(bad[:4])}" if bad else ""),
    )


def _inversions(
    order: list[tuple[str, float | None, float]],
    spark: Mapping[str, float],
    names: set[str],
    top: int,
) -> list[str]:
    """Every pair ranked ``a`` above ``b`` whose Spark rates say the opposite by
    more than their two bounds (one line per channel missing from the live top)."""
    bad: list[str] = []
    missing: set[str] = set()
    for i, (a, _, bound_a) in enumerate(order):
        for b, _, bound_b in order[i + 1 :]:
            xa, xb = spark.get(a, 0.0), spark.get(b, 0.0)
            if xb - xa <= bound_a + bound_b + 1e-9:
                continue
            if b in names:
                bad.append(f"{a} ranked above {b} (Spark {xa:.4g}/s < {xb:.4g}/s)")
            elif a in names and b not in missing:  # (once, beside the first it beats)
                missing.add(b)
                bad.append(
                    f"{b} (Spark {xb:.4g}/s) missing from the live top {top}, "
                    f"which holds {a} (Spark {xa:.4g}/s)"
                )
    return bad


def live_vs_spark(
    result: DriveResult, spark: Mapping[str, float], window_end: float | None
) -> tuple[Check, list[list[Any]]]:
    """:func:`spark_hot_check` on the demo's run: the live top 10 it read against
    Spark's ``channels:1m`` (``spark``: rates decayed to the live answer's Unix
    time, :func:`bloomcast.demo.stats_view.spark_rates`; ``window_end``: that
    distribution's own time, None when the job wrote none), with the rows for
    the report (name, live rate, Spark's, the stated bound). The skew is
    :data:`TICK_LAG` plus half the answer's round trip (each node read its
    clock within it) plus how far the Unix clock moved against the monotonic
    one during the run. Channels the demo only SPUBLISHed are left out of
    Spark's side: its ``channels`` counts SPUBLISH too, the live KIND channel
    does not (shard channels are their own kind there)."""
    if result.hot_error or not result.hot_live:
        return Check(False, f"no live answer: {result.hot_error or 'empty'}"), []
    if window_end is None:
        return Check(False, "the Spark job wrote no channels:1m to compare"), []
    shard_only = result.spublished - set(result.hot_exact)
    rates = {c: r for c, r in spark.items() if c not in shard_only}
    skew = TICK_LAG + result.hot_round_trip / 2 + result.clock_drift
    check = spark_hot_check(result.hot_live, rates, skew)
    check.detail += (
        f"; Spark's window end {window_end - result.hot_wall:+.1f} s from the live read, "
        f"decayed to it; {len(set(spark) & shard_only)} SPUBLISH channels left out"
    )
    rows = [
        [n, r, rates.get(n, 0.0), stated_bound(r, rates.get(n, 0.0), e, skew, HOT_HALF_LIFE)]
        for n, r, e in result.hot_live
    ]
    return check, rows


def spark_check(stats: dict[str, Any], code: int, seconds: float, log: Path) -> Check:
    """The Spark job exited 0, read events and produced hot channels."""
    events = stats.get("counters", {}).get("events", 0)
    return Check(
        code == 0 and events > 0 and bool(stats.get("hot_channels")),
        f"exit {code} in {seconds:.1f}s, {events} events, "
        f"{len(stats.get('hot_channels', []))} hot channels (log: {log})",
    )
