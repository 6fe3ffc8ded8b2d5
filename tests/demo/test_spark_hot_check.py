"""The demo's "live hot channels vs Spark (1 m)" check (issue 51 item 4):
:func:`spark_hot_check` on crafted inputs (agreement, a pair swapped beyond
the bound, ties within it, a channel missing, the time skew's share of the
bound), :func:`live_vs_spark` over a Spark file sink written by the job's own
sink (SPUBLISH channels left out, Spark decayed to the live answer's time),
and the half-lives and trending definitions the two sides share."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bloomcast.demo.checks import (
    TICK_LAG,
    live_vs_spark,
    spark_hot_check,
    stated_bound,
)
from bloomcast.demo.drive import HOT_HALF_LIFE, DriveResult
from bloomcast.demo.stats_view import HALF_LIVES, LIVE_DIST, LONG_HALF_LIFE, SHORT_HALF_LIFE
from bloomcast.demo.stats_view import spark_rates as read_spark_rates

#: Spark's rates (per second) of 12 channels, ch.0 the hottest
SPARK = {f"ch.{i}": 12.0 - i for i in range(12)}


def _live(rates: dict[str, float], error: float = 0.05) -> list[tuple[str, float, float]]:
    """A live top 10 as a node ranks it: by rate, then name."""
    ranked = sorted(rates.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    return [(name, rate, error) for name, rate in ranked]


def test_agreement_within_the_bound_passes() -> None:
    # every live rate a little short of Spark's (the summary counts from a
    # channel's entry, a lower bound), within its error
    live = _live({c: r - 0.04 for c, r in SPARK.items()})
    check = spark_hot_check(live, SPARK, skew=0.0)
    assert check.ok, check.detail
    assert check.detail.startswith("10/10 of Spark's channels:1m top 10 in the live top 10")
    assert "max |live - Spark| 0.04/s" in check.detail


def test_a_pair_swapped_beyond_the_bound_fails() -> None:
    live = _live(SPARK)
    live[2], live[3] = ("ch.3", 10.0, 0.05), ("ch.2", 9.0, 0.05)  # Spark: ch.2 10/s, ch.3 9/s
    check = spark_hot_check(live, SPARK, skew=0.0)
    assert not check.ok
    assert "ch.3 ranked above ch.2 (Spark 9/s < 10/s)" in check.detail
    assert "ch.3 live 10/s vs Spark 9/s" in check.detail


def test_ties_within_the_bound_may_go_either_way() -> None:
    spark = dict(SPARK, **{"ch.4": 8.0, "ch.5": 8.06})  # 0.06/s apart: a tie under 0.05 + 0.05
    live = _live(SPARK)
    live[4], live[5] = ("ch.4", 8.04, 0.05), ("ch.5", 8.02, 0.05)  # the live order inverts them
    check = spark_hot_check(live, spark, skew=0.0)
    assert check.ok, check.detail
    # ... and at the 10th place: Spark's ch.10 edges past the live 10th, ch.9 (within the bound)
    spark = dict(SPARK, **{"ch.10": 3.05})
    assert spark_hot_check(_live(SPARK), spark, skew=0.0).ok
    # the same pair 0.2/s apart is no tie: it fails
    spark = dict(SPARK, **{"ch.4": 8.0, "ch.5": 8.2})
    wrong = spark_hot_check(live, spark, skew=0.0)
    assert not wrong.ok and "ch.4 ranked above ch.5" in wrong.detail


def test_a_channel_hot_in_spark_missing_from_the_live_top_fails() -> None:
    spark = dict(SPARK, **{"ch.x": 20.0})
    check = spark_hot_check(_live(SPARK), spark, skew=0.0)
    assert not check.ok
    assert "9/10 of Spark's channels:1m top 10" in check.detail
    assert "ch.x (Spark 20/s) missing from the live top 10, which holds ch.0 (Spark 12/s)" in (
        check.detail
    )
    # with fewer than 10 live rows the live view held every name: a missing one reads as 0/s
    few = spark_hot_check(_live(SPARK)[:5], SPARK, skew=0.0)
    assert not few.ok
    assert "ch.5 (Spark 7/s) missing from the live top 10, which holds only 5" in few.detail


def test_the_skew_is_part_of_the_bound() -> None:
    """Rates 1 % apart with no space-saving error: within a 1 s skew under a 1 m
    half-life (2^(1/60) - 1 = 1.16 %), beyond a 0.1 s one (0.116 %)."""
    live = _live({c: r * 1.01 for c, r in SPARK.items()}, error=0.0)
    grow = math.expm1(math.log(2) / 60)
    assert stated_bound(12.12, 12.0, 0.0, 1.0, 60.0) == pytest.approx(12.12 * grow)
    assert spark_hot_check(live, SPARK, skew=1.0).ok
    near = spark_hot_check(live, SPARK, skew=0.1)
    assert not near.ok and "ch.0 live 12.12/s vs Spark 12/s" in near.detail


def test_no_answer_or_no_spark_channels_fail() -> None:
    assert spark_hot_check([], SPARK, skew=0.0).detail == "no live answer"
    assert not spark_hot_check(_live(SPARK), {}, skew=0.0).ok


def _write_spark_output(out: Path, t: float) -> None:
    """One batch as the job's file sink writes it: ``channels:1m`` counts at ``t``."""
    from spark.aggregate import BatchResult
    from spark.sinks import FileSink

    a = math.log(2) / 60.0
    bins = {c: r / a for c, r in SPARK.items()}  # decayed counts that are SPARK's rates at t
    bins["shard:{3}"] = 30.0 / a  # SPUBLISHed: Spark's channels counts it
    batch = BatchResult(time=t, events=1, malformed=0)
    batch.half_lives[LIVE_DIST], batch.dists[LIVE_DIST] = 60.0, bins
    FileSink(out).write(0, batch)


