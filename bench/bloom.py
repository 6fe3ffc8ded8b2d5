"""Benchmark of bloom/: add/contains ops/s and BitSlicedIndex vs the per-peer loop.

    uv run python -m bench.bloom [--peers 10 100 1000] [--channels 1000] [--write]

Every figure is measured in this run, next to its anchor:
- hashing, BloomFilter add / contains (member and non-member),
  CountingBloomFilter add+remove, each as ops/s;
- routing a channel among P peers' filters (each sized for ``--channels``
  channels at 1% with for_capacity, loaded with that many): the bit-sliced
  index (k row ANDs) vs the naive loop ``for f in filters: f.contains_positions``,
  both on the same precomputed positions, in microseconds per query, with
  their ratio and the growth of each from the fewest to the most peers.

``--write`` replaces the ``## bloom`` section of docs/benchmarks.md.
Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bloom import (
    DEFAULT_K,
    BitSlicedIndex,
    BloomFilter,
    CountingBloomFilter,
    key_positions,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def _best_rate(fn: Callable[[], int], repeat: int = 3) -> float:
    """ops/s of ``fn`` (which returns how many ops it did), best of ``repeat``."""
    best = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        dt = time.perf_counter() - t0
        best = max(best, n / dt)
    return best


def filter_ops(n: int = 100_000) -> dict[str, float]:
    """ops/s of the single-filter operations on ``n`` distinct keys."""
    keys = [b"channel:%d" % i for i in range(n)]
    others = [b"other:%d" % i for i in range(n)]
    f = BloomFilter.for_capacity(n, 0.01)

    def hashing() -> int:
        for key in keys:
            key_positions(key)
        return n

    def add() -> int:
        for key in keys:
            f.add(key)
        return n

    def contains_member() -> int:
        for key in keys:
            key in f  # noqa: B015 - the lookup is what is timed
        return n

    def contains_other() -> int:
        for key in others:
            key in f  # noqa: B015
        return n

    positions = [key_positions(key) for key in keys]

    def contains_positions() -> int:
        cp = f.contains_positions
        for pos in positions:
            cp(pos)
        return n

    def counting_add_remove() -> int:
        c = CountingBloomFilter(f.m)
        for key in keys:
            c.add(key)
        for key in keys:
            c.remove(key)
        return 2 * n

    return {
        "key_positions": _best_rate(hashing),
        "add": _best_rate(add),
        "contains_member": _best_rate(contains_member),
        "contains_non_member": _best_rate(contains_other),
        "contains_positions_member": _best_rate(contains_positions),
        "counting_add_or_remove": _best_rate(counting_add_remove),
    }


def build_peers(
    peers: int, channels: int, rng: random.Random
) -> tuple[list[BloomFilter], BitSlicedIndex, list[bytes]]:
    """``peers`` filters sized for ``channels`` at 1%, each holding that many
    random channels drawn from a universe 10x larger; and their index."""
    universe = channels * 10
    filters = []
    m = BloomFilter.for_capacity(channels, 0.01).m
    index = BitSlicedIndex(m)
    for p in range(peers):
        f = BloomFilter(m)
        for i in rng.sample(range(universe), channels):
            f.add(b"channel:%d" % i)
        filters.append(f)
        index.set(p, f)
    queries = [b"channel:%d" % rng.randrange(universe) for _ in range(4000)]
    return filters, index, queries


def route_times(
    filters: Sequence[BloomFilter], index: BitSlicedIndex, queries: Sequence[bytes]
) -> dict[str, float]:
    """Microseconds per query: index, naive loop, and hashing + index."""
    positions = [key_positions(q) for q in queries]
    query = index.query

    def run_index() -> int:
        for pos in positions:
            query(pos)
        return len(positions)

    def run_naive() -> int:
        for pos in positions:
            out = 0
            bit = 1
            for f in filters:
                if f.contains_positions(pos):
                    out |= bit
                bit <<= 1
        return len(positions)

    def run_hash_index() -> int:
        for q in queries:
            query(key_positions(q))
        return len(queries)

    # same answers, or the comparison means nothing
    for pos in positions[:50]:
        naive = sum(1 << p for p, f in enumerate(filters) if f.contains_positions(pos))
        if naive != index.query(pos):
            raise AssertionError("index and per-peer filters disagree")
    # best of several: the machine is shared, the minimum is the least disturbed run
    index_us = 1e6 / _best_rate(run_index, 9)
    naive_us = 1e6 / _best_rate(run_naive, 2 if len(filters) >= 1000 else 3)
    hashed_us = 1e6 / _best_rate(run_hash_index, 9)
    return {"index_us": index_us, "naive_us": naive_us, "hash_and_index_us": hashed_us}


def run(
    peer_counts: Sequence[int] = (10, 100, 1000), channels: int = 1000, keys: int = 100_000
) -> dict[str, Any]:
    """All figures as a JSON-ready dict (``keys``: distinct keys of the single-filter ops)."""
    rng = random.Random(1)
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "loadavg_1m": os.getloadavg()[0],
        "k": DEFAULT_K,
        "ops_per_s": filter_ops(keys),
        "routing": {},
    }
    for peers in peer_counts:
        filters, index, queries = build_peers(peers, channels, rng)
        times = route_times(filters, index, queries)
        times["m"] = index.m
        times["naive_over_index"] = times["naive_us"] / times["index_us"]
        out["routing"][str(peers)] = times
    counts = [str(p) for p in peer_counts]
    if len(counts) > 1:
        first, last = out["routing"][counts[0]], out["routing"][counts[-1]]
        out["index_growth"] = last["index_us"] / first["index_us"]
        out["naive_growth"] = last["naive_us"] / first["naive_us"]
    return out


def markdown(res: dict[str, Any], argv: str) -> str:
    """The body of the ``## bloom`` section."""
    ops = res["ops_per_s"]
    lines = [
        f"Single filter (100,000 distinct keys, for_capacity(100000, 1%), k={res['k']}, "
        f"Python {res['python']}), best of 3, same run:",
        "",
        f"    {argv}",
        "",
        "| operation | ops/s |",
        "|---|---|",
    ]
    names = {
        "key_positions": "key_positions (mmh3 128 + 7 positions)",
        "add": "BloomFilter.add",
        "contains_member": "`key in f` (member)",
        "contains_non_member": "`key in f` (non-member)",
        "contains_positions_member": "contains_positions (pre-hashed)",
        "counting_add_or_remove": "CountingBloomFilter add or remove",
    }
    for key, label in names.items():
        lines.append(f"| {label} | {ops[key]:,.0f} |")
    lines += [
        "",
        "Routing one channel among P peers' filters (each for_capacity(1000, 1%), "
        "1000 channels): BitSlicedIndex.query (k row ANDs) vs the naive loop of "
        "`contains_positions` over the per-peer filters, same precomputed positions, "
        "same answers (checked); microseconds per channel.",
        "",
        "| peers | m | index (us) | naive loop (us) | naive / index | hash + index (us) |",
        "|---|---|---|---|---|---|",
    ]
    for peers, t in res["routing"].items():
        lines.append(
            f"| {peers} | {t['m']} | {t['index_us']:.2f} | {t['naive_us']:.1f} | "
            f"{t['naive_over_index']:.0f}x | {t['hash_and_index_us']:.2f} |"
        )
    if "index_growth" in res:
        lines += [
            "",
            f"From the fewest to the most peers the index time grows "
            f"{res['index_growth']:.2f}x, the naive loop's {res['naive_growth']:.0f}x. "
            "Goal (issue 2): at 1000 peers <= 5 us and >= 100x the naive loop; "
            "growth from 10 to 1000 peers <= 2x. The index's growth is the cost of "
            "ANDing 1000-bit instead of 10-bit ints and of fewer early exits (with "
            "1000 peers the running AND rarely empties before the k-th row); it is "
            "independent of the number of filters tested.",
            f"Load average (1 min) at the start: {res['loadavg_1m']:.2f} on a 2-core "
            "machine shared with other work.",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry of ``python -m bench.bloom``."""
    parser = argparse.ArgumentParser(prog="python -m bench.bloom", description=__doc__)
    parser.add_argument("--peers", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--channels", type=int, default=1000)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    res = run(args.peers, args.channels)
    cmd = "uv run python -m bench.bloom --write"
    body = markdown(res, cmd)
    print(body)
    if args.write:
        from bench.results import update_markdown

        update_markdown(DOC, {"bloom": body})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
