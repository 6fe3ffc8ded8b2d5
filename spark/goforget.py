"""The opt-in ``goforget`` Redis layout: the decayed distribution as goforget holds one.

bitly's goforget (bitly/forgettable, ``goforget/``, read at 4edcc61) parses a
distribution's bin counts and ``_Z`` with ``strconv.ParseInt`` (a float reads
as 0), stores in ``_T`` the wall-clock Unix time of its last decay, decays by
Poisson draws at an absolute rate (observations per bin per second) from
``_T`` to now, and its update worker sets ``EXPIRE`` on the three keys from the
largest count. The exact layout (:class:`spark.sinks.RedisSink` default) holds
float forward-decay counts against an event-time landmark, which goforget
cannot read. This layout, per distribution ``d`` after each batch:

- the exact state is merged as usual (:func:`spark.decay.merge`), then decayed
  to the wall-clock second ``now`` of the write (:func:`spark.decay.decay_to`);
- ``d``: bin -> ``round(count)`` (half up); bins that round to 0 are left out
  (goforget's ``-prune`` removes bins at 0 the same way);
- ``d._Z``: the sum of those integers; ``d._T``: ``now`` (integer seconds);
- ``EXPIRE`` on ``d``, ``d._Z``, ``d._T``: goforget's own formula,
  ``int((sigma + eta) * eta)`` with ``eta = sqrt(max count / rate)``,
  ``sigma = 2`` (goforget's ``-expire-sigma`` default) and ``rate =``
  :func:`goforget_rate` of the distribution's half-life;
- a distribution whose every bin rounds to 0 is deleted (goforget's update
  worker refuses to write an empty one and lets it expire).

The next batch merges from what is stored (integers at ``_T``), so whatever
goforget did to the distribution in between (its reads decay it and write it
back; its ``/incr`` adds) is kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

#: ``--redis-layout`` values
LAYOUTS = ("exact", "goforget")

#: goforget's ``-expire-sigma`` default (forget.go)
EXPIRE_SIGMA = 2.0


def goforget_rate(half_life: float) -> float:
    """The goforget decay rate (observations per bin per second) we pair with a half-life:
    ``ln 2 / half_life``.

    goforget's decay is linear in time (a bin loses ``Poisson(rate * dt)``
    observations whatever its count); ours is exponential (a bin of count ``c``
    loses ``c ln 2 / h`` per second). The two agree for a bin of count 1 and
    goforget forgets more slowly than exact decay for every larger bin, so a
    reader using this rate never drops a bin the exact decay still holds, and
    goforget's EXPIRE with this rate is never earlier than the time the exact
    largest count needs to fall below 0.5 (``1.44 c h >= h log2(2c)`` for
    ``c >= 1``).
    """
    if half_life <= 0:
        raise ValueError("half-life must be > 0")
    return math.log(2.0) / half_life


def round_counts(counts: Mapping[str, float]) -> dict[str, int]:
    """bin -> count rounded half up; bins that round to 0 (or below) are left out."""
    out = {}
    for key, value in counts.items():
        n = math.floor(value + 0.5)
        if n > 0:
            out[key] = n
    return out


def expire_seconds(max_count: int, rate: float, sigma: float = EXPIRE_SIGMA) -> int:
    """goforget's update-worker TTL (redis_utils.go ``UpdateDistribution``):
    ``int((sigma + eta) * eta)``, ``eta = sqrt(max_count / rate)``."""
    eta = math.sqrt(float(max_count) / rate)
    return int((sigma + eta) * eta)
