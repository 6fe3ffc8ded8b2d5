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
        ]
    )


__all__ = ["HEADING", "zipf_markdown"]
