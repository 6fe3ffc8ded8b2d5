"""The chaos checker on made-up runs (bloomcast/testing/chaos_check.py): it must
flag each kind of failure it exists for, and excuse only what it says it does,
before its verdict on a real run means anything."""

from __future__ import annotations

from bloomcast.testing.chaos import schedule
from bloomcast.testing.chaos_check import (
    ChaosRecord,
    FaultSpan,
    Life,
    LossNote,
    PairClock,
    PublisherRecord,
    SubscriberRecord,
    check,
)

X_ID, R_ID, R2_ID = "a" * 40, "b" * 40, "c" * 40
SETTLE = 5.0


def record(
    received: list[int],
    *,
    notes: tuple[LossNote, ...] = (),
    faults: tuple[FaultSpan, ...] = (),
    x_ended: float | None = None,
    confirmed: float = 100.0,
    n: int = 20,
) -> ChaosRecord:
    """Publisher p0 on node 0 publishes 1..n at t = 200 + n (answered 10 ms
    later); one subscriber on node 1 got ``received`` (in that order)."""
    times = {k: (200.0 + k, 200.01 + k) for k in range(1, n + 1)}
    return ChaosRecord(
        lives={0: [Life(0, X_ID, 0.0, x_ended)], 1: [Life(1, R_ID, 0.0)]},
        publishers=[PublisherRecord("p0", 0, times)],
        subscribers=[SubscriberRecord("s", 1, 0, confirmed, None, [("p0", k) for k in received])],
        notes=list(notes),
        faults=list(faults),
        end=300.0,
        settle=SETTLE,
        last_heal=250.0,
        reconverged=251.5,
    )


def totals(rec: ChaosRecord) -> dict[str, int]:
    return check(rec).totals()


def test_every_message_delivered_once_in_order_is_clean():
    v = check(record(list(range(1, 21))))
    assert v.clean and v.totals()["owed"] == 20 and v.totals()["delivered"] == 20
    assert v.reconverge_s == 1.5


def test_a_missing_message_without_a_notice_is_lost_uncounted():
    t = totals(record([k for k in range(1, 21) if k != 7]))
    assert t["uncounted"] == 1 and t["delivered"] == 19


def test_a_notice_of_the_right_origin_and_time_counts_it():
    note = LossNote(1, 0, X_ID, 1, 206.5, 207.5)
    t = totals(record([k for k in range(1, 21) if k != 7], notes=(note,)))
    assert t["counted"] == 1 and t["uncounted"] == 0 and t["phantom"] == 0
    # another origin, or a time range that misses it, counts nothing
    for wrong in (LossNote(1, 0, R2_ID, 1, 206.5, 207.5), LossNote(1, 0, X_ID, 1, 209, 210)):
        assert totals(record([k for k in range(1, 21) if k != 7], notes=(wrong,)))["uncounted"] == 1


def test_counting_more_than_went_missing_is_a_phantom():
    # one message missing in the range, two counted: one phantom
    note = LossNote(1, 0, X_ID, 2, 206.0, 208.5)
    t = totals(record([k for k in range(1, 21) if k != 7], notes=(note,)))
    assert t["phantom"] == 1
    # a notice about messages that all arrived is all phantom
    t = totals(record(list(range(1, 21)), notes=(LossNote(1, 0, X_ID, 3, 201, 204),)))
    assert t["phantom"] == 3


def test_an_unanswered_publish_may_be_handled_any_time_its_node_lives():
    """A PUBLISH sent into a stopped node goes unanswered (the publisher gives
    up) yet is handled when the node resumes, however long after: a notice
    from then that counts it is no phantom (chaos seed 13); counting one
    more is."""
    for lost, phantom in ((1, 0), (2, 1)):
        rec = record(list(range(1, 20)))  # 20 not delivered
        rec.publishers[0].times[20] = (220.0, None)
        rec.notes.append(LossNote(1, 0, X_ID, lost, 231.0, 231.5))  # the resume, 11 s later
        assert totals(rec)["phantom"] == phantom


def test_duplicates_and_reordering_are_flagged():
    t = totals(record([1, 2, 3, 3, 5, 4, *range(6, 21)]))
    assert t["duplicated"] == 1 and t["reordered"] == 1 and t["uncounted"] == 0


