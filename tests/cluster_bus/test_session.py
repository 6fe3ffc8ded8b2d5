"""Forwarding sessions, sans-IO: numbering, the replay buffer, in-order
exactly-once delivery over a lossy, duplicating link with reconnects, and the
exact count of what the buffer could no longer replay."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_bus.decoder import FrameDecoder
from cluster_bus.frames import Publish
from cluster_bus.session import RESEND_RETRY_MS, InSession, OutSession, seq_diff


def decode(frame: bytes) -> Publish:
    (msg,) = FrameDecoder().feed(frame)
    assert isinstance(msg, Publish)
    return msg


def test_numbering_and_buffer_limits():
    out = OutSession(max_bytes=3 * 32, max_ms=1000, session_id=7)
    frames = []
    for i in range(5):
        out.expire(now=i)  # the tick stamps what follows
        frames.append(out.publish(0xAB, 100 + i, False, b"c", b"%d" % i))  # 32 bytes each
    assert decode(frames[0]) == Publish(1, 100, False, b"c", b"0")
    assert out.next_seq == 6 and out.first_seq == 3 and out.buffered_bytes == 3 * 32
    assert out.replay(4) == frames[3:]
    out.expire(now=1003)  # frame 3 (stamped 2) is now older than max_ms
    assert out.first_seq == 4
    out.expire(now=2000)
    assert out.first_seq == out.next_seq == 6 and out.buffered_bytes == 0


def test_age_eviction_after_bytes_eviction_keeps_the_newer_frames():
    out = OutSession(max_bytes=2 * 32, max_ms=100, session_id=3)
    out.expire(now=0)
    for i in range(3):  # stamped 0; the first is evicted by bytes
        out.publish(1, i, False, b"c", b"a")
    out.expire(now=50)
    newer = out.publish(1, 9, False, b"c", b"b")  # stamped 50; evicts the second
    assert out.first_seq == 3
    out.expire(now=101)  # the stamp-0 frames are too old, the stamp-50 one is not
    assert out.first_seq == 4 and out.replay(4) == [newer]


def test_in_order_duplicate_and_gap():
    s = InSession()
    s.start(9, 1, 1, now=0)
    assert s.accept(1) and s.accept(2)
    assert not s.accept(2) and s.out_of_order(2, now=0).duplicate
    assert not s.accept(5)
    assert s.out_of_order(5, now=1000).resend == 3
    assert s.out_of_order(6, now=1000 + RESEND_RETRY_MS - 1).resend is None  # asked already
    assert s.out_of_order(6, now=1000 + RESEND_RETRY_MS).resend == 3
    assert s.accept(3) and s.expected == 4


def test_an_open_gap_is_asked_again_each_period_until_it_closes():
    s = InSession()
    s.start(9, 1, 1, now=0)
    assert s.retry(now=1000) is None  # nothing known missing
    assert s.out_of_order(4, now=1000).resend == 1  # 1..3 missing
    assert s.retry(now=1000 + RESEND_RETRY_MS - 1) is None  # just asked
    assert s.retry(now=1000 + RESEND_RETRY_MS) == 1  # the replay was lost too
    assert s.accept(1) and s.accept(2) and s.accept(3)
    assert s.retry(now=5000) == 4  # 4 was seen before, but never delivered
    assert s.accept(4)
    assert s.retry(now=9000) is None


def test_a_loss_is_counted_only_in_the_answer_to_our_resend():
    s = InSession()
    assert s.start(1, 1, 1, now=0) == (0, None)
    assert s.accept(1)
    # reconnect: the sender now holds 5..9 only; 2..4 are gone. An unsolicited
    # SESSION counts nothing: we ask for 2 (the sender then counts and bounds)
    assert s.start(1, 5, 10, now=10) == (0, 2)
    assert s.lost == 0 and s.expected == 2 and s.gap_open
    # its answer names our question: 3 lost; we tell the sender (RESEND from 5,
    # which is also the replay it sends anyway)
    assert s.start(1, 5, 10, now=20, asked=2) == (3, 5)
    assert s.lost == s.session_lost == 3 and s.expected == 5
    assert s.retry(now=20 + RESEND_RETRY_MS) == 5  # the replay did not come: ask again
    # an answer to an older question counts nothing twice (it asks for the replay)
    assert s.start(1, 5, 10, now=500, asked=2) == (0, 5)
    assert s.lost == 3
    # nothing missing, but the sender has not heard our count: we say it again
    assert s.accept(5) and all(s.accept(k) for k in range(6, 10))
    assert s.start(1, 5, 10, now=900, peer_lost=0) == (0, 10)
    assert s.start(1, 5, 10, now=910, peer_lost=3) == (0, None)


def test_a_session_we_never_had_is_owed_to_us_from_one():
    s = InSession()
    s.start(1, 1, 3, now=0)
    assert s.accept(1) and s.accept(2)
    # the sender dropped our old session and numbers a new one: every frame of
    # it was for us, so the two it no longer holds are lost
    assert s.start(2, 3, 5, now=10) == (0, 1)
    assert s.start(2, 3, 5, now=20, asked=1) == (2, 3)
    assert s.expected == 3 and s.session_id == 2 and s.session_lost == 2


def test_the_sender_counts_what_the_receiver_says_it_counted():
    out = OutSession(max_bytes=1 << 20, max_ms=100, session_id=8)
    assert out.peer_counted(7) == 7
    assert out.peer_counted(7) == 0  # said again: counted already
    assert out.peer_counted(5) == 0  # a stale RESEND, overtaken
    assert out.peer_counted(12) == 5 and out.peer_lost == 12


def test_gone_bounds_hold_the_publish_times_of_evicted_frames():
    out = OutSession(max_bytes=1 << 20, max_ms=1000, session_id=5)
    times = {}
    for period_start in (0, 100, 200):  # three ticks, two frames each
        out.expire(now=period_start)
        for j in range(2):
            times[out.next_seq] = period_start + 10 * (j + 1)  # published inside the period
            out.publish(1, 0, False, b"c", b"x")
    assert out.gone_bounds(1, now=250) == (0, 0)  # nothing evicted yet
    out.expire(now=1150)  # age: the stamp-0 and stamp-100 periods are gone
    assert out.first_seq == 5
    low, high = out.gone_bounds(3, now=1150)
    assert low <= times[3] and high >= times[4]
    assert (low, high) == (100, 200)  # tight: frame 3's period, and the next stamp
    assert out.gone_bounds(1, now=1150)[0] == 0
    # eviction by bytes: bounded above by the next tick
    small = OutSession(max_bytes=2 * 32, max_ms=10_000, session_id=6)
    small.expire(now=500)
    for _ in range(3):
        small.publish(1, 0, False, b"c", b"1")  # 32 bytes each: the first is evicted
    assert small.first_seq == 2
    assert small.gone_bounds(1, now=530) == (500, 530)
    small.expire(now=600)
    assert small.gone_bounds(1, now=900) == (500, 600)


def test_sequence_numbers_wrap():
    assert seq_diff(1, 0xFFFFFFFF) == 2 and seq_diff(0xFFFFFFFF, 1) == -2
    out = OutSession(1 << 20, 10_000)
    out.next_seq = 0xFFFFFFFF
    assert decode(out.publish(1, 1, False, b"c", b"")).seq == 0xFFFFFFFF
    assert decode(out.publish(1, 2, False, b"c", b"")).seq == 1  # 0 is never used
    s = InSession()
    s.expected = 0xFFFFFFFF
    assert s.accept(0xFFFFFFFF) and s.accept(1)


def run_link(seed: int, drop: float, dup: float, cuts: int, frames: int, max_bytes: int):
    """A sender and a receiver joined by a link that drops and duplicates
    frames (as a faulty middlebox would) and is cut ``cuts`` times (a cut drops
    what is in flight; the new link starts with SESSION); every 15 steps the
    sender's tick announces its session when it sent since the last tick, and
    keeps doing so while the link is quiet. Returns (delivered, lost count)."""
    rng = random.Random(seed)
    out = OutSession(max_bytes, 1_000_000, session_id=42)
    inn = InSession()
    delivered: list[int] = []
    to_receiver: list[tuple] = [("session", out.session_id, out.first_seq, out.next_seq, 0, 0)]
    to_sender: list[tuple] = []
    now = 0
    cut_at = set(rng.sample(range(frames), cuts))
    counted = [0]  # what the receiver counted lost, from the answers
    sender_counted = [0]  # what the sender counted, answering (both sides agree)

    def wire(queue: list[tuple], msg: tuple) -> None:
        if rng.random() < drop:
            return
        queue.append(msg)
        if rng.random() < dup:
            queue.append(msg)

    announced = out.next_seq
    for i in range(frames + 3000):
        now += 7
        if i % 15 == 0 and out.next_seq != announced:  # the heartbeat tick
            announced = out.next_seq
            wire(
                to_receiver,
                ("session", out.session_id, out.first_seq, out.next_seq, 0, out.peer_lost),
            )
        if i % 15 == 0:
            out.expire(now)
        if i < frames:
            seq = out.next_seq
            frame = out.publish(1, i, False, b"c", i.to_bytes(4, "big"))
            wire(to_receiver, ("publish", seq, frame))
            if i in cut_at:  # the link resets: in flight is gone, a new one opens
                to_receiver.clear()
                to_sender.clear()
                to_receiver.append(
                    ("session", out.session_id, out.first_seq, out.next_seq, 0, out.peer_lost)
                )
        while to_receiver:
            msg = to_receiver.pop(0)
            if msg[0] == "session":
                asked = msg[4] if len(msg) > 4 else 0
                lost_now, resend = inn.start(msg[1], msg[2], msg[3], now, asked, msg[-1])
                counted[0] += lost_now
                if resend is not None:
                    wire(to_sender, ("resend", resend, inn.session_lost))
            elif inn.accept(msg[1]):
                delivered.append(int.from_bytes(msg[2][-4:], "big"))
            else:
                resend = inn.out_of_order(msg[1], now).resend
                if resend is not None:
                    wire(to_sender, ("resend", resend, inn.session_lost))
        while to_sender:
            _, from_seq, their_count = to_sender.pop(0)
            sender_counted[0] += out.peer_counted(their_count)
            if seq_diff(from_seq, out.first_seq) < 0:  # gone: the answer names it
                answer = (
                    "session",
                    out.session_id,
                    out.first_seq,
                    out.next_seq,
                    from_seq,
                    out.peer_lost,
                )
                wire(to_receiver, answer)
                from_seq = out.first_seq
            for seq, frame in zip(range(from_seq, out.next_seq), out.replay(from_seq), strict=True):
                wire(to_receiver, ("publish", seq, frame))
        if i > frames and i % 15 == 0:  # quiet: each tick re-announces until all is in
            wire(
                to_receiver,
                ("session", out.session_id, out.first_seq, out.next_seq, 0, out.peer_lost),
            )
    assert counted[0] == inn.lost
    assert sender_counted[0] == inn.lost, (sender_counted[0], inn.lost)
    return delivered, inn.lost


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    drop=st.sampled_from([0.0, 0.02, 0.1]),
    dup=st.sampled_from([0.0, 0.1]),
    cuts=st.integers(0, 5),
)
def test_lossy_link_with_a_big_buffer_delivers_each_frame_once_in_order(seed, drop, dup, cuts):
    delivered, lost = run_link(seed, drop, dup, cuts, frames=200, max_bytes=1 << 20)
    assert delivered == list(range(200)) and lost == 0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), cuts=st.integers(1, 5))
def test_with_a_small_buffer_every_frame_is_delivered_or_counted_lost(seed, cuts):
    delivered, lost = run_link(seed, drop=0.1, dup=0.1, cuts=cuts, frames=200, max_bytes=8 * 35)
    assert delivered == sorted(delivered) and len(set(delivered)) == len(delivered)
    assert len(delivered) + lost == 200
