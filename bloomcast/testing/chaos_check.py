"""The chaos checker: what a chaos run recorded, and the verdict on it. Pure
functions over data, so the checker itself is tested with made-up runs
(tests/integration/test_chaos_check.py) before it judges real ones.

What is promised (issue 26; docs/architecture.md §6 "What survives what"),
per (publisher, subscriber) pair while both are alive:

- every message published on the publisher's node X after the subscription
  reached X is delivered to the subscriber once and in order, or counted lost
  by the subscriber's node R in a loss notice (``__bloomcast__:loss``) from
  X whose ``from`` .. ``to`` holds the time X handled it;
- no loss is counted that did not happen: a notice's count is at most the
  number of X's messages of its time range that R did not deliver
  (*phantom* counts are the excess);
- after the last fault heals, every node reconverges (``reconverge_s``).

"The subscription reached X": at the confirmation, when the pair (X, R) had
been clear of faults for ``settle`` seconds before it (X was linked and acked
the filter change: subscribe visibility); else once the pair has been clear
for ``settle`` seconds after it. A publisher's node restarted after the
confirmation (a new process, a new node id) must learn the subscription
again: its messages are owed once the pair has been clear for ``settle``
seconds after it started (it joins, meets R, gets R's filters).

"Alive": a message is excused when, after it was published, the pair never
had ``settle`` clear seconds before the publisher's or the subscriber's node
died (kill -9): it could be neither delivered nor counted by a process that
was gone.

A fault *involves* a pair when it stops or kills either node, cuts or stalls
the path between them (a partition with the two on different sides, a
one-way cut either way) or resets their connections.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: clock slack for loss-notice bounds (the notice rounds to ms)
SLACK_S = 0.002


@dataclass(frozen=True)
class Life:
    """One process of node ``node``: its id, when it started and died (None: alive)."""

    node: int
    node_id: str
    started: float
    ended: float | None = None


@dataclass(frozen=True)
class FaultSpan:
    """One applied fault: its kind, the nodes it names, and when it held.

    ``kind``: ``kill`` / ``pause`` (``nodes`` = (i,)); ``partition`` (``nodes``
    = one side, ``others`` = the other); ``one_way`` (i cannot send to j) /
    ``stall`` (i and j cannot reach each other) / ``reset`` (their connections
    reset, ``start == end``)."""

    kind: str
    nodes: tuple[int, ...]
    start: float
    end: float
    others: tuple[int, ...] = ()

    def involves(self, x: int, r: int) -> bool:
        if self.kind in ("kill", "pause"):
            return x in self.nodes or r in self.nodes
        if self.kind == "partition":
            side = set(self.nodes)
            other = set(self.others)
            return (x in side and r in other) or (r in side and x in other)
        return {x, r} == set(self.nodes) and x != r


@dataclass
class PublisherRecord:
    """A numbered publisher on node ``node``: n -> (sent, answered or None)."""

    name: str
    node: int
    times: dict[int, tuple[float, float | None]]


@dataclass
class SubscriberRecord:
    """A numbered subscriber on one life of node ``node``."""

    name: str
    node: int
    life: int  # index into the node's lives
    confirmed: float
    closed: float | None
    received: list[tuple[str, int]]


@dataclass(frozen=True)
class LossNote:
    """One ``__bloomcast__:loss`` notice seen on a life of node ``node``."""

    node: int
    life: int
    origin: str  # the sending node's id
    lost: int
    start: float  # seconds since the epoch
    end: float


@dataclass
class ChaosRecord:
    """Everything a chaos run recorded."""

    lives: dict[int, list[Life]]
    publishers: list[PublisherRecord]
    subscribers: list[SubscriberRecord]
    notes: list[LossNote]
    faults: list[FaultSpan]
    end: float  # when publishing stopped
    settle: float  # seconds of clear time the bus needs to heal a pair
    last_heal: float
    reconverged: float | None  # when every node was converged again (None: never)
    #: node id of each life alive at the end -> its cluster_stats_publish_lost_to_peers
    lost_to_peers: dict[str, int] = field(default_factory=dict)


@dataclass
class PairVerdict:
    """One (publisher, subscriber) pair's ledger."""

    publisher: str
    subscriber: str
    owed: int = 0
    delivered: int = 0
    counted: int = 0  # owed, not delivered, covered by a loss notice
    uncounted: int = 0  # owed, not delivered, no notice: the failure this exists for
    duplicated: int = 0
    reordered: int = 0
    not_owed: int = 0  # before the subscription reached the publisher's node
    excused: int = 0  # the publisher's or subscriber's process died first
    uncounted_numbers: list[int] = field(default_factory=list, repr=False)


