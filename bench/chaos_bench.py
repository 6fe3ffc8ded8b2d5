"""``bloomcast bench chaos``: seeded randomized fault schedules over five nodes in
network namespaces, and the ledger the chaos checker keeps of each
(bloomcast/testing/chaos.py, chaos_check.py; issue 26). Runs only when named
(minutes per seed); needs root and iproute2.

Each seed's row: the faults it drew, then per (publisher, subscriber) pair
summed: messages owed, delivered once in order, counted lost (covered by a
loss notice of their origin and time), lost uncounted, duplicated,
reordered, phantom counts, and how long after the last heal every node had
reconverged.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bloomcast.testing.chaos import ChaosSettings, run_chaos
from bloomcast.testing.chaos_check import table
from bloomcast.testing.faults import netns_unavailable

SEEDS = (11, 12, 13)
COMMAND = "sudo uv run bloomcast bench chaos"


def run_chaos_bench(seeds: tuple[int, ...] = SEEDS, duration: float = 300.0) -> dict[str, Any]:
    reason = netns_unavailable()
    if reason is not None:
        raise ValueError(f"chaos needs network namespaces: {reason}")
    runs = []
    for seed in seeds:
        print(f"bench: chaos seed {seed}, {duration:.0f} s ...", flush=True)
        record = Path(tempfile.gettempdir()) / f"bloomcast-chaos-{seed}.pkl"
        result = run_chaos(
            ChaosSettings(seed=seed, duration=duration, progress=print, record_path=record)
        )
        print(f"bench: the run's record is kept in {record}", flush=True)
        print("\n".join(table(result.verdict)), flush=True)
        kinds = Counter(f.kind for f in result.faults)
        longest = max((f.duration for f in result.faults), default=0.0)
        runs.append(
            {
                "seed": seed,
                "duration_s": duration,
                "faults": dict(kinds),
                "longest_fault_s": round(longest, 1),
                "totals": result.verdict.totals(),
                "reconverge_s": result.verdict.reconverge_s,
                "count_mismatches": len(result.verdict.count_mismatches),
            }
        )
    return {"runs": runs}


def chaos_markdown(result: dict[str, Any]) -> str:
    lines = [
        "Five nodes in network namespaces, node timeout 2 s (so the default forget time is "
        "10 s after FAIL and the replay window 10 s); publishers on nodes 0-2 at 40 PUBLISH/s "
        "each; on every node a channel, a pattern and a loss-channel subscriber. Faults: kill "
        "-9 + restart, SIGSTOP (0.5-16 s), partitions and isolations (2-16 s), one-way and "
        "two-way cuts of a pair, connection resets, at most two at once. Per pair: *owed* = "
        "published after the subscription reached the publisher's node and with a chance "
        "to be delivered before either process died; *counted* = not delivered, covered by "
        "a loss notice of its origin whose time bounds hold it; *phantom* = counted beyond "
        "what was missing; *not owed* = published before the subscription can have reached "
        "the publisher's node (a subscription made, or a publisher's node restarted, while "
        "the pair was cut off: owed once the pair was clear for 2 node timeouts + 3 s); "
        "*excused* = missing, and no such clear stretch before the publisher's or the "
        "subscriber's process died (bloomcast/testing/chaos_check.py).",
        "",
        "| seed | faults | longest | owed | delivered | counted lost | lost uncounted "
        "| duplicated | reordered | phantom | not owed | excused | reconverged after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in result["runs"]:
        t = run["totals"]
        faults = ", ".join(f"{n} {k}" for k, n in sorted(run["faults"].items()))
        again = "never" if run["reconverge_s"] is None else f"{run['reconverge_s']:.1f} s"
        lines.append(
            f"| {run['seed']} | {faults} | {run['longest_fault_s']} s | {t['owed']:,} "
            f"| {t['delivered']:,} | {t['counted']:,} | {t['uncounted']} | {t['duplicated']} "
            f"| {t['reordered']} | {t['phantom']} | {t.get('not_owed', 0):,} "
            f"| {t.get('excused', 0):,} | {again} |"
        )
    return "\n".join(lines)
