"""Forwarding sessions: PUBLISH forwards that survive reconnects, sans-IO.

antirez in redis/redis #122: "you may lose messages without knowing it ... use
message IDs internally". A session is the stream of forwarded PUBLISH frames
from one node incarnation to another (a node id is an incarnation: a restarted
node has a new one). Its sequence numbers belong to the pair of incarnations,
not to a TCP connection, so a link that drops, stalls or is reset loses
nothing:

- The sender (:class:`OutSession`) numbers each frame and keeps it in a replay
  buffer bounded by bytes and age (``replay_bytes``, ``replay_ms``), whether a
  link is up or not.
- The receiver (:class:`InSession`) delivers exactly the next sequence number
  (go-back-N, as TCP's ancestors did): an older one is a duplicate (dropped,
  counted), a newer one reveals a gap: it is held back and the receiver asks
  for the rest with RESEND(from), once per ``RESEND_RETRY_MS`` until the gap
  closes. Dedup is exact and takes no memory: the contiguous sequence is the
  whole state.
- Each new link starts with SESSION(id, first, next) from the sender, and
  each heartbeat tick repeats it when frames were sent since (so a lost tail,
  with nothing after it to reveal the gap, is found within one period): the
  session's random id, the oldest frame it can still replay and the next it
  will number. A receiver that needs frames the SESSION says are gone
  (``first > expected``) counts nothing yet: it asks RESEND(expected), and the
  sender answers with a SESSION that names the question (``asked``) and
  bounds the publish times of the frames it no longer holds (``gone_from_ms``
  .. ``gone_to_ms``, from the stamps it kept of them). Only that answer is
  counted as lost, ``first - expected`` frames, once, by the receiver, which
  is the only side that knows what arrived (a frame evicted on the sender
  may still have been in flight). Its total for the session rides on each
  RESEND (``lost``) and is what the sender counts as lost to that peer; a
  SESSION carries back what the sender has heard (``peer_lost``), so a
  receiver whose count it has not heard says it again: both sides' counts
  end equal.
- A receiver adopts a session id it does not know at 1: every frame of a new
  session was for it. That is exact only because neither side drops a
  session while the peer may come back: sessions outlive a membership forget
  (the bus drops them when the peer's life has ended: it left, or a new node
  id took its address), so a peer back after a partition resumes its session
  and frames it already got are never counted lost.

Sequence numbers are u32 and compared modulo 2^32 (RFC 1982 serial number
arithmetic), so a session may wrap.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice

import cython

from cluster_bus.frames import Publish

if not cython.compiled:  # (compiled: cluster_bus/_session.pxd cimports the C twin)
    from cluster_bus.codec import encode_publish

#: a RESEND for one session is repeated at most this often while the gap stays
RESEND_RETRY_MS = 100
#: marks of evicted periods an out session keeps for loss notices' time bounds
GONE_MARKS = 64
_MOD = 1 << 32
_HALF = 1 << 31


def seq_diff(a: int, b: int) -> int:
    """a - b in serial number arithmetic (RFC 1982): negative when a is before b."""
    d = (a - b) % _MOD
    return d - _MOD if d >= _HALF else d


def new_session_id() -> int:
    return int.from_bytes(os.urandom(8), "big") or 1


@dataclass(slots=True)
class Period:
    """The heartbeat period the out sessions of one bus share: the stamp their
    frames take (``now``, set each tick) and the sessions the tick must look
    at (``active``: they published this period, or still hold frames), so an
    idle bus's tick costs nothing per peer."""

    now: int = 0
    active: set[OutSession] = field(default_factory=set)


