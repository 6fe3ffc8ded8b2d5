"""A Forget Table over redis-py: categorical distributions that forget old counts.

Key layout and decay rule follow bitly's forgettable/goforget (read there, not
copied): a distribution ``d`` is

- ``d``     sorted set, bin -> integer count;
- ``d._Z``  integer, the sum of the counts (the normaliser);
- ``d._T``  integer Unix seconds of the last decay.

:meth:`ForgetTable.incr` adds to a bin and to ``_Z`` in one MULTI/EXEC (and
sets ``_T`` if absent). Decay happens when the distribution is read: with
``dt = now - _T`` every bin loses ``k ~ Poisson(rate * dt)`` observations,
but never its last one (floor of 1 per bin; with ``prune=True`` a bin may
reach 0 and is removed). The read WATCHes ``d``, ``d._Z`` and ``d._T`` and
writes the decayed counts, ``_Z`` and ``_T = now`` in one MULTI/EXEC; an
``incr`` that lands in between aborts the EXEC, and the read retries from the
new state, so no increment is ever lost. When no bin lost anything, nothing
is written and ``_T`` keeps its value (so frequent reads still decay).

``rate`` is the per-bin decay rate in observations per second; with counts
far above ``rate * dt`` a bin's expected loss is ``rate * dt``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np

if TYPE_CHECKING:
    import redis


@dataclass
class Distribution:
    """One distribution after decay: ``counts`` bin -> count, ``z`` their sum, ``t`` last decay."""

    name: str
    z: int
    t: int | None
    counts: dict[str, int] = field(default_factory=dict)

    def probability(self, bin_name: str) -> float:
        """``count / Z`` (0 when empty)."""
        return self.counts.get(bin_name, 0) / self.z if self.z else 0.0

    def most_probable(self, n: int) -> list[tuple[str, int, float]]:
        """The ``n`` largest bins as (bin, count, probability), largest first, ties by name."""
        ranked = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
        return [(b, c, self.probability(b)) for b, c in ranked]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class ForgetTable:
    """Forget Table operations on one Redis (any redis-py ``Redis`` client, or fakeredis).

    ``rate``: decay rate per bin, 1/s. ``prune``: let bins decay to 0 and
    disappear (default keeps a floor of 1, as goforget). ``clock``: Unix
    seconds (injectable for tests). ``rng``: NumPy generator for the Poisson
    draws. ``removed`` counts the observations this instance's decays removed.
    """

    def __init__(
        self,
        client: redis.Redis,
        rate: float,
        *,
        prune: bool = False,
        clock: Callable[[], float] = time.time,
        rng: np.random.Generator | None = None,
    ) -> None:
        if rate < 0:
            raise ValueError("rate must be >= 0")
        self.client = client
        self.rate = rate
        self.prune = prune
        self.clock = clock
        self.rng = rng if rng is not None else np.random.default_rng()
        #: observations removed by this instance's committed decays
        self.removed = 0

    def incr(self, dist: str, bin_name: str, n: int = 1) -> None:
        """Add ``n`` observations of ``bin_name`` (ZINCRBY, INCRBY _Z, SETNX _T in one MULTI)."""
        self.incr_many(dist, [bin_name], n)

    def incr_many(self, dist: str, bins: list[str], n: int = 1) -> None:
        """Add ``n`` observations to each of ``bins`` in one MULTI/EXEC."""
        with self.client.pipeline(transaction=True) as pipe:
            for b in bins:
                pipe.zincrby(dist, n, b)
            pipe.incrby(f"{dist}._Z", n * len(bins))
            pipe.setnx(f"{dist}._T", int(self.clock()))
            pipe.execute()

    def decay(self, dist: str) -> Distribution:
        """Apply the Poisson decay due since ``_T`` and return the distribution."""
        import redis as redis_mod

        z_key, t_key = f"{dist}._Z", f"{dist}._T"
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(dist, z_key, t_key)
                    pairs = cast(
                        "list[tuple[bytes, float]]", pipe.zrange(dist, 0, -1, withscores=True)
                    )
                    raw_t = pipe.get(t_key)
                    counts = {_text(b): round(s) for b, s in pairs}
                    now = int(self.clock())
                    t = int(raw_t) if raw_t is not None else None
                    if t is None or not counts or now <= t or self.rate == 0:
                        pipe.unwatch()
                        return Distribution(dist, sum(counts.values()), t, counts)
                    lost = self.rng.poisson(self.rate * (now - t), size=len(counts))
                    decayed: dict[str, int] = {}
                    changed = False
                    for (b, c), k in zip(counts.items(), lost.tolist(), strict=True):
                        keep_floor = 0 if self.prune else 1
                        new = max(c - k, min(c, keep_floor))
                        changed |= new != c
                        decayed[b] = new
                    if not changed:
                        pipe.unwatch()
                        return Distribution(dist, sum(counts.values()), t, counts)
                    kept = {b: c for b, c in decayed.items() if c > 0}
                    z = sum(kept.values())
                    pipe.multi()
                    gone = [b for b, c in decayed.items() if c <= 0]
                    if gone:
                        pipe.zrem(dist, *gone)
                    if kept:
                        pipe.zadd(dist, dict(kept))
                    pipe.set(z_key, z)
                    pipe.set(t_key, now)
                    pipe.execute()
                    self.removed += sum(counts.values()) - z
                    return Distribution(dist, z, now, kept)
                except redis_mod.WatchError:
                    continue

    def dist(self, dist: str) -> Distribution:
        """The whole distribution, decayed to now."""
        return self.decay(dist)

    def get(self, dist: str, bin_name: str) -> tuple[int, float]:
        """(count, probability) of one bin, decayed to now."""
        d = self.decay(dist)
        return d.counts.get(bin_name, 0), d.probability(bin_name)

    def nmostprobable(self, dist: str, n: int) -> list[tuple[str, int, float]]:
        """The ``n`` most probable bins (bin, count, probability), decayed to now."""
        return self.decay(dist).most_probable(n)
