"""Forward decay helpers (spark/decay.py) against direct NumPy sums."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark.decay import (
    decay_rate,
    decay_to,
    decayed_count,
    decayed_counts_by_key,
    half_life_label,
    log_forward_sum,
    merge,
    parse_half_life,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m", 60.0), ("1h", 3600.0), ("90s", 90.0), ("30", 30.0), ("2d", 172800.0), ("500ms", 0.5)],
)
def test_parse_half_life(text, seconds):
    assert parse_half_life(text) == seconds
    assert parse_half_life(half_life_label(seconds)) == seconds


@pytest.mark.parametrize("bad", ["", "0s", "-1m", "1y", "m", "1.m"])
def test_parse_half_life_rejects(bad):
    with pytest.raises(ValueError, match="half-life"):
        parse_half_life(bad)


def test_half_life_halves_the_count():
    a = decay_rate(60.0)
    assert decayed_count([0.0], [1.0], a, 60.0) == pytest.approx(0.5, rel=1e-15)
    assert decayed_count([0.0, 60.0], [1.0, 1.0], a, 120.0) == pytest.approx(0.75, rel=1e-15)


batches_strategy = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.floats(0, 5000, allow_nan=False),
            st.floats(0.5, 10, allow_nan=False),
        ),
        min_size=1,
        max_size=20,
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(batches=batches_strategy, half_life=st.sampled_from([1.0, 60.0, 3600.0]))
def test_merging_batches_equals_one_sum(batches, half_life):
    """Per-batch sums against each batch's landmark, merged with landmark moves, equal
    the direct sum over all events at the final time (the additivity of forward decay)."""
    a = decay_rate(half_life)
    state: dict[str, float] = {}
    t_state = None
    for batch in batches:
        t_b = math.ceil(max(t for _, t, _ in batch))
        sums: dict[str, float] = {}
        for k, t, w in batch:
            sums[k] = sums.get(k, 0.0) + w * math.exp(a * (t - t_b))
        state, t_state = merge(state, t_state, sums, t_b, a)
    rows = [r for batch in batches for r in batch]
    want = decayed_counts_by_key(rows, a, t_state)
    for k, w in want.items():
        if w > 1e-250:  # values that have decayed to the bottom of the double range
            assert state[k] == pytest.approx(w, rel=1e-9)


def test_no_overflow_far_from_any_landmark():
    """a (t - L) of 2e7 would overflow exp(); the log-space sum and the landmark moves don't."""
    a = decay_rate(0.05)  # 50 ms half-life
    t = 1_700_000_000.0
    log_s = log_forward_sum([t, t + 1.0], [1.0, 3.0], a, 0.0)
    assert math.isfinite(log_s) and log_s > 700
    # relative to a recent landmark it is the plain formula
    assert math.exp(log_forward_sum([t, t + 1.0], [1.0, 3.0], a, t + 1.0)) == pytest.approx(
        math.exp(-a) + 3.0, rel=1e-12
    )
    state, t_state = merge({}, None, {"x": 1.0}, t, a)
    for i in range(1, 200):
        state, t_state = merge(state, t_state, {"x": 1.0}, t + i * 1000.0, a)
        assert all(math.isfinite(v) for v in state.values())
    assert state["x"] == pytest.approx(1.0)
    assert decayed_count([0.0], [0.0], a, 1.0) == 0.0


def test_decay_to_and_numpy_reference_agree():
    rng = np.random.default_rng(0)
    times = rng.uniform(0, 1000, 500)
    weights = rng.uniform(0, 3, 500)
    a = decay_rate(120.0)
    at = 1000.0
    direct = float(np.sum(weights * np.exp(-a * (at - times))))
    assert decayed_count(times, weights, a, at) == pytest.approx(direct, rel=1e-12)
    later = decay_to({"k": direct}, at, a, at + 120.0)
    assert later["k"] == pytest.approx(direct / 2, rel=1e-12)
