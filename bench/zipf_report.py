"""The ``## cluster: Zipf-popular channels`` section of docs/benchmarks.md, from
:func:`bench.zipf_bench.run_cluster_zipf`'s result."""

from __future__ import annotations

from typing import Any

from bench.results import fmt_num, fmt_ratio, table
from bench.servers import NODE

HEADING = "cluster: Zipf-popular channels"


def _pkeys(result: dict[str, Any]) -> list[str]:
    keys: set[str] = set()
    for size in result["sizes"]:
        for res in size["results"].values():
            keys |= set(res["throughput"])
    return sorted(keys, key=lambda k: int(k[1:]))


def _div(a: float, b: float) -> float | None:
    return a / b if b else None


INTRO = (
    "The `cluster` section is bloomcast's best case: every channel subscribed on exactly "
    "one node, so a PUBLISH needs at most one forward. This one is the other end of the "
    "range (issue 18): a few channels carry most of the traffic and are subscribed on many "
    "nodes, some are subscribed nowhere, and a pattern with a short literal prefix makes the "
    "pattern filter forward where no receiver is. `bloomcast bench cluster` runs both "
    "workloads by default (`--workload both`; `uniform` or `zipf` runs one), because either "
    "table alone misleads: the uniform one flatters bloomcast, this one alone hides where it "
    "wins. Throughput here comes from a Python raw-socket generator (bench/zipf_load.py), "
    "not from redis-benchmark, whose `-r` can only draw channels uniformly; the same "
    "generator drives every system, and the redis-benchmark column shows what the C tool "
    "reaches on the same cluster."
)


def findings(result: dict[str, Any]) -> str:
    """One paragraph on what the largest size shows, figures filled in."""
    if not result["sizes"] or NODE not in result["sizes"][-1]["results"]:
        return ""
    size = result["sizes"][-1]
    n, w = size["nodes"], size["workload"]
    bus = size["results"][NODE]["bus"]
    anchors = {a: r for a, r in size["ratios"].items() if a != "exact_min"}
    bloom_fp = bus["false_positives_received"] - bus["prefix_forwards"]

    def each(key: str) -> str:
        return ", ".join(f"{fmt_ratio(r.get(key))} {a}'s" for a, r in anchors.items())

    return (
        f"What it shows (N = {n}): {w['publish_share_on_every_node']:.0%} of PUBLISH go to "
        f"the channel subscribed on every node; each needs N - 1 = {n - 1} forwards, which "
        "is both the exact minimum and broadcast, so there bloomcast saves nothing. The "
        "bus-message win shrinks to what the tail (channels on one node: one forward at most) "
        f"and the unsubscribed channels ({w['publish_share_unsubscribed']:.0%} of PUBLISH: no "
        "forward, where Redis Cluster still broadcasts) give: "
        f"{bus['msgs_per_publish']:.2f} bus messages per PUBLISH against the exact minimum "
        f"{bus['exact_min_per_publish']:.2f} and broadcast {n - 1}, that is "
        f"{each('msgs_per_publish')}, where the uniform workload above reaches about 1/N. "
        f"Of those, {bus['prefix_forwards_per_publish']:.2f} per PUBLISH are the forwards "
        "the `c*9` pattern forces to a node with no receiver (its prefix filter holds only "
        "`c`; `news.*`, whose literal prefix decides the match, forces none); "
        f"`cluster_stats_false_positives_received` counted {bus['false_positives_received']} "
        f"for the oracle's {bus['prefix_forwards']} prefix-only forwards, so {bloom_fp} Bloom "
        f"false positives beyond them. Bus bytes per PUBLISH: {each('bus_bytes_per_publish')} "
        "(Redis "
        "7.0 sends the full cluster header with every bus PUBLISH; Valkey's light header is "
        f"closer to bloomcast's frame). PUBLISH/s: -P 1 {each('throughput_P1')}, -P 16 "
        f"{each('throughput_P16')} (Zipf schedule, same generator for every system)."
    )