@dataclass
class ChaosVerdict:
    pairs: list[PairVerdict]
    phantom: int  # counted lost beyond what was missing
    phantom_notes: list[LossNote]
    reconverge_s: float | None
    #: (node id, sender-side count, sum of receivers' notes) where they differ
    count_mismatches: list[tuple[str, int, int]]

    def totals(self) -> dict[str, int]:
        keys = ("owed", "delivered", "counted", "uncounted", "duplicated", "reordered")
        out = {k: sum(getattr(p, k) for p in self.pairs) for k in keys}
        out["not_owed"] = sum(p.not_owed for p in self.pairs)
        out["excused"] = sum(p.excused for p in self.pairs)
        out["phantom"] = self.phantom
        return out

    @property
    def clean(self) -> bool:
        t = self.totals()
        return (
            t["uncounted"] == 0
            and t["duplicated"] == 0
            and t["reordered"] == 0
            and not (self.phantom)
        )


def converged(info: dict[str, str], nodes: int) -> bool:
    """A node's CLUSTER INFO says it is converged in a cluster of ``nodes``: it
    knows them all, none suspected, failed or lost, every filter held."""
    return (
        info.get("cluster_state") == "ok"
        and info.get("cluster_known_nodes") == str(nodes)
        and info.get("cluster_filters_converged") == "1"
        and info.get("cluster_nodes_lost", "0") == "0"
        and info.get("cluster_nodes_pfail", "0") == "0"
        and info.get("cluster_nodes_fail", "0") == "0"
    )


def loss_note(node: int, life: int, data: bytes) -> LossNote:
    """A ``__bloomcast__:loss`` notice's JSON as seen on a life of node ``node``."""
    note = json.loads(data)
    return LossNote(node, life, note["node"], note["lost"], note["from"], note["to"])


