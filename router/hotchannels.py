"""What is hot now (issue 51): a bounded summary of this node's channels,
with forward-decayed statistics under three half-lives, updated on every
PUBLISH (a client's and a forwarded one) by one C call on the compiled plane.

The algorithm is space-saving (Metwally, Agrawal, El Abbadi, "Efficient
Computation of Frequent and Top-k Elements in Data Streams", ICDT 2005) on
forward-decayed weights (Cormode, Shkapenyuk, Srivastava, Xu, "Forward Decay",
ICDE 2009; the definitions of :mod:`spark.decay`, which the Spark job uses):
a PUBLISH at time ``t`` adds ``g_h = exp(a_h (t - L))`` to its channel under
each half-life ``h`` (``a_h = ln 2 / h``), landmark ``L``, so that the decayed
count at ``T`` is the forward sum times ``exp(-a_h (T - L))``. Forward weights
only grow with ``t``, so space-saving runs on them unchanged (section V of the
forward-decay paper): the summary holds ``K`` channels; a PUBLISH to a channel
it does not hold, when full, takes the place of the channel with the smallest
count and inherits that count as its ``error``.

**Measures.** Per name and half-life: publishes from this node's clients,
their bytes, local deliveries (of those and of forwarded PUBLISHes), forwards
sent, and PUBLISHes peers forwarded here (``received``). A PUBLISH is counted
as a publish once in the cluster, at its origin, so a cluster-wide sum of
publishes, bytes, deliveries or forwards counts each message once.

**Error bound.** The eviction count is the messages handled here (publishes
+ received) under the 1 m half-life (the issue's "1-minute decayed rate").
For every name ``c``, with ``N`` the node's decayed 1 m count of messages
handled (all names) and ``K`` the size::

    held(c) <= true(c) <= held(c) + error(c),   error(c) <= N / K

and every name whose true decayed count exceeds ``N / K`` is held
(space-saving's guarantee, which holds for any positive increments).
``held(c)`` is counted exactly since the name entered the summary
(``since``), and so is every other statistic of it (each measure under each
half-life): each is a lower bound, exact for a name that entered while the
summary had room (``error`` 0), and the traffic before it entered was at
most ``error`` messages in 1 m terms.

**Time** is passed in (:meth:`HotChannels.tick`, sans-IO; the node's timer
calls it every 100 ms while PUBLISHes come, Redis's ``hz 10``, every second
while none do): a PUBLISH adds the weights of the last tick, so a count is off
by at most the tick (under 0.7 % of a 10 s half-life; up to 7 % for the first
second of a burst after a pause). The landmark moves forward every :data:`LANDMARK_SECONDS` (every
held count multiplied by ``exp(-a_h (T - L))``, section IV of the paper), so
no weight overflows.

**Cost and memory.** A PUBLISH is one probe of an open-addressing table by
the name's hash, four integer additions to its entry (publishes, bytes,
deliveries, forwards: counted since the last tick), one float addition to
its heap key and, unless its entry is a leaf, a sift-down in a binary
min-heap of ``K`` entries (O(log K)); a replacement is O(log K) too (the
heap's root, a deletion and an insertion in the table, no allocation). The
forward weights change only at a tick, so every PUBLISH between two ticks
has the same ones: the tick multiplies each touched entry's counts by them
once (:meth:`Summary.fold`, the same sums as adding each PUBLISH's weights
as it comes), and every reader folds first. Compiled, about 120
instructions a PUBLISH (``bench.hot_path_cg --hot-channels``). The memory is
``K`` entries of :data:`ENTRY_BYTES` (compiled: the object, its heap, table
and fold-list slots, its name's bytes object) plus their names' bytes: at
most ``K x (ENTRY_BYTES + proto-max-bulk-len)`` per kind, whatever the
number of channels; ``K`` is at most :data:`MAX_SIZE`. Channels, patterns
(the messages a pattern matched here) and shard channels (SPUBLISH) are
three summaries.

Apache DataSketches' frequent items (a space-saving variant with purges by
median) was weighed first: its Python binding updates with integer weights
(no forward-decayed floats), is a C++ call through pybind11 (a Python call,
several hundred instructions, per PUBLISH) and keeps one count per item where
this keeps sixteen. The same bound in a Cython class is cheaper on the hot
path; its merge (:func:`merge_rows`) follows Agarwal et al. ("Mergeable
Summaries", PODS 2012): summed counts, summed errors.

Compiled on the compiled data plane (``router._hotchannels``, declared in
``router/_hotchannels.pxd``).
"""

from __future__ import annotations

