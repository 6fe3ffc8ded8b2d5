"""``bloomcast bench overload``: a converged cluster starved on purpose, and how
it comes back (bloomcast/testing/overload.py; issue 40). Runs only when named
(minutes per run, ~6 GB of nodes at N = 100).

Each run's row: the starvation (SIGSTOP of a fifth of the nodes, or a busy
loop per core), the time from its end until every node is converged again,
nodes forgotten (none may be: they were only slow), the suspicions raised
and FAIL messages sent from its start, and the chaos checker's ledger of
the numbered PUBLISHes that went through it.
"""

from __future__ import annotations

from typing import Any

from bloomcast.testing.chaos_check import table
from bloomcast.testing.overload import OverloadSettings, run_overload

#: the issue's runs: (starvation, seconds)
RUNS = (("pause", 30.0), ("hog", 60.0))


def run_overload_bench(nodes: int = 100, quick: bool = False) -> dict[str, Any]:
    runs = []
    for fault, seconds in RUNS:
        settings = OverloadSettings(
            nodes=3 if quick else nodes,
            fault=fault,
            fault_s=2.0 if quick else seconds,
            node_timeout_ms=1000 if quick else 15000,
            subscribers=2 if quick else 12,
            ready_timeout_s=300,
            converge_timeout_s=300,
            progress=print,
        )
        print(f"bench: overload {fault} {settings.fault_s:g} s at N = {settings.nodes} ...")
        result = run_overload(settings)
        print("\n".join(table(result.verdict)), flush=True)
        runs.append(
            {
                "nodes": settings.nodes,
                "fault": fault,
                "fault_s": settings.fault_s,
                "stopped": len(settings.stopped()),
                "node_timeout_ms": settings.node_timeout_ms,
                **result.as_dict(),
            }
        )
    return {"runs": runs}


def overload_markdown(result: dict[str, Any]) -> str:
    lines = [
        "A cluster of N node processes on this machine (LocalCluster, all started at once), "
        "converged; two publishers at 40 PUBLISH/s each, channel and loss-channel "
        "subscribers on a spread of nodes (stopped ones among them); then starved: "
        "*pause* = SIGSTOP of the last fifth of the nodes, SIGCONT after the time given; "
        "*hog* = one busy loop per core, at the nodes' priority. *converged again* = from "
        "the end of the starvation until every node knows every node, none suspected, "
        "failed or lost, every filter held; *forgotten* = a node forgotten after FAIL (its "
        "log line), which a node that was only slow must never be; *suspicions* and "
        "*FAIL sent* summed over the nodes from the start of the starvation. The ledger is "
        "the chaos checker's (bloomcast/testing/chaos_check.py): every PUBLISH owed must "
        "be delivered once and in order or counted lost on both sides.",
        "",
        "| N | starvation | ready s | converged again after s | forgotten | suspicions "
        "| FAIL sent | owed | delivered | counted lost | lost uncounted | duplicated "
        "| reordered | phantom |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in result["runs"]:
        t = run["ledger"]
        what = (
            f"SIGSTOP of {run['stopped']} nodes for {run['fault_s']:g} s"
            if run["fault"] == "pause"
            else f"busy loops for {run['fault_s']:g} s"
        )
        again = "never" if run["reconverge_s"] is None else f"{run['reconverge_s']:g}"
        lines.append(
            f"| {run['nodes']} | {what} | {run['ready_s']:g} | {again} | {run['forgotten']} "
            f"| {run['suspicions']} | {run['fails_sent']} | {t['owed']} | {t['delivered']} "
            f"| {t['counted']} | {t['uncounted']} | {t['duplicated']} | {t['reordered']} "
            f"| {t['phantom']} |"
        )
    return "\n".join(lines) + "\n"