def zipf_markdown(result: dict[str, Any]) -> str:
    """Workload, bus, throughput and ratio tables."""
    plan = result["plan"]
    p_keys = _pkeys(result)
    shape, bus_rows, tp_rows, ratio_rows = [], [], [], []
    for size in result["sizes"]:
        n, w = size["nodes"], size["workload"]
        shape.append(
            [
                str(n),
                str(w["channels"]),
                str(w["channels_on_every_node"]),
                str(w["channels_on_one_node"]),
                str(w["channels_unsubscribed"]),
                f"{w['publish_share_on_every_node']:.0%}",
                f"{w['publish_share_unsubscribed']:.0%}",
            ]
        )
        for system, res in size["results"].items():
            bus = res["bus"]
            forced = bus["prefix_forwards_per_publish"] if system == NODE else 0.0
            bus_rows.append(
                [
                    str(n),
                    system,
                    f"{bus['msgs_per_publish']:.3f}",
                    f"{bus['exact_min_per_publish']:.3f}",
                    f"{forced:.3f}" if system == NODE else "-",
                    str(bus["broadcast_per_publish"]),
                    fmt_ratio(_div(bus["msgs_per_publish"], bus["exact_min_per_publish"])),
                    fmt_num(bus["bus_bytes_per_publish"], 1),
                    "yes" if bus["delivered_all"] else "NO",
                ]
            )
            tp, ref = res["throughput"], res.get("redis_benchmark_uniform", {})
            tp_rows.append(
                [
                    str(n),
                    system,
                    *[fmt_num(tp[k]["rps"]) for k in p_keys],
                    *[fmt_num(ref[k]["rps"]) if k in ref else "-" for k in p_keys],
                ]
            )
        for anchor, r in size["ratios"].items():
            if anchor == "exact_min":
                continue
            ratio_rows.append(
                [
                    str(n),
                    f"{NODE} / {anchor}",
                    fmt_ratio(r.get("msgs_per_publish")),
                    fmt_ratio(r.get("bus_bytes_per_publish")),
                    *[fmt_ratio(r.get(f"throughput_{k}")) for k in p_keys],
                ]
            )
    return "\n".join(
        [
            INTRO,
            "",
            f"Workload (bench/zipf_workload.py, seed {plan['seed']}): "
            f"{plan['channels_per_node']} x N channels `<topic>.<rank>`, PUBLISH popularity "
            f"Zipf(s = {plan['zipf_s']}) over the ranks; channel rank r is SUBSCRIBEd on "
            f"ceil(N r^-{plan['zipf_s']}) nodes (rank 1 on every node, the tail on one), "
            "`feed.*` channels (every fourth rank) on none; PSUBSCRIBE `news.*` on every even "
            "node and `c*9` on the last node (literal prefix `c`: its prefix filter matches "
            "every `chat.*`/`cart.*` channel, the glob a tenth of them). Every node publishes "
            f"{plan['publishes_per_node']} times from its own seeded Zipf schedule.",
            "",
            table(
                [
                    "N",
                    "channels",
                    "on every node",
                    "on one node",
                    "unsubscribed",
                    "PUBLISH to on-every-node",
                    "PUBLISH to unsubscribed",
                ],
                shape,
            ),
            "",
            "Bus PUBLISH messages and bytes per client PUBLISH. Exact min: other nodes with a "
            "receiver (oracle); prefix-forced: other nodes without a receiver whose pattern "
            "prefix filter matches (bloomcast must forward; the oracle counts them); "
            "delivered exactly: every subscriber socket got the oracle's count, no more.",
            "",
            table(
                [
                    "N",
                    "system",
                    "bus msgs / PUBLISH",
                    "exact min",
                    "prefix-forced",
                    "broadcast",
                    "vs exact",
                    "bus bytes / PUBLISH",
                    "delivered exactly",
                ],
                bus_rows,
            ),
            "",
            "Aggregate PUBLISH/s of the Zipf schedule: one Python raw-socket generator per "
            f"node at once (bench/zipf_load.py), `{plan['clients']}` clients split over the "
            "nodes, total requests / common wall time. Yardstick: redis-benchmark on the "
            "same cluster, same requests, clients and pipeline, uniform over `ch:__rand_int__` "
            "channels nobody subscribes. For Redis and Valkey, whose bus cost does not depend "
            "on the channel (broadcast), the two columns differ by what the Python generator "
            "costs on the same cores; for bloomcast the yardstick is also a lighter workload "
            "(nothing to forward), so read it as a ceiling, not as the Zipf figure:",
            "",
            table(
                [
                    "N",
                    "system",
                    *[f"Zipf -P {k[1:]}" for k in p_keys],
                    *[f"redis-benchmark -P {k[1:]}" for k in p_keys],
                ],
                tp_rows,
            ),
            "",
            "Ratios (bloomcast / anchor, Zipf schedule; below 1 is fewer messages/bytes, "
            "above 1 is faster):",
            "",
            table(
                ["N", "ratio", "bus msgs", "bus bytes", *[f"PUBLISH/s -P {k[1:]}" for k in p_keys]],
                ratio_rows,
            ),
            "",
            findings(result),
        ]
    )


__all__ = ["HEADING", "zipf_markdown"]
