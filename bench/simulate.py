"""Simulation past one machine: N nodes' real bloom/ filters and routing, no sockets.

    uv run python -m bench.simulate --nodes 100 1000 [--write]

What is simulated (issue 7 part 3):
- C channels ``topic<T>.<id>`` (T topics) with Zipf popularity (exponent s):
  every node subscribes to ~S distinct channels drawn by popularity (S varies
  per node, 0.5x..1.5x), and a share of its subscriptions are patterns
  ``topic<T>.*`` (some ``topic<T>.<d>*``, a second prefix length); optionally
  a few nodes hold a match-all pattern ``*``.
- Each node builds what it would export: a CountingBloomFilter of its
  channels sized with ``for_capacity(n, p)`` at the per-peer rate
  p = (target false forwards per PUBLISH) / (N - 1) (Summary Cache: false
  forwards grow as peers x p; docs/architecture.md §7), and a PatternFilter of its patterns.
- Routing: every node holds the other N-1 nodes' filters in BitSlicedIndex
  objects (one per filter size m). All nodes hold the same peer filters, so
  one index over all N nodes stands for every node's view; a node's route
  clears its own bit. Per PUBLISH: hash the channel once, query each channel
  index, probe each prefix length in use (one hash per length) restricted to
  the peers using that length, OR in the match-all peers.
- PUBLISH workload: channels drawn by the same popularity, origin node uniform.
  For each, forwards = peers in the route, exact minimum = peers with a
  matching subscription (dict lookups), broadcast = N - 1 (Redis Cluster).
  A route that misses an exact peer would be a false negative: counted, must be 0.
- Memory per node for the peer filters (their bits: sum over peers of m/8
  for both filters; the bit-sliced rows hold the same bits) vs an exact
  subject list as NATS keeps per route (the subject bytes of every peer's
  distinct subscriptions: a lower bound, no per-entry overhead counted).
- Routing time per PUBLISH: wall time of the route (hash + index queries +
  pattern probes + match-all), mean over the PUBLISH calls.
- The same memory in this process (``sys.getsizeof`` totals): the
  BitSlicedIndex structures (:attr:`bloom.BitSlicedIndex.nbytes`) vs a dict
  subject -> peer bitmask (:attr:`ExactInterest.nbytes`).
- Cross-check with the node's own routing code: the PUBLISH list is routed
  again by ``cluster_bus.routing.PeerTable`` (filters installed and verified
  against their CRC64 as the bus does); differing routes are counted.

Nothing here asserts a speed. ``--write`` replaces the ``## simulation``
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bloom import (
    DEFAULT_K,
    BitSlicedIndex,
    CountingBloomFilter,
    PatternFilter,
    key_positions,
    mask_lengths,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


@dataclass
class SimConfig:
    """Workload and sizing of one simulation run (defaults: the "tail" workload)."""

    nodes: int = 1000
    channels: int = 1_000_000  # C: distinct channels in the universe
    topics: int = 1000  # T: channels are topic<T>.<id>
    subs_per_node: int = 100  # S: mean distinct channel subscriptions per node
    pattern_share: float = 0.02  # patterns / (channels + patterns) per node
    match_all_nodes: int = 0  # nodes with a `*` pattern
    zipf_s: float = 0.7  # popularity exponent (channels and topics)
    publishes: int = 20_000
    target_false_forwards: float = 0.1  # per PUBLISH, cluster-wide
    seed: int = 1

    @property
    def p_per_peer(self) -> float:
        """Per-peer false-positive rate: target / (N - 1) (Summary Cache)."""
        return self.target_false_forwards / max(1, self.nodes - 1)


WORKLOADS: dict[str, dict[str, Any]] = {
    # many channels, each subscribed on few nodes: most PUBLISH calls have few
    # receivers, where false forwards weigh most against the exact minimum
    "tail": {},
    # fewer channels, steeper popularity, more subscriptions: the head channels
    # are subscribed on almost every node
    "hot": {"channels": 100_000, "zipf_s": 1.0, "subs_per_node": 500},
}


def _zipf_cdf(n: int, s: float) -> np.ndarray:
    """Cumulative Zipf(s) probabilities of ranks 1..n (index 0 = most popular)."""
    w = np.arange(1, n + 1, dtype=np.float64) ** -s
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


def _draw(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    """``size`` ranks drawn from the distribution ``cdf`` (with replacement)."""
    idx = np.searchsorted(cdf, rng.random(size), side="right")
    return np.minimum(idx, len(cdf) - 1)


def channel_name(cid: int, topics: int) -> bytes:
    """Channel ``cid`` (popularity rank) -> ``topic<T>.<cid>``; topic = cid mod T so
    popular channels spread over topics."""
    return b"topic%d.%d" % (cid % topics, cid)


@dataclass
class _Node:
    channels: list[bytes]
    patterns: list[bytes]
    chan_filter: CountingBloomFilter
    pat_filter: PatternFilter


def build_nodes(cfg: SimConfig) -> list[_Node]:
    """Every node's subscriptions and its exported filters."""
    rng = np.random.default_rng(cfg.seed)
    chan_cdf = _zipf_cdf(cfg.channels, cfg.zipf_s)
    topic_cdf = _zipf_cdf(cfg.topics, cfg.zipf_s)
    p = cfg.p_per_peer
    nodes = []
    for i in range(cfg.nodes):
        total = max(1, round(cfg.subs_per_node * rng.uniform(0.5, 1.5)))
        n_pat = int(rng.binomial(total, cfg.pattern_share))
        n_chan = total - n_pat
        draws = _draw(rng, chan_cdf, 2 * n_chan + 8)
        _, first = np.unique(draws, return_index=True)
        picked = draws[np.sort(first)][:n_chan]
        channels = [channel_name(int(c), cfg.topics) for c in picked]
        patterns: set[bytes] = set()
        for t in _draw(rng, topic_cdf, n_pat):
            if rng.random() < 0.25:  # a longer prefix: topic<T>.<digit>*
                patterns.add(b"topic%d.%d*" % (int(t), int(rng.integers(1, 10))))
            else:
                patterns.add(b"topic%d.*" % int(t))
        if i < cfg.match_all_nodes:
            patterns.add(b"*")
        cf = CountingBloomFilter.for_capacity(max(1, len(channels)), p)
        for ch in channels:
            cf.add(ch)
        # pattern filters are tiny; each PUBLISH probes a few prefix lengths, so
        # give them a tenth of the channel rate
        pf = PatternFilter.for_capacity(max(16, len(patterns)), p / 10)
        for pat in sorted(patterns):
            pf.add(pat)
        nodes.append(_Node(channels, sorted(patterns), cf, pf))
    return nodes


