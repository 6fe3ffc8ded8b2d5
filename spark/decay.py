"""Forward exponential decay: pure functions and a NumPy reference.

Forward decay (Cormode, Shkapenyuk, Srivastava, Xu, "Forward Decay: A Practical
Time Decay Model for Streaming Systems", ICDE 2009): an item seen at time
``t_i`` gets the weight ``g(t_i - L) = exp(a (t_i - L))`` relative to a landmark
``L``; the decayed count of a key at time ``T`` is

    C(T) = sum_i w_i exp(-a (T - t_i)) = exp(-a (T - L)) * S,   S = sum_i w_i exp(a (t_i - L))

with ``a = ln 2 / half_life`` (a count halves every ``half_life`` seconds).
``S`` is additive, so micro-batches merge by addition and top-k by ``S`` is
top-k by decayed count. ``exp(a (t - L))`` overflows once ``a (t - L) > 709``
(about 1000 half-lives), so we never hold ``S`` against a fixed old landmark:
each batch is summed against its own landmark ``T_b`` (the batch's latest event
time, rounded up), where every exponent is <= 0, and :func:`merge` moves the
landmark of the running state forward to ``max(T_old, T_b)`` (the "landmark
move" of section IV of the paper). :func:`log_forward_sum` is the log-space
(log-sum-exp) form for callers that want a fixed landmark.

Times are seconds (Unix epoch floats), half-lives seconds, rates 1/seconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # NumPy only for the reference sums (the spark extra); the merge is plain
    import numpy.typing as npt

K = TypeVar("K", bound=Hashable)

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_HALF_LIFE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_half_life(text: str) -> float:
    """``"90s"``, ``"1m"``, ``"1h"``, ``"2d"``, ``"30"`` (seconds) -> seconds (> 0).

    Raises ValueError on anything else.
    """
    m = _HALF_LIFE_RE.match(text)
    if not m or float(m[1]) <= 0:
        raise ValueError(f"invalid half-life {text!r} (expected e.g. 30s, 1m, 1h, 1d)")
    return float(m[1]) * _UNITS[m[2] or "s"]


def half_life_label(seconds: float) -> str:
    """Shortest label that :func:`parse_half_life` maps back to ``seconds``: 60 -> ``"1m"``."""
    for unit in ("d", "h", "m", "s"):
        value = seconds / _UNITS[unit]
        if value >= 1 and float(value).is_integer():
            return f"{int(value)}{unit}"
    return f"{seconds:g}s"


def decay_rate(half_life: float) -> float:
    """``a = ln 2 / half_life`` (1/s) for a half-life in seconds."""
    if half_life <= 0:
        raise ValueError("half-life must be > 0")
    return math.log(2.0) / half_life


def decay_factor(rate: float, t_from: float, t_to: float) -> float:
    """``exp(-a (t_to - t_from))``: what a count at ``t_from`` is worth at ``t_to``."""
    return math.exp(-rate * (t_to - t_from))


def merge(
    state: Mapping[str, float],
    state_time: float | None,
    batch: Mapping[str, float],
    batch_time: float,
    rate: float,
) -> tuple[dict[str, float], float]:
    """Add a batch's decayed counts to a running distribution, moving the landmark.

    ``state``: bin -> decayed count at ``state_time`` (None when empty);
    ``batch``: bin -> ``sum w exp(a (t_i - batch_time))`` at ``batch_time``.
    Returns (bin -> decayed count at ``T``, ``T``) with ``T = max(state_time,
    batch_time)``; every factor applied is ``exp(x)`` with ``x <= 0``, so
    nothing overflows.
    """
    t = batch_time if state_time is None else max(state_time, batch_time)
    out: dict[str, float] = {}
    if state:
        f_state = decay_factor(rate, state_time if state_time is not None else t, t)
        for key, value in state.items():
            out[key] = value * f_state
    f_batch = decay_factor(rate, batch_time, t)
    for key, value in batch.items():
        out[key] = out.get(key, 0.0) + value * f_batch
    return out, t


def decay_to(
    counts: Mapping[str, float], counts_time: float, rate: float, now: float
) -> dict[str, float]:
    """Every count of a distribution taken from ``counts_time`` to ``now`` (``now`` may be
    earlier: then counts grow, as forward decay defines it)."""
    f = decay_factor(rate, counts_time, now)
    return {key: value * f for key, value in counts.items()}


def trending(
    short: Mapping[K, float],
    long: Mapping[K, float],
    short_total: float | None = None,
    long_total: float | None = None,
) -> list[tuple[K, float, float, float]]:
    """Trending bins: each bin's share of the short half-life's distribution over
    its share of the long one's, ``(bin, share short, share long, ratio)``, the
    largest ratio first (then the largest short share, then the bin). A bin new
    since the long window (no long share) has an infinite ratio: it ranks first;
    a bin with no short share is left out (decayed away under both).

    The totals are the distributions' sums (given when the mappings hold only
    the heaviest bins, as a node's hot-channels summary does; ``stats top``
    and ``BLOOMCAST.HOTCHANNELS TRENDING`` share this definition)."""
    zs = sum(short.values()) if short_total is None else short_total
    zl = sum(long.values()) if long_total is None else long_total
    rows: list[tuple[K, float, float, float]] = []
    for key, value in short.items():
        share_s = value / zs if zs else 0.0
        share_l = long.get(key, 0.0) / zl if zl else 0.0
        if share_s == 0.0:
            continue
        rows.append((key, share_s, share_l, share_s / share_l if share_l else math.inf))
    rows.sort(key=lambda r: (-r[3], -r[1], str(r[0])))
    return rows


# -- NumPy reference (used by the tests, and by anyone checking the job) --------------


def log_forward_sum(
    times: npt.ArrayLike, weights: npt.ArrayLike, rate: float, landmark: float
) -> float:
    """``log S`` with ``S = sum w_i exp(a (t_i - landmark))``, by log-sum-exp.

    Weights must be >= 0; returns ``-inf`` when every weight is 0.
    """
    import numpy as np

    t = np.asarray(times, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    keep = w > 0
    if not keep.any():
        return float("-inf")
    x = rate * (t[keep] - landmark) + np.log(w[keep])
    top = float(x.max())
    return top + float(np.log(np.exp(x - top).sum()))


def decayed_count(times: npt.ArrayLike, weights: npt.ArrayLike, rate: float, at: float) -> float:
    """``sum w_i exp(-a (at - t_i))`` computed in log space (the reference for the job)."""
    log_s = log_forward_sum(times, weights, rate, at)
    return 0.0 if log_s == float("-inf") else math.exp(log_s)


def decayed_counts_by_key(
    rows: Iterable[tuple[str, float, float]], rate: float, at: float
) -> dict[str, float]:
    """(key, time, weight) rows -> key -> decayed count at ``at`` (NumPy, per key)."""
    grouped: dict[str, tuple[list[float], list[float]]] = {}
    for key, t, w in rows:
        ts, ws = grouped.setdefault(key, ([], []))
        ts.append(t)
        ws.append(w)
    out = {}
    for key, (ts, ws) in grouped.items():
        value = decayed_count(ts, ws, rate, at)
        if value > 0:
            out[key] = value
    return out
