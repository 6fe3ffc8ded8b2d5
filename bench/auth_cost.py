"""What bus authentication costs on forwarding (issue 14): the same bloomcast
cluster and workload as ``bench cluster`` (bench/cluster_bench.py: channels
each subscribed on one node, one redis-benchmark per node publishing over all
of them), run with the bus as it is by default, with ``--cluster-secret``
(every batch SEALED, cluster_bus/seal.py) and with ``--tls-cluster yes``
(netutil/tls.py), in the same run, alternating, best of ``--rounds``.

``uv run python -m bench.auth_cost [--nodes 3] [--rounds 2]``: prints a
Markdown table of aggregate PUBLISH/s and the ratio to the plain bus.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import trustme

from bench.cluster_bench import ClusterPlan, measure_throughput, start_cluster
from bench.servers import NODE

VARIANTS = ("plain", "secret (sealed frames)", "tls-cluster")


def variant_args(directory: Path) -> dict[str, list[str]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    paths = [directory / name for name in ("node.pem", "node.key", "ca.pem")]
    cert.cert_chain_pems[0].write_to_path(str(paths[0]))
    cert.private_key_pem.write_to_path(str(paths[1]))
    ca.cert_pem.write_to_path(str(paths[2]))
    tls = ["--tls-cluster", "yes", "--tls-cert-file", str(paths[0])]
    tls += ["--tls-key-file", str(paths[1]), "--tls-ca-cert-file", str(paths[2])]
    return {VARIANTS[0]: [], VARIANTS[1]: ["--cluster-secret", "bench-secret"], VARIANTS[2]: tls}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.auth_cost", description=__doc__)
    parser.add_argument("--nodes", type=int, default=3, help="cluster size (default 3)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per variant, best kept")
    args = parser.parse_args(argv)
    plan = ClusterPlan(sizes=(args.nodes,), systems=(NODE,))
    best: dict[str, dict[str, float]] = {v: {} for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        extra = variant_args(Path(tmp))
        for _ in range(args.rounds):
            for variant in VARIANTS:
                with start_cluster(NODE, args.nodes, extra[variant]) as cluster:
                    got = measure_throughput(cluster, NODE, plan)
                for depth, result in got.items():
                    best[variant][depth] = max(best[variant].get(depth, 0.0), result["rps"])
                print(f"{variant}: {best[variant]}", file=sys.stderr)
    depths = list(best[VARIANTS[0]])
    print("| bus | " + " | ".join(f"PUBLISH/s {d}" for d in depths) + " | ratio to plain |")
    print("|---|" + "---|" * (len(depths) + 1))
    for variant in VARIANTS:
        ratios = ", ".join(f"{d} {best[variant][d] / best[VARIANTS[0]][d]:.2f}x" for d in depths)
        cells = " | ".join(f"{best[variant][d]:,.0f}" for d in depths)
        print(f"| {variant} | {cells} | {ratios} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