class ClusterRouting:
    """The routing state every node holds about its peers (all N; route clears self)."""

    def __init__(self, nodes: Sequence[_Node]) -> None:
        self.chan_index: dict[int, BitSlicedIndex] = {}
        self.pat_index: dict[int, BitSlicedIndex] = {}
        self.match_all = 0
        self.by_length: dict[int, int] = {}  # prefix length -> peers using it
        for slot, node in enumerate(nodes):
            cf = node.chan_filter.exported
            idx = self.chan_index.get(cf.m)
            if idx is None:
                idx = self.chan_index[cf.m] = BitSlicedIndex(cf.m, cf.k)
            idx.set(slot, cf)
            pf = node.pat_filter
            if pf.match_all:
                self.match_all |= 1 << slot
            if pf.prefix_lengths:
                pb = pf.counting.exported
                pidx = self.pat_index.get(pb.m)
                if pidx is None:
                    pidx = self.pat_index[pb.m] = BitSlicedIndex(pb.m, pb.k)
                pidx.set(slot, pb)
                for length in mask_lengths(pf.prefix_lengths):
                    self.by_length[length] = self.by_length.get(length, 0) | (1 << slot)
        self.lengths = tuple(sorted(self.by_length.items()))
        self.chan_indexes = tuple(self.chan_index.values())
        self.pat_indexes = tuple(self.pat_index.values())

    def route(self, channel: bytes, origin: int) -> int:
        """Bitmask of the peers ``origin`` forwards a PUBLISH on ``channel`` to."""
        positions = key_positions(channel, DEFAULT_K)
        mask = self.match_all
        for idx in self.chan_indexes:
            mask |= idx.query(positions)
        n = len(channel)
        for length, users in self.lengths:
            if length > n:
                break
            if not users & ~mask:
                continue  # every user of this length is already a destination
            pos = key_positions(channel[:length], DEFAULT_K)
            for idx in self.pat_indexes:
                mask |= idx.query(pos) & users
        return mask & ~(1 << origin)