import math
from typing import Any

import cython

#: the half-lives, seconds (10 s, 1 m, 10 m)
HALF_LIVES = (10.0, 60.0, 600.0)
HALF_LIFE_LABELS = ("10s", "1m", "10m")
#: the statistics of a channel, in the order of :meth:`Entry.values`
MEASURES = ("publishes", "bytes", "deliveries", "forwards", "received")
#: the kinds, as :class:`HotChannels` keeps them
KINDS = ("channel", "pattern", "shard")
#: the landmark moves forward after this long (10 s half-life: exp(125) at most)
LANDMARK_SECONDS = 1800.0
#: bytes of one held entry beside its name's bytes, compiled: the object
#: (240), its heap slot (8), 2 to 4 table slots (32), its fold-list slot (8),
#: its name's bytes object less the name (33)
ENTRY_BYTES = 321
#: the largest size (hot-channels-size): 65,536 names per kind
MAX_SIZE = 1 << 16

if not cython.compiled:  # (compiled: router/_hotchannels.pxd's, in C)

    def _hash(name: bytes) -> int:
        """``hash(name)`` (compiled: the hash the bytes object already cached,
        by the dict lookup of the PUBLISH's subscribers, read in C)."""
        return hash(name)

    def _same(a: bytes, b: bytes) -> bool:
        """Whether two names are equal (compiled: their lengths, then memcmp)."""
        return a == b


_A0 = math.log(2.0) / HALF_LIVES[0]
_A1 = math.log(2.0) / HALF_LIVES[1]
_A2 = math.log(2.0) / HALF_LIVES[2]


@cython.final
@cython.cclass
class Entry:
    """One held name: its forward sums (relative to the summary's landmark):
    ``p*`` publishes from this node's clients, ``b*`` their bytes, ``d*``
    local deliveries (of those and of forwarded ones), ``f*`` forwards sent,
    ``r*`` PUBLISHes peers forwarded here, under the three half-lives;
    ``key`` (``p1 + r1 + err``: the messages handled here) orders the heap.
    ``cp``, ``cb``, ``cd``, ``cf``, ``cr``: the same five counted (integers)
    since the last tick, not yet in the sums (:meth:`fold`); ``touched``:
    the entry is on its summary's list of entries to fold."""

    def __init__(self, name: bytes, pos: int, since: float) -> None:
        self.name = name
        self.h = 0  # hash(name), set by the summary
        self.pos = pos
        self.since = since
        self.key = self.err = 0.0
        self.p0 = self.p1 = self.p2 = 0.0
        self.b0 = self.b1 = self.b2 = 0.0
        self.d0 = self.d1 = self.d2 = 0.0
        self.f0 = self.f1 = self.f2 = 0.0
        self.r0 = self.r1 = self.r2 = 0.0
        self.cp = self.cb = self.cd = self.cf = self.cr = 0
        self.touched = False

    def reset(self, name: bytes, since: float, err: float) -> None:
        """The entry taken by ``name`` (its place and ``touched`` kept: the
        old name's counts since the tick go with it)."""
        self.name = name
        self.since = since
        self.key = self.err = err
        self.p0 = self.p1 = self.p2 = 0.0
        self.b0 = self.b1 = self.b2 = 0.0
        self.d0 = self.d1 = self.d2 = 0.0
        self.f0 = self.f1 = self.f2 = 0.0
        self.r0 = self.r1 = self.r2 = 0.0
        self.cp = self.cb = self.cd = self.cf = self.cr = 0

    def fold(self, g0: float, g1: float, g2: float) -> None:
        """The counts since the last tick into the forward sums at that
        tick's weights (every one of them had those weights: the same sums
        as adding each at its PUBLISH)."""
        if self.cp:
            self.p0 += self.cp * g0
            self.p1 += self.cp * g1
            self.p2 += self.cp * g2
        if self.cb:
            self.b0 += self.cb * g0
            self.b1 += self.cb * g1
            self.b2 += self.cb * g2
        if self.cd:
            self.d0 += self.cd * g0
            self.d1 += self.cd * g1
            self.d2 += self.cd * g2
        if self.cf:
            self.f0 += self.cf * g0
            self.f1 += self.cf * g1
            self.f2 += self.cf * g2
        if self.cr:
            self.r0 += self.cr * g0
            self.r1 += self.cr * g1
            self.r2 += self.cr * g2
        self.cp = self.cb = self.cd = self.cf = self.cr = 0
        self.touched = False

    def scale(self, s0: float, s1: float, s2: float) -> None:
        self.key *= s1
        self.err *= s1
        self.p0 *= s0
        self.p1 *= s1
        self.p2 *= s2
        self.b0 *= s0
        self.b1 *= s1
        self.b2 *= s2
        self.d0 *= s0
        self.d1 *= s1
        self.d2 *= s2
        self.f0 *= s0
        self.f1 *= s1
        self.f2 *= s2
        self.r0 *= s0
        self.r1 *= s1
        self.r2 *= s2

    def values(self, h: int) -> tuple[float, float, float, float, float]:
        """The forward sums under half-life ``h`` (0, 1, 2), in MEASURES' order."""
        if h == 0:
            return (self.p0, self.b0, self.d0, self.f0, self.r0)
        if h == 1:
            return (self.p1, self.b1, self.d1, self.f1, self.r1)
        return (self.p2, self.b2, self.d2, self.f2, self.r2)