@cython.final
@cython.cclass
class OutSession:
    """The sending half: numbering and the replay buffer of one peer.

    The buffer holds frames only (bytes objects, which the garbage collector
    does not track: a full 64 MiB buffer costs no GC time); their sequence
    numbers are consecutive from ``first_seq``. Frames are stamped with the
    time of the last tick of their :class:`Period` (the bus ticks every
    heartbeat period; a session alone, :meth:`expire`) rather than read from
    the clock per frame, so the age limit holds to within a period; ``_marks``
    keeps one (stamp, first sequence) per period. The first frame of a period
    enters the session in ``period.active``.

    Evicted periods keep their mark in ``_gone`` (at most ``GONE_MARKS``; the
    oldest is kept and the next-oldest merged into it, so each bound stays a
    lower bound), and ``_gone_to`` is an upper bound on the publish time of
    every evicted frame: :meth:`gone_bounds` answers "when were the frames
    from ``seq`` up to ``first_seq`` published" for a loss notice."""

    def __init__(
        self,
        max_bytes: int,
        max_ms: int,
        session_id: int | None = None,
        now: int = 0,
        *,
        period: Period | None = None,
        peer: str = "",
    ) -> None:
        self.session_id = session_id if session_id is not None else new_session_id()
        self.max_bytes = max_bytes
        self.max_ms = max_ms
        self.next_seq = 1
        self.announced = 1  # next_seq when a SESSION last told the peer
        self.period = period if period is not None else Period(now)
        self.peer = peer
        self._frames: deque[bytes] = deque()
        self._keep = self._frames.append  # (bound once: every forward keeps its frame)
        self._first = 1  # sequence number of _frames[0]
        self._bytes = 0
        self._marks: deque[tuple[int, int]] = deque()  # (stamp ms, first seq stamped so)
        self._marked = False
        self._gone: deque[tuple[int, int]] = deque()  # marks of evicted periods
        self._gone_to: int | None = 0  # None: bytes evicted since the last tick
        self.peer_lost = 0  # the receiver's count of frames lost in this session
        self.boot = 0  # the peer's boot (handshake) this session is for; 0: none yet

    def publish(
        self, sender: int, origin_seq: int, shard: bool, channel: bytes, payload: bytes
    ) -> bytes:
        """Number a forwarded PUBLISH, keep its frame for replay, return the frame."""
        seq = self.next_seq
        self.next_seq = seq + 1 if seq != 0xFFFFFFFF else 1  # 0 is never a sequence number
        frame = encode_publish(sender, seq, origin_seq, shard, channel, payload)
        if not self._frames:
            self._first = seq
        self._keep(frame)
        if not self._marked:
            period = self.period
            self._marks.append((period.now, seq))
            self._marked = True
            period.active.add(self)
        self._bytes += len(frame)
        if self._bytes > self.max_bytes:
            self._evict_bytes()
        return frame

    def expire(self, now: int) -> None:
        """Drop frames past the age limit; later frames are stamped ``now``."""
        self.period.now = now
        self._marked = False
        if self._gone_to is None:  # bytes were evicted since the last tick: before now
            self._gone_to = now
        marks = self._marks
        while marks and now - marks[0][0] > self.max_ms:
            self._keep_gone(marks.popleft())
            end = marks[0][1] if marks else self.next_seq
            while self._frames and seq_diff(end, self._first) > 0:
                self._drop_first()
            # frames stamped with the popped mark were published before the
            # tick that stamped the next one (or before now)
            self._gone_to = marks[0][0] if marks else now

    def _evict_bytes(self) -> None:
        while self._frames and self._bytes > self.max_bytes:
            self._drop_first()
        self._gone_to = None  # published before the next tick: resolved there
        marks = self._marks
        while len(marks) > 1 and seq_diff(marks[1][1], self._first) <= 0:
            self._keep_gone(marks.popleft())

    def _keep_gone(self, mark: tuple[int, int]) -> None:
        gone = self._gone
        gone.append(mark)
        if len(gone) > GONE_MARKS:  # keep the oldest: merge the next one into it
            first = gone.popleft()
            gone.popleft()
            gone.appendleft(first)

    def _drop_first(self) -> None:
        self._bytes -= len(self._frames.popleft())
        self._first = self._first + 1 if self._first != 0xFFFFFFFF else 1

    def peer_counted(self, total: int) -> int:
        """A RESEND said the receiver has counted ``total`` frames of this
        session lost: how many more than it had said (0 for a stale one)."""
        more = total - self.peer_lost
        if more <= 0:
            return 0
        self.peer_lost = total
        return more

    def gone_bounds(self, from_seq: int, now: int) -> tuple[int, int]:
        """(lower, upper) bounds, ms since the epoch, on the publish times of the
        frames numbered ``from_seq`` up to :attr:`first_seq` that the buffer
        no longer holds: the stamp of the period ``from_seq`` was numbered in,
        and the latest time any evicted frame can have been published."""
        lower = 0
        for stamp, seq in (*self._gone, *self._marks):
            if seq_diff(seq, from_seq) > 0:
                break
            lower = stamp
        upper = self._gone_to if self._gone_to is not None else now
        return lower, max(lower, upper)

    @property
    def idle(self) -> bool:
        """Nothing to expire and nothing unannounced: the tick may skip it."""
        return not self._frames and not self._marks and self.announced == self.next_seq

    @property
    def held(self) -> int:
        """Frames in the replay buffer."""
        return len(self._frames)

    @property
    def first_seq(self) -> int:
        """The oldest sequence number still in the buffer (next_seq when empty)."""
        return self._first if self._frames else self.next_seq

    @property
    def buffered_bytes(self) -> int:
        return self._bytes

    def replay(self, from_seq: int) -> list[bytes]:
        """The kept frames numbered ``from_seq`` and later, in order."""
        skip = max(0, seq_diff(from_seq, self._first)) if self._frames else 0
        return list(islice(self._frames, skip, None))


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with a PUBLISH that is not the next one: drop it either way;
    ``duplicate``: it was delivered before; ``resend``: ask the sender for
    everything from this sequence number (None: already asked, wait)."""

    duplicate: bool = False
    resend: int | None = None


DUPLICATE = Verdict(duplicate=True)


@cython.final
@cython.cclass
class InSession:
    """The receiving half: the next sequence number expected from one peer."""

    def __init__(self) -> None:
        self.session_id = 0  # none yet
        self.expected = 1
        self.lost = 0  # frames the sender could no longer replay (exact), all sessions
        self.session_lost = 0  # the same, in the current session (told in each RESEND)
        self._asked = 0  # the sequence number last asked for
        self._asked_ms = -RESEND_RETRY_MS
        self._horizon: int | None = None  # 1 + the highest sequence number known sent

    def accept(self, seq: int) -> bool:
        """Whether ``seq`` is the next one (then it is delivered: in order, once)."""
        if seq != self.expected:
            return False
        self.expected = (seq + 1) % _MOD or 1
        return True

    def in_order(self, msgs: Sequence[Publish]) -> int:
        """How many of ``msgs``, from the first, are the next ones: they are
        accepted (to be delivered, in order, once), as :meth:`accept` of each
        would; the rest are for :meth:`accept` / :meth:`out_of_order` one by one."""
        expected = self.expected
        n = 0
        for msg in msgs:
            # msg.seq: a Publish is a tuple, its item read in C when compiled
            seq = cython.cast(tuple, msg)[0] if isinstance(msg, tuple) else msg.seq
            if seq != expected:
                break
            expected = (expected + 1) % _MOD or 1
            n += 1
        self.expected = expected
        return n

    def out_of_order(self, seq: int, now: int) -> Verdict:
        """A PUBLISH that :meth:`accept` refused: a duplicate, or past a gap."""
        if seq_diff(seq, self.expected) < 0:
            return DUPLICATE
        self._extend((seq + 1) % _MOD or 1)
        return Verdict(resend=self._ask(now))

    def _extend(self, horizon: int) -> None:
        if self._horizon is None or seq_diff(horizon, self._horizon) > 0:
            self._horizon = horizon

    def _ask(self, now: int) -> int | None:
        """RESEND from ``expected``, unless that was asked less than
        ``RESEND_RETRY_MS`` ago (the replay may be on its way)."""
        if self._asked == self.expected and now - self._asked_ms < RESEND_RETRY_MS:
            return None
        self._asked, self._asked_ms = self.expected, now
        return self.expected

    @property
    def gap_open(self) -> bool:
        """A gap is known (frames past it seen, or a SESSION said more was sent)."""
        return self._horizon is not None and seq_diff(self._horizon, self.expected) > 0

    def retry(self, now: int) -> int | None:
        """Each heartbeat period: a RESEND to repeat while a known gap stays open
        (frames past it were seen, or a SESSION said more was sent) and the last
        ask is ``RESEND_RETRY_MS`` old: its replay may have been lost as well."""
        horizon = self._horizon
        if horizon is None or seq_diff(horizon, self.expected) <= 0:
            self._horizon = None
            return None
        return self._ask(now)

    def start(
        self,
        session_id: int,
        first: int,
        next_seq: int,
        now: int,
        asked: int = 0,
        peer_lost: int | None = None,
    ) -> tuple[int, int | None]:
        """A SESSION frame: (frames lost for good, sequence to RESEND from or None).

        ``asked``: the RESEND ``from_seq`` this SESSION answers (0: none). Frames
        before ``first`` that we still expect are counted lost only in the
        answer to our RESEND for them (and bounded in time by it); an
        unsolicited SESSION that shows them gone makes us ask. After counting,
        the RESEND from ``first`` tells the sender our count (and asks for the
        replay, if any); ``peer_lost`` below our count (the sender did not hear
        it) makes us tell it again."""
        if session_id != self.session_id:
            # a session we never had: every frame of it was for us, from 1
            self.session_id = session_id
            self.expected = 1
            self.session_lost = 0
            self._horizon = None
            self._asked, self._asked_ms = 0, -RESEND_RETRY_MS
        if seq_diff(first, self.expected) > 0:
            if asked != self.expected:
                self._extend(next_seq)  # next_seq >= first > expected
                return 0, self._ask(now)
            lost = seq_diff(first, self.expected)
            self.lost += lost
            self.session_lost += lost
            self.expected = first
            if seq_diff(next_seq, first) > 0:
                self._extend(next_seq)
            # our count, and the replay from ``first`` (the sender sends it anyway)
            self._asked, self._asked_ms = first, now
            return lost, first
        if seq_diff(next_seq, self.expected) > 0:
            self._extend(next_seq)
            return 0, self._ask(now)
        if peer_lost is not None and peer_lost < self.session_lost:
            return 0, self.expected  # the sender has not heard our count: tell it
        return 0, None