class ExactInterest:
    """The exact minimum: who really has a matching subscription (dict lookups)."""

    def __init__(self, nodes: Sequence[_Node]) -> None:
        self.by_channel: dict[bytes, int] = {}
        self.by_prefix: dict[bytes, int] = {}
        self.match_all = 0
        for slot, node in enumerate(nodes):
            bit = 1 << slot
            for ch in node.channels:
                self.by_channel[ch] = self.by_channel.get(ch, 0) | bit
            for pat in node.patterns:
                if pat == b"*":
                    self.match_all |= bit
                else:  # every simulated pattern is <literal prefix>*
                    prefix = pat[:-1]
                    self.by_prefix[prefix] = self.by_prefix.get(prefix, 0) | bit
        self.prefix_lengths = sorted({len(p) for p in self.by_prefix})

    @property
    def nbytes(self) -> int:
        """In-process bytes of this exact table (``sys.getsizeof`` of the dicts,
        every subject and every peer-mask int): what an exact subject list
        costs in this Python process, next to :attr:`BitSlicedIndex.nbytes`."""
        size = 0
        for table in (self.by_channel, self.by_prefix):
            size += sys.getsizeof(table)
            size += sum(sys.getsizeof(key) + sys.getsizeof(val) for key, val in table.items())
        return size

    def route(self, channel: bytes, origin: int) -> int:
        """Bitmask of the peers with a subscriber for ``channel``."""
        mask = self.match_all | self.by_channel.get(channel, 0)
        by_prefix = self.by_prefix
        for length in self.prefix_lengths:
            mask |= by_prefix.get(channel[:length], 0)
        return mask & ~(1 << origin)


