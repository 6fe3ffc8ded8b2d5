"""INFO's instantaneous_* rates (router.stats.InstantaneousMetrics), sampled
lazily, and how a batch's time is shared for commandstats usec: driven here
with made-up clocks and durations, so nothing depends on timing."""

from __future__ import annotations

from router.stats import PERIOD, SAMPLES, CommandStat, InstantaneousMetrics, share_time


def test_steady_traffic_gives_its_rate():
    m = InstantaneousMetrics(0.0)
    for i in range(1, 40):  # a sample every 100 ms: 50 commands, 1000 B in, 2000 B out each
        m.sample(i * PERIOD, (50 * i, 1000 * i, 2000 * i))
    ops, net_in, net_out = m.rates()
    assert round(ops) == 500 and round(net_in) == 10_000 and round(net_out) == 20_000


def test_a_gap_without_samples_is_spread_over_its_periods():
    m = InstantaneousMetrics(0.0)
    # nothing sampled for 0.8 s, then 80 commands: 8 periods at 100 ops/s each
    m.sample(8 * PERIOD, (80, 0, 0))
    assert round(m.rates()[0]) == round(100 * 8 / SAMPLES)


def test_less_than_a_period_takes_no_sample():
    m = InstantaneousMetrics(0.0)
    m.sample(PERIOD / 2, (10, 10, 10))
    assert m.rates() == (0.0, 0.0, 0.0)


def test_a_long_idle_time_forgets_old_traffic():
    m = InstantaneousMetrics(0.0)
    m.sample(PERIOD, (100, 0, 0))
    m.sample(PERIOD + 10.0, (100, 0, 0))  # 10 s idle: every sample is 0
    assert m.rates()[0] == 0.0


def test_reset_starts_over():
    m = InstantaneousMetrics(0.0)
    m.sample(PERIOD, (100, 100, 100))
    m.reset(PERIOD, (0, 0, 0))
    assert m.rates() == (0.0, 0.0, 0.0)


def test_a_batch_of_one_command_gets_all_its_time():
    stat = CommandStat()
    share_time([(stat, 16)], 1600)
    assert stat.nanoseconds == 1600


def test_a_mixed_batch_is_shared_by_count():
    a, b = CommandStat(), CommandStat()
    share_time([(a, 3), (b, 1), (a, 4)], 1600)
    assert (a.nanoseconds, b.nanoseconds) == (1400, 200)