@cython.final
@cython.cclass
class Summary:
    """Space-saving over ``k`` names of one kind (module doc): a min-heap of
    :class:`Entry` by ``key``, and an open-addressing table of the entries by
    their name's hash (linear probing, at most half full, backward-shift
    deletion: Knuth's Algorithm R), read in C: a dict's lookup of a bytes key
    that is not the same object costs a rich comparison, twice this table's
    probe on the PUBLISH path (``bench.hot_path_cg --hot-channels``)."""

    def __init__(self, k: int, now: float) -> None:
        self.k = k
        self.heap: list[Entry] = []
        self.size = 0  # len(heap), read in C on the PUBLISH path
        self._size_table(k)
        self.landmark = now
        self.now = now
        self.g0 = self.g1 = self.g2 = 1.0
        #: forward sums of every message handled under 1 m (held or not: the
        #: bound's N) and of every publish from this node's clients under
        #: each half-life (trending's shares)
        self.n1 = 0.0
        self.t0 = self.t1 = self.t2 = 0.0
        #: the same counted since the last tick (messages handled, publishes),
        #: and the entries with counts since then: what :meth:`fold` adds in
        self.cn = self.cp = 0
        self.touched: list[Entry] = []
        #: names that took another's place
        self.replacements = 0

    def _size_table(self, k: int) -> None:
        cap = 8
        while cap < 2 * k:
            cap <<= 1
        self.slots: list[Entry | None] = [None] * cap
        self.mask = cap - 1

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def find(self, name: bytes, h: int) -> Entry | None:
        """The entry of ``name`` (its hash ``h``), or None."""
        slots = self.slots
        mask = self.mask
        i = h & mask
        while True:
            s = slots[i]
            if s is None:
                return None
            e = cython.cast(Entry, s)
            if e.h == h and _same(e.name, name):
                return e
            i = (i + 1) & mask

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def _insert(self, e: Entry) -> None:
        slots = self.slots
        mask = self.mask
        i = e.h & mask
        while slots[i] is not None:
            i = (i + 1) & mask
        slots[i] = e

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def _remove(self, e: Entry) -> None:
        """``e`` out of the table; the entries after it in its run move back
        to where a probe finds them (no tombstones)."""
        slots = self.slots
        mask = self.mask
        i = e.h & mask
        while slots[i] is not e:
            i = (i + 1) & mask
        slots[i] = None
        j = i
        while True:
            j = (j + 1) & mask
            s = slots[j]
            if s is None:
                return
            home = cython.cast(Entry, s).h & mask
            # it stays when its home lies cyclically in (i, j]
            stays = (i < home <= j) if i <= j else (home > i or home <= j)
            if stays:
                continue
            slots[i] = s
            slots[j] = None
            i = j

    def holds(self, name: bytes) -> bool:
        return self.find(name, _hash(name)) is not None

    def tick(self, now: float) -> None:
        """The time (seconds, any clock that only goes forward) of the next updates."""
        if now < self.now:
            return
        self.fold()  # (at the weights the counts since the last tick had)
        self.now = now
        if now - self.landmark > LANDMARK_SECONDS:
            self._move_landmark(now)
        dt = now - self.landmark
        self.g0 = math.exp(_A0 * dt)
        self.g1 = math.exp(_A1 * dt)
        self.g2 = math.exp(_A2 * dt)

    def fold(self) -> None:
        """What was counted since the last tick into the forward sums (the
        tick, and every reader, first)."""
        g0 = self.g0
        g1 = self.g1
        g2 = self.g2
        for e in self.touched:
            e.fold(g0, g1, g2)
        self.touched = []
        if self.cn:
            self.n1 += self.cn * g1
            self.cn = 0
        if self.cp:
            self.t0 += self.cp * g0
            self.t1 += self.cp * g1
            self.t2 += self.cp * g2
            self.cp = 0

    def _move_landmark(self, now: float) -> None:
        dt = now - self.landmark
        s0, s1, s2 = math.exp(-_A0 * dt), math.exp(-_A1 * dt), math.exp(-_A2 * dt)
        for e in self.heap:
            e.scale(s0, s1, s2)
        self.n1 *= s1
        self.t0 *= s0
        self.t1 *= s1
        self.t2 *= s2
        self.landmark = now

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def add(self, name: bytes, nbytes: int, deliveries: int, forwards: int) -> int:
        """One publish of ``nbytes`` to ``name`` from this node's clients,
        delivered to ``deliveries`` local receivers and forwarded to
        ``forwards`` peers (the C call of the PUBLISH path: no allocation
        unless ``name`` is new with room left). Integer counts on the
        entry; the weights are the tick's, multiplied in once per tick and
        entry (:meth:`fold`); only the heap's key is a float added here."""
        self.cn += 1
        self.cp += 1
        h = _hash(name)
        slots = self.slots  # (the probe of :meth:`find`, in line)
        mask = self.mask
        i = h & mask
        while True:
            s = slots[i]
            if s is None:
                e = self._admit(name, h)
                if e is None:
                    return 0
                break
            e = cython.cast(Entry, s)
            if e.h == h and _same(e.name, name):
                break
            i = (i + 1) & mask
        if not e.touched:
            e.touched = True
            self.touched.append(e)
        e.cp += 1
        e.cb += nbytes
        e.cd += deliveries
        e.cf += forwards
        e.key += self.g1
        if 2 * e.pos + 1 < self.size:  # (a leaf has nothing to pass)
            self._sift_down(e.pos)
        return 0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def add_received(self, name: bytes, deliveries: int) -> int:
        """One PUBLISH to ``name`` a peer forwarded here, delivered to
        ``deliveries`` local receivers (its publish and bytes are its origin's)."""
        self.cn += 1
        h = _hash(name)
        slots = self.slots  # (the probe of :meth:`find`, in line)
        mask = self.mask
        i = h & mask
        while True:
            s = slots[i]
            if s is None:
                e = self._admit(name, h)
                if e is None:
                    return 0
                break
            e = cython.cast(Entry, s)
            if e.h == h and _same(e.name, name):
                break
            i = (i + 1) & mask
        if not e.touched:
            e.touched = True
            self.touched.append(e)
        e.cr += 1
        e.cd += deliveries
        e.key += self.g1
        if 2 * e.pos + 1 < self.size:  # (a leaf has nothing to pass)
            self._sift_down(e.pos)
        return 0

    def _admit(self, name: bytes, h: int) -> Entry | None:
        """A place for ``name`` (its hash ``h``): a new entry while there is
        room, else the smallest one's (space-saving's replacement)."""
        heap = self.heap
        n = len(heap)
        if n < self.k:
            e = Entry(name, n, self.now)
            e.h = h
            heap.append(e)
            self.size = n + 1
            self._insert(e)
            self._sift_up(n)  # (a new key 0 goes to the root)
            return e
        if n == 0:
            return None  # K = 0 (off)
        e = cython.cast(Entry, heap[0])
        self._remove(e)
        e.reset(name, self.now, e.key)
        e.h = h
        self._insert(e)
        self.replacements += 1
        return e

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def _sift_up(self, pos: int) -> None:
        heap = self.heap
        e = cython.cast(Entry, heap[pos])
        key = e.key
        while pos > 0:
            parent = (pos - 1) >> 1
            p = cython.cast(Entry, heap[parent])
            if p.key <= key:
                break
            heap[pos] = p
            p.pos = pos
            pos = parent
        heap[pos] = e
        e.pos = pos

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def _sift_down(self, pos: int) -> None:
        heap = self.heap
        n = len(heap)
        start = pos
        e = cython.cast(Entry, heap[pos])
        key = e.key
        while True:
            child = 2 * pos + 1
            if child >= n:
                break
            c = cython.cast(Entry, heap[child])
            if child + 1 < n:
                r = cython.cast(Entry, heap[child + 1])
                if r.key < c.key:
                    child += 1
                    c = r
            if c.key >= key:
                break
            heap[pos] = c
            c.pos = pos
            pos = child
        if pos != start:  # (a hot name usually stays: nothing to write)
            heap[pos] = e
            e.pos = pos

    def resize(self, k: int) -> None:
        """Keep the ``k`` largest (all of them when ``k`` is not smaller)."""
        self.k = k
        if len(self.heap) <= k:
            return
        self.fold()
        keep = sorted(self.heap, key=_by_key, reverse=True)[:k]
        self.heap = []
        self._size_table(k)
        for e in keep:
            e.pos = len(self.heap)
            self.heap.append(e)
            self._insert(e)
            self._sift_up(e.pos)
        self.size = len(self.heap)

    def __len__(self) -> int:
        return len(self.heap)

    def rows(
        self, h: int, now: float
    ) -> list[tuple[bytes, float, float, float, float, float, float, float, float]]:
        """Every held name under half-life ``h`` (0, 1, 2) decayed to ``now``,
        as rates per second (decayed count x ``a_h``, the steady-state rate of
        ``stats top``): (name, publishes/s, bytes/s, deliveries/s, forwards/s,
        received/s, error, seconds held, upper), where ``error`` and ``upper``
        are in messages handled per second under 1 m (publishes + received):
        the most that count may be short by, and the most it may be."""
        self.fold()
        a = math.log(2.0) / HALF_LIVES[h]
        f = a * math.exp(-a * (now - self.landmark))
        fe = _A1 * math.exp(-_A1 * (now - self.landmark))
        out = []
        for e in self.heap:
            p, b, d, fw, r = e.values(h)
            out.append(
                (
                    e.name,
                    p * f,
                    b * f,
                    d * f,
                    fw * f,
                    r * f,
                    e.err * fe,
                    now - e.since,
                    e.key * fe,
                )
            )
        return out

    def total(self, h: int, now: float) -> float:
        """Publishes per second from this node's clients to every name (held
        or not) under half-life ``h``: trending's shares are of this."""
        self.fold()
        a = math.log(2.0) / HALF_LIVES[h]
        t = (self.t0, self.t1, self.t2)[h]
        return float(t * a * math.exp(-a * (now - self.landmark)))

    def handled(self, now: float) -> float:
        """Messages handled per second (publishes + received) under 1 m: ``N``."""
        self.fold()
        return float(self.n1 * _A1 * math.exp(-_A1 * (now - self.landmark)))

    def error_bound(self, now: float) -> float:
        """``N / K`` in 1 m messages handled per second: no held count is off
        by more, and every name above it is held."""
        return self.handled(now) / self.k if self.k else 0.0