def run_simulation(
    nodes: int, quick: bool = False, workload: str = "tail", repeats: int = 5, **overrides: Any
) -> dict[str, Any]:
    """Simulate ``nodes`` nodes; return JSON-ready figures (see the module doc).

    ``workload`` is a key of :data:`WORKLOADS`; ``quick`` shrinks it (fewer
    channels, subscriptions, PUBLISH calls) for smoke runs; ``overrides`` set
    any :class:`SimConfig` field (TypeError for an unknown one). Routing time
    is the best of ``repeats`` passes over the PUBLISH list. Raises
    AssertionError if any route misses an exact destination.
    """
    cfg = SimConfig(nodes=nodes, **WORKLOADS[workload])
    if quick:
        cfg.channels, cfg.topics, cfg.subs_per_node, cfg.publishes = 5000, 100, 100, 2000
    for key, value in overrides.items():
        if not hasattr(cfg, key):
            raise TypeError(f"unknown simulation parameter {key!r}")
        setattr(cfg, key, value)
    t0 = time.perf_counter()
    node_list = build_nodes(cfg)
    routing = ClusterRouting(node_list)
    exact = ExactInterest(node_list)
    build_s = time.perf_counter() - t0

    rng = np.random.default_rng(cfg.seed + 1)
    chan_ids = _draw(rng, _zipf_cdf(cfg.channels, cfg.zipf_s), cfg.publishes)
    origins = rng.integers(0, nodes, size=cfg.publishes)
    work = [
        (channel_name(int(c), cfg.topics), int(o)) for c, o in zip(chan_ids, origins, strict=True)
    ]

    # routing time: the route alone over the whole PUBLISH list, best of
    # ``repeats`` passes (the machine is shared; the least disturbed pass)
    route = routing.route
    route_s = cached_s = float("inf")
    routes: list[int] = []
    cache: dict[bytes, int] = {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        routes = [route(ch, o) for ch, o in work]
        route_s = min(route_s, time.perf_counter() - t0)
        # the same with a route cache per channel, as a node keeps until its
        # peer table changes (the table is static here: only first sights miss)
        cache = {}
        t0 = time.perf_counter()
        for ch, o in work:
            r = cache.get(ch)
            if r is None:
                r = cache[ch] = route(ch, nodes)  # slot ``nodes`` is nobody: clears no bit
            r &= ~(1 << o)
        cached_s = min(cached_s, time.perf_counter() - t0)

    forwards = exact_total = missed = cold = cold_forwards = cold_exact = 0
    for (ch, o), got in zip(work, routes, strict=True):
        want = exact.route(ch, o)
        if want & ~got:
            missed += 1
        f, e = got.bit_count(), want.bit_count()
        forwards += f
        exact_total += e
        if e <= 1:
            cold += 1
            cold_forwards += f
            cold_exact += e
    if missed:
        raise AssertionError(f"{missed} routes missed a subscribed peer (false negatives)")
    table_check = peer_table_check(node_list, work, routes)

    # memory one node keeps about its N-1 peers (mean over nodes)
    filter_bytes = sum(
        (n.chan_filter.m + (n.pat_filter.m if n.pat_filter.prefix_lengths else 0)) // 8
        for n in node_list
    )
    subject_bytes = sum(
        sum(len(c) for c in n.channels) + sum(len(p) for p in n.patterns) for n in node_list
    )
    per_node_filters = filter_bytes * (nodes - 1) / nodes
    per_node_subjects = subject_bytes * (nodes - 1) / nodes
    # the same in this process: the structures hold all N nodes (one shared
    # view); a node holds N-1 of them, hence the same (N-1)/N scaling
    index_bytes = sum(i.nbytes for i in routing.chan_indexes + routing.pat_indexes)
    per_node_index = index_bytes * (nodes - 1) / nodes
    per_node_exact_dict = exact.nbytes * (nodes - 1) / nodes
    pubs = cfg.publishes
    chan_m = sorted({n.chan_filter.m for n in node_list})
    subs = sum(len(n.channels) + len(n.patterns) for n in node_list)
    return {
        "config": asdict(cfg),
        "p_per_peer": cfg.p_per_peer,
        "channel_filter_m": chan_m,
        "pattern_prefix_lengths": [length for length, _ in routing.lengths],
        "subscriptions_total": subs,
        "forwards_per_publish": forwards / pubs,
        "exact_per_publish": exact_total / pubs,
        "broadcast_per_publish": float(nodes - 1),
        "false_forwards_per_publish": (forwards - exact_total) / pubs,
        "forwards_over_exact": forwards / exact_total if exact_total else float("inf"),
        "broadcast_over_forwards": (nodes - 1) * pubs / forwards if forwards else float("inf"),
        "cold_publishes": cold,
        "cold_forwards_per_publish": cold_forwards / cold if cold else 0.0,
        "cold_exact_per_publish": cold_exact / cold if cold else 0.0,
        "missed_routes": missed,
        "routing_us_per_publish": route_s / pubs * 1e6,
        "routing_cached_us_per_publish": cached_s / pubs * 1e6,
        "routing_repeats": repeats,
        "route_cache_hit_ratio": 1 - len(cache) / pubs,
        "workload": workload,
        "memory_per_node_filters_bytes": per_node_filters,
        "memory_per_node_exact_subjects_bytes": per_node_subjects,
        "filters_over_exact_memory": per_node_filters / per_node_subjects,
        "memory_per_node_index_bytes": per_node_index,
        "memory_per_node_exact_dict_bytes": per_node_exact_dict,
        "index_over_exact_dict_memory": per_node_index / per_node_exact_dict,
        **table_check,
        "build_s": build_s,
    }


def peer_table_check(
    nodes: Sequence[_Node], work: Sequence[tuple[bytes, int]], routes: Sequence[int]
) -> dict[str, Any]:
    """Route the same PUBLISH list with the node's own routing code,
    ``cluster_bus.routing.PeerTable`` (filters installed as the bus installs
    them, each verified against its CRC64 fingerprint), route cache on as a
    node runs it, from a fresh table (first sight of each channel misses).

    Returns ``peer_table_mismatches`` (PUBLISH calls whose route differs from
    :class:`ClusterRouting`'s; 0 means the simulation routes exactly as a
    node does) and ``peer_table_us_per_publish`` (one pass, mean).
    """
    from cluster_bus.frames import FilterKind
    from cluster_bus.routing import PeerTable

    table = PeerTable()
    for slot, node in enumerate(nodes):
        node_id = f"sim-{slot}"
        if table.add_peer(node_id) != slot:
            raise AssertionError("PeerTable slots are not assigned in order")
        cf, pf = node.chan_filter, node.pat_filter
        ok = table.set_filter(
            node_id,
            FilterKind.CHANNELS,
            cf.m,
            cf.k,
            cf.exported.bits.tobytes(),
            cf.fingerprint(),
            1,
        )
        ok &= table.set_filter(
            node_id,
            FilterKind.PATTERNS,
            pf.m,
            pf.k,
            pf.counting.exported.bits.tobytes(),
            pf.fingerprint(),
            1,
            pf.prefix_lengths,
            pf.match_all,
        )
        if not ok:
            raise AssertionError(f"PeerTable refused node {slot}'s filters (fingerprint)")
    route = table.route
    t0 = time.perf_counter()
    got = [route(ch) & ~(1 << o) for ch, o in work]
    elapsed = time.perf_counter() - t0
    mismatches = sum(1 for a, b in zip(got, routes, strict=True) if a != b)
    return {
        "peer_table_mismatches": mismatches,
        "peer_table_us_per_publish": elapsed / max(1, len(work)) * 1e6,
    }


def _workload_text(c: dict[str, Any]) -> str:
    return (
        f"{c['channels']:,} channels `topic<T>.<id>` over {c['topics']:,} topics, Zipf "
        f"s={c['zipf_s']}; ~{c['subs_per_node']} distinct subscriptions per node "
        f"(0.5x-1.5x), {c['pattern_share']:.0%} of them patterns `topic<T>.*` / "
        f"`topic<T>.<d>*`, {c['match_all_nodes']} match-all nodes; {c['publishes']:,} "
        f"PUBLISH; target {c['target_false_forwards']} false forwards per PUBLISH"
    )


def markdown(results: dict[str, dict[str, dict[str, Any]]], cmd: str) -> str:
    """The body of the ``## simulation`` section: ``results[workload][N]``."""
    lines = [
        "The real bloom/ filters and bit-sliced routing with no sockets "
        "(bench/simulate.py): every node exports a CountingBloomFilter of its channels "
        "sized with for_capacity(n, p), p = target false forwards / (N-1) per peer "
        "(Summary Cache), k = 7, and a PatternFilter (prefix filter at p/10, length "
        "mask, match-all flag); every node routes with BitSlicedIndex objects over its "
        "peers' filters. Subscriptions and PUBLISH channels follow the same Zipf "
        "popularity; PUBLISH origins are uniform. Exact minimum = peers with a matching "
        "subscription; broadcast = N-1 (Redis Cluster).",
        "",
        f"    {cmd}",
        "",
    ]
    for workload, by_n in results.items():
        first = next(iter(by_n.values()))
        lines += [
            f"Workload `{workload}`: {_workload_text(first['config'])}.",
            "",
            "| N | forwards / PUBLISH | exact minimum | broadcast | forwards / exact | "
            "broadcast / forwards | false forwards / PUBLISH | routing us / PUBLISH "
            "(uncached) | with route cache (hit ratio) | node's PeerTable.route us "
            "(its cache on; routes differing) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for n, r in by_n.items():
            lines.append(
                f"| {n} | {r['forwards_per_publish']:.3f} | {r['exact_per_publish']:.3f} | "
                f"{r['broadcast_per_publish']:.0f} | {r['forwards_over_exact']:.4f}x | "
                f"{r['broadcast_over_forwards']:.1f}x | "
                f"{r['false_forwards_per_publish']:.4f} | "
                f"{r['routing_us_per_publish']:.1f} | {r['routing_cached_us_per_publish']:.2f} "
                f"({r['route_cache_hit_ratio']:.0%}) | {r['peer_table_us_per_publish']:.2f} "
                f"({r['peer_table_mismatches']}) |"
            )
        lines += [
            "",
            "| N | p per peer | channel filter m in use | peer filter bits per node | "
            "exact subject list per node (NATS-style; subject bytes only) | filters / "
            "exact | in process: bit-sliced indexes | in process: exact dict subject -> "
            "peers | index / dict | PUBLISH with exact <= 1: forwards vs exact |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for n, r in by_n.items():
            sizes = ", ".join(str(m) for m in r["channel_filter_m"])
            lines.append(
                f"| {n} | {r['p_per_peer']:.2e} | {sizes} | "
                f"{r['memory_per_node_filters_bytes'] / 1e6:.2f} MB | "
                f"{r['memory_per_node_exact_subjects_bytes'] / 1e6:.2f} MB | "
                f"{r['filters_over_exact_memory']:.2f}x | "
                f"{r['memory_per_node_index_bytes'] / 1e6:.2f} MB | "
                f"{r['memory_per_node_exact_dict_bytes'] / 1e6:.2f} MB | "
                f"{r['index_over_exact_dict_memory']:.2f}x | "
                f"{r['cold_forwards_per_publish']:.3f} vs {r['cold_exact_per_publish']:.3f} "
                f"({r['cold_publishes']:,} PUBLISH) |"
            )
        lines.append("")
    verdicts = []
    for workload, by_n in results.items():
        for n, r in by_n.items():
            fwd_ok = r["forwards_over_exact"] <= 1.1
            time_ok = r["routing_us_per_publish"] <= 20
            verdicts.append(
                f"`{workload}` N={n}: forwards {r['forwards_over_exact']:.4f}x exact "
                f"({'meets' if fwd_ok else 'misses'} <= 1.1x), routing "
                f"{r['routing_us_per_publish']:.1f} us ({'meets' if time_ok else 'misses'} "
                "<= 20 us)"
            )
    lines += ["Against the goal: " + "; ".join(verdicts) + ".", ""]
    any_result = next(iter(next(iter(results.values())).values()))
    load = any_result.get("loadavg_1m", 0.0)
    repeats = any_result.get("routing_repeats", 3)
    lines += [
        "No route missed a subscribed peer (a false negative aborts the run). Goal "
        "(issue 7) at N = 1000: forwards <= 1.1x the exact minimum, routing <= 20 us per "
        "PUBLISH. The uncached routing time is the whole decision: hash the channel, one "
        "query per channel filter size in use, one hash + query per pattern prefix length "
        "in use (skipped once every peer using that length is a destination), the "
        f"match-all OR, best of {repeats} passes over the PUBLISH list. The cached column adds "
        "a per-channel route cache as a node keeps "
        "between peer-table changes. The PeerTable column routes the same PUBLISH list "
        "with the node's own code (cluster_bus.routing.PeerTable, filters installed "
        "and CRC64-verified as the bus installs them, its route cache on, one pass from "
        "a fresh table); 0 routes differing means the simulation routes exactly as a "
        "node does. Memory: the exact subject list counts only subject bytes "
        "(a lower bound: a real list adds per-entry overhead); the filter figure is the "
        "bits of the N-1 peers' channel and pattern filters, as sent on the bus. The "
        "in-process columns are sys.getsizeof totals of the structures this process "
        "routes with: the BitSlicedIndex rows (Python ints, one per bit position and "
        "filter size) plus each peer's bit copy, vs a dict from each subscribed "
        "subject (or pattern prefix) to its peer bitmask; Python's per-object overhead "
        "makes both several times their raw bytes. "
        f"Python {platform.python_version()}; load average at the start {load:.2f} "
        "on a shared 2-core machine.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry of ``python -m bench.simulate``."""
    parser = argparse.ArgumentParser(prog="python -m bench.simulate", description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--workload", nargs="+", choices=sorted(WORKLOADS), default=["tail", "hot"])
    parser.add_argument("--quick", action="store_true", help="small workload (smoke run)")
    parser.add_argument("--publishes", type=int, default=None)
    parser.add_argument(
        "--repeats", type=int, default=5, help="routing passes, best taken (default 5)"
    )
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    load = os.getloadavg()[0]
    extra = {} if args.publishes is None else {"publishes": args.publishes}
    for workload in args.workload:
        results[workload] = {}
        for n in args.nodes:
            res = run_simulation(
                n, quick=args.quick, workload=workload, repeats=args.repeats, **extra
            )
            res["loadavg_1m"] = load
            results[workload][str(n)] = res
            print(
                f"{workload} N={n}: forwards/PUBLISH {res['forwards_per_publish']:.3f}, "
                f"exact {res['exact_per_publish']:.3f}, broadcast {n - 1}, routing "
                f"{res['routing_us_per_publish']:.1f} us, build {res['build_s']:.1f} s",
                flush=True,
            )
    cmd = "uv run python -m bench.simulate --nodes " + " ".join(map(str, args.nodes))
    cmd += " --workload " + " ".join(args.workload)
    if args.quick:
        cmd += " --quick"
    if args.publishes is not None:
        cmd += f" --publishes {args.publishes}"
    if args.repeats != 5:
        cmd += f" --repeats {args.repeats}"
    body = markdown(results, cmd + (" --write" if args.write else ""))
    print(body)
    if args.write:
        from bench.results import update_markdown

        update_markdown(DOC, {"simulation": body})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