def test_a_publisher_node_that_dies_before_any_chance_to_deliver_is_excused():
    # node 0 cut from node 1 from 210 on, and killed at 212: 10..12 never had
    # settle clear seconds, so their loss is excused; 1..9 were delivered
    cut = FaultSpan("stall", (0, 1), 210.0, 260.0)
    rec = record(list(range(1, 10)), faults=(cut,), x_ended=212.5, n=12)
    rec.lives[0].append(Life(0, R2_ID, 214.0))
    t = totals(rec)
    assert t["excused"] == 3 and t["uncounted"] == 0 and t["delivered"] == 9
    # with the same loss and the pair healed long before the kill, it is owed
    healed = FaultSpan("stall", (0, 1), 210.0, 211.0)
    rec = record(list(range(1, 10)), faults=(healed,), x_ended=250.0, n=12)
    assert totals(rec)["uncounted"] == 3


def test_a_subscription_made_across_a_cut_is_owed_once_the_pair_settled():
    # the pair was cut when the subscriber confirmed at 199.5 until 205: the
    # publisher's node could not have the filter; owed from 205 + SETTLE on
    cut = FaultSpan("partition", (0,), 190.0, 205.0, others=(1,))
    rec = record([k for k in range(1, 21) if k >= 10], faults=(cut,), confirmed=199.5)
    t = totals(rec)
    assert t["not_owed"] == 9  # 1..9 were published before 205 + 5 = 210
    assert t["uncounted"] == 0 and t["delivered"] == 11


def test_a_restarted_publisher_node_owes_once_it_could_learn_the_subscription():
    # node 0 killed at 205.5, back at 206 (a new id) while cut from node 1
    # until 208: its new life's messages are owed from 208 + SETTLE on
    kill = FaultSpan("kill", (0,), 205.5, 206.0)
    cut = FaultSpan("stall", (0, 1), 206.0, 208.0)
    rec = record([*range(1, 6), *range(13, 21)], faults=(kill, cut), x_ended=205.5)
    rec.lives[0].append(Life(0, R2_ID, 206.0))
    t = totals(rec)
    assert t["not_owed"] == 7  # 6..12: sent at 206..212, before 208 + 5 = 213
    assert t["uncounted"] == 0 and t["delivered"] == 13
    # the same messages missing with the pair clear all along: owed, uncounted
    rec = record([*range(1, 6), *range(13, 21)], x_ended=205.5)
    rec.lives[0].append(Life(0, R2_ID, 206.0))
    rec.faults = [FaultSpan("kill", (0,), 205.5, 206.0)]
    t = totals(rec)
    assert t["not_owed"] == 5 and t["uncounted"] == 2  # 11, 12: sent at 206 + 5 = 211 and on


def test_pair_clock_and_fault_involvement():
    assert FaultSpan("partition", (0, 1), 0, 1, others=(2,)).involves(0, 2)
    assert not FaultSpan("partition", (0, 1), 0, 1, others=(2,)).involves(0, 1)
    assert FaultSpan("pause", (3,), 0, 1).involves(3, 0)
    assert not FaultSpan("one_way", (0, 1), 0, 1).involves(0, 2)
    clock = PairClock([FaultSpan("kill", (0,), 10, 20), FaultSpan("kill", (1,), 22, 30)], 0, 1, 5)
    assert clock.settled_after(5) == 5 and clock.settled_after(12) == 35
    assert clock.chance_after(12, 35) and not clock.chance_after(12, 34.9)


def test_schedules_are_seeded_bounded_and_never_stack_process_faults():
    a, b = schedule(7, 300), schedule(7, 300)
    assert a == b and a != schedule(8, 300)
    assert all(f.end <= 300 for f in a) and len(a) > 30
    for f in a:  # at every fault's start: at most two at once, one per process
        active = [g for g in a if g.start <= f.start < g.end or g is f]
        assert len(active) <= 2, active
        procs = [g.nodes[0] for g in active if g.kind in ("kill", "pause")]
        assert len(procs) == len(set(procs)), active
    kinds = {f.kind for f in a}
    assert kinds == {"kill", "pause", "partition", "one_way", "stall", "reset"}
    assert any(f.kind == "pause" and f.duration > 12 for f in a)  # past timeout + forget
    assert any(f.kind == "partition" and f.duration > 12 for f in a)