def test_live_vs_spark_over_the_job_s_file_sink(tmp_path: Path) -> None:
    now = 1_800_000_000.0
    _write_spark_output(tmp_path, now + 2.0)  # window end 2 s after the live read
    rates, window_end = read_spark_rates(tmp_path, now)
    assert window_end == now + 2.0
    assert rates["ch.0"] == pytest.approx(12.0 * 2 ** (2 / 60))  # decayed back to the read
    result = DriveResult(hot_wall=now, hot_round_trip=0.01)
    result.hot_live = [(c, r * 2 ** (2 / 60), 0.02) for c, r, _ in _live(SPARK)]
    result.spublished, result.hot_exact = {"shard:{3}"}, dict.fromkeys(SPARK, 1.0)
    check, rows = live_vs_spark(result, rates, window_end)
    assert check.ok, check.detail
    assert check.detail.startswith("10/10 of Spark's channels:1m top 10")
    assert "window end +2.0 s from the live read" in check.detail
    assert "1 SPUBLISH channels left out" in check.detail
    skew = TICK_LAG + 0.005
    assert rows[0][:3] == ["ch.0", pytest.approx(rates["ch.0"]), pytest.approx(rates["ch.0"])]
    assert rows[0][3] == pytest.approx(0.02 + rates["ch.0"] * math.expm1(math.log(2) * skew / 60))
    # without leaving the SPUBLISH channel out, Spark's hottest is missing live
    result.spublished = set()
    wrong, _ = live_vs_spark(result, rates, window_end)
    assert not wrong.ok and "shard:{3} (Spark" in wrong.detail
    # no Spark output, no live answer: each says so
    none, _ = live_vs_spark(result, {}, None)
    assert none.detail == "the Spark job wrote no channels:1m to compare"
    result.hot_live, result.hot_error = [], "ERR unknown command"
    silent, _ = live_vs_spark(result, rates, window_end)
    assert silent.detail == "no live answer: ERR unknown command"


def test_both_sides_use_the_same_half_lives_and_trending() -> None:
    """The Spark job the demo runs keeps the live summary's half-lives; the
    compared distribution is the live default HALFLIFE 1m; trending is 10 s
    over 10 m on both (BLOOMCAST.HOTCHANNELS TRENDING, spark.decay.trending)."""
    from router.hotchannels import HALF_LIFE_LABELS
    from router.hotchannels import HALF_LIVES as LIVE_SECONDS
    from router.node import HOT_IDLE_TICK_SECONDS
    from spark.decay import parse_half_life

    assert HALF_LIVES == HALF_LIFE_LABELS
    assert [parse_half_life(h) for h in HALF_LIVES] == list(LIVE_SECONDS)
    compared, trend = f"channels:{HALF_LIFE_LABELS[1]}", (HALF_LIFE_LABELS[0], HALF_LIFE_LABELS[2])
    assert (compared, LIVE_SECONDS[1]) == (LIVE_DIST, HOT_HALF_LIFE)
    assert trend == (SHORT_HALF_LIFE, LONG_HALF_LIFE)
    assert HOT_IDLE_TICK_SECONDS == TICK_LAG