def merge(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Union of closed intervals, sorted and disjoint."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


class PairClock:
    """When a pair of nodes is clear of faults, and for how long."""

    def __init__(self, faults: Sequence[FaultSpan], x: int, r: int, settle: float) -> None:
        self.bad = merge((f.start, f.end) for f in faults if f.involves(x, r))
        self.settle = settle

    def clear_between(self, start: float, end: float) -> bool:
        return not any(b_start <= end and b_end >= start for b_start, b_end in self.bad)

    def settled_after(self, t: float) -> float:
        """The first time >= ``t`` at which the pair has been clear for ``settle`` s."""
        candidate = t
        if self.clear_between(t - self.settle, t):
            return t
        for _, b_end in self.bad:
            if b_end < t - self.settle:
                continue
            candidate = max(candidate, b_end + self.settle)
            if self.clear_between(candidate - self.settle, candidate):
                return candidate
        return candidate

    def chance_after(self, t: float, deadline: float) -> bool:
        """Whether the pair is clear for ``settle`` s in a row somewhere in
        [``t``, ``deadline``] (time to deliver, or to learn and count a loss)."""
        start = t
        for b_start, b_end in self.bad:
            if b_end < start:
                continue
            if b_start >= start + self.settle:
                break
            start = b_end
        return start + self.settle <= deadline


def _handled_by(sent: float, acked: float | None, life: Life) -> float:
    """The latest time the publisher's node can have handled a PUBLISH: its
    answer, or, unanswered (the publisher gave up on a stopped node), the end
    of that node's life: the request waits in the node's socket buffer for
    as long as the node is stopped (seed 13: sent 20 ms into a 10.8 s
    SIGSTOP, handled at the resume)."""
    if acked is not None:
        return acked
    return life.ended if life.ended is not None else float("inf")


def _life_at(lives: list[Life], t: float) -> int | None:
    for index, life in enumerate(lives):
        if life.started <= t and (life.ended is None or t < life.ended):
            return index
    return None


def check(rec: ChaosRecord) -> ChaosVerdict:
    """The verdict on one chaos run (see the module docstring)."""
    seen: set[tuple[str, int]] = {m for s in rec.subscribers for m in s.received}
    witnessed: dict[tuple[int, int], set[tuple[str, int]]] = defaultdict(set)
    for s in rec.subscribers:
        witnessed[(s.node, s.life)].update(s.received)
    notes_at: dict[tuple[int, int, str], list[LossNote]] = defaultdict(list)
    for note in rec.notes:
        notes_at[(note.node, note.life, note.origin)].append(note)
    pairs: list[PairVerdict] = []
    for pub in rec.publishers:
        x = pub.node
        published = {
            n: (sent, acked)
            for n, (sent, acked) in pub.times.items()
            if acked is not None or (pub.name, n) in seen
        }
        for sub in rec.subscribers:
            pairs.append(_pair(rec, pub, published, sub, notes_at, x))
    phantom, phantom_notes = _phantoms(rec, witnessed)
    return ChaosVerdict(
        pairs,
        phantom,
        phantom_notes,
        None if rec.reconverged is None else rec.reconverged - rec.last_heal,
        _count_mismatches(rec),
    )


def _pair(
    rec: ChaosRecord,
    pub: PublisherRecord,
    published: dict[int, tuple[float, float | None]],
    sub: SubscriberRecord,
    notes_at: dict[tuple[int, int, str], list[LossNote]],
    x: int,
) -> PairVerdict:
    verdict = PairVerdict(pub.name, sub.name)
    r = sub.node
    clock = PairClock(rec.faults, x, r, rec.settle)
    sub_life = rec.lives[r][sub.life]
    starts: dict[int, float] = {}  # publisher life -> when the subscription reached it
    end = sub.closed if sub.closed is not None else rec.end
    receipts: dict[int, int] = defaultdict(int)
    top = 0
    for name, n in sub.received:
        if name != pub.name:
            continue
        receipts[n] += 1
        if receipts[n] == 1:
            if n < top:
                verdict.reordered += 1
            top = max(top, n)
    for n, (sent, acked) in sorted(published.items()):
        if sent < sub.confirmed or sent >= end:
            continue
        handled_by = _life_at(rec.lives[x], sent)
        if handled_by is None:
            continue
        x_life = rec.lives[x][handled_by]
        if handled_by not in starts:
            starts[handled_by] = clock.settled_after(max(sub.confirmed, x_life.started))
        if sent < starts[handled_by]:
            verdict.not_owed += 1
            continue
        got = receipts.get(n, 0)
        if got:
            verdict.owed += 1
            verdict.delivered += 1
            verdict.duplicated += got - 1
            continue
        deadline = min(
            t for t in (x_life.ended, sub_life.ended, rec.end + rec.settle) if t is not None
        )
        if not clock.chance_after(sent, deadline):
            verdict.excused += 1
            continue
        verdict.owed += 1
        upper = _handled_by(sent, acked, x_life)
        notes = notes_at.get((r, sub.life, x_life.node_id), [])
        if any(nt.start - SLACK_S <= upper and nt.end + SLACK_S >= sent for nt in notes):
            verdict.counted += 1
        else:
            verdict.uncounted += 1
            verdict.uncounted_numbers.append(n)
    return verdict


def _phantoms(
    rec: ChaosRecord, witnessed: dict[tuple[int, int], set[tuple[str, int]]]
) -> tuple[int, list[LossNote]]:
    """Notes that count more than the origin's messages of their time range
    that the receiving life did not deliver."""
    by_id = {life.node_id: life for lives in rec.lives.values() for life in lives}
    pubs_on: dict[int, list[PublisherRecord]] = defaultdict(list)
    for pub in rec.publishers:
        pubs_on[pub.node].append(pub)
    phantom = 0
    bad: list[LossNote] = []
    for note in rec.notes:
        origin = by_id.get(note.origin)
        if origin is None:
            continue
        got = witnessed[(note.node, note.life)]
        missing = 0
        for pub in pubs_on[origin.node]:
            for n, (sent, acked) in pub.times.items():
                upper = _handled_by(sent, acked, origin)
                handled = origin.started <= sent and (origin.ended is None or sent < origin.ended)
                in_range = note.start - SLACK_S <= upper and note.end + SLACK_S >= sent
                if handled and in_range and (pub.name, n) not in got:
                    missing += 1
        if note.lost > missing:
            phantom += note.lost - missing
            bad.append(note)
    return phantom, bad


def _count_mismatches(rec: ChaosRecord) -> list[tuple[str, int, int]]:
    """Sender-side counts of frames a peer asked for and no longer held, against
    the receivers' notes from that sender (both sides of each link)."""
    noted: dict[str, int] = defaultdict(int)
    for note in rec.notes:
        noted[note.origin] += note.lost
    return [
        (node_id, sent, noted.get(node_id, 0))
        for node_id, sent in rec.lost_to_peers.items()
        if sent != noted.get(node_id, 0)
    ]


def table(verdict: ChaosVerdict) -> list[str]:
    """The ledger as Markdown rows (docs/benchmarks.md, ``bloomcast bench chaos``)."""
    t = verdict.totals()
    rows = [
        "| owed | delivered | counted lost | lost uncounted | duplicated | reordered "
        "| phantom | not owed | excused | reconverged after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    again = "never" if verdict.reconverge_s is None else f"{verdict.reconverge_s:.1f} s"
    rows.append(
        f"| {t['owed']} | {t['delivered']} | {t['counted']} | {t['uncounted']} "
        f"| {t['duplicated']} | {t['reordered']} | {t['phantom']} | {t['not_owed']} "
        f"| {t['excused']} | {again} |"
    )
    return rows