def _by_key(e: Entry) -> float:
    return float(e.key)


@cython.final
@cython.cclass
class HotChannels:
    """The node's three summaries (channels, patterns, shard channels), each
    of size ``k`` (``hot-channels-size``)."""

    def __init__(self, k: int, now: float) -> None:
        self.k = k
        self.channels = Summary(k, now)
        self.patterns = Summary(k, now)
        self.shards = Summary(k, now)

    def tick(self, now: float) -> None:
        self.channels.tick(now)
        self.patterns.tick(now)
        self.shards.tick(now)

    def published(
        self, name: bytes, nbytes: int, deliveries: int, forwards: int, shard: bool
    ) -> int:
        """One PUBLISH (``shard``: SPUBLISH) from this node's clients (module doc)."""
        if shard:
            return self.shards.add(name, nbytes, deliveries, forwards)
        return self.channels.add(name, nbytes, deliveries, forwards)

    def received(self, name: bytes, deliveries: int, shard: bool) -> int:
        """One PUBLISH (``shard``: SPUBLISH) a peer forwarded here."""
        if shard:
            return self.shards.add_received(name, deliveries)
        return self.channels.add_received(name, deliveries)

    def matched(self, pattern: bytes, nbytes: int, deliveries: int) -> int:
        """A message ``pattern`` matched here, delivered to ``deliveries``."""
        return self.patterns.add(pattern, nbytes, deliveries, 0)

    def summary(self, kind: str) -> Summary:
        return (
            self.channels
            if kind == "channel"
            else self.shards
            if kind == "shard"
            else self.patterns
        )

    def resize(self, k: int) -> None:
        self.k = k
        self.channels.resize(k)
        self.patterns.resize(k)
        self.shards.resize(k)

    def memory(self) -> int:
        """Bytes held (entries and names), for MEMORY STATS and the docs' bound."""
        total = 0
        for s in (self.channels, self.patterns, self.shards):
            for e in s.heap:
                total += ENTRY_BYTES + len(e.name)
        return total


def top(rows: list[Any], measure: int, count: int) -> list[Any]:
    """The ``count`` rows with the largest value of ``measure`` (0..3), ties by name."""
    return sorted(rows, key=lambda r: (-r[1 + measure], r[0]))[:count]
