"""CountingBloomFilter: one saturating 8-bit counter per position, exported as bits.

The exported bit filter is ``counter > 0`` (docs/architecture.md §7). It is kept up to date
incrementally: each add/remove reports the reduced positions whose exported
bit flipped (0 -> 1 on add, 1 -> 0 on remove), which is exactly the material
of a FILTER_DELTA (Summary Cache, Fan et al. 2000).

Counters saturate at 255 and a saturated counter is never decremented (its
true count is unknown, so decrementing could create a false negative; the bit
then stays set until the filter is rebuilt). With ~10 bits per key a counter
reaches 255 only with astronomically small probability (Fan et al.: 4 bits
already suffice in practice).

Contract: callers add each DISTINCT key once (when its first local subscriber
appears) and remove it once (when the last one leaves); the per-key reference
count lives outside the filter (the node's registry). Removing a key that was
never added raises KeyError when it is detectably absent (a zero counter) and
otherwise corrupts the counts, as with any counting filter.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import cython

from bloom.bloom_filter import BloomFilter, check_geometry, estimate_count, m_for_capacity
from bloom.crc64 import bit_flips
from bloom.hashing import DEFAULT_K, SEED, hash128, key_positions

SATURATED: Final = 255
_hash = hash128  # (h1, h2), unsigned 64-bit
#: flipped bits a filter keeps to fold into its fingerprint when it is next
#: read (:meth:`CountingBloomFilter.fingerprint`); past them, it is computed
#: whole then (a CRC64 of m / 8 bytes: ~8 instructions a byte)
PENDING_FLIPS = 128


@cython.final
@cython.cclass
class CountingBloomFilter:
    """Counting Bloom filter of ``m`` counters (power of two >= 8), ``k`` positions.

    Compiled on the compiled data plane (``bloom._counting``, declared in
    ``bloom/_counting.pxd``; :mod:`bloom.dataplane` says which one
    ``bloom.CountingBloomFilter`` is)."""

    __slots__ = (
        "_bits",
        "_bloom",
        "_counters",
        "_flips",
        "_fp",
        "_k",
        "_last_cleared",
        "_last_set",
        "_m",
        "_mask",
        "_pending",
    )

    def __init__(self, m: int, k: int = DEFAULT_K) -> None:
        """Raises ValueError unless m is a power of two >= 8 and 1 <= k <= 255."""
        check_geometry(m, k)
        self._m = m
        self._k = k
        self._mask = m - 1
        self._counters = bytearray(m)
        self._bloom = BloomFilter(m, k)
        self._bits = self._bloom.bits  # (the exported filter's, for life)
        self._last_set: tuple[int, ...] = ()
        self._last_cleared: tuple[int, ...] = ()
        self._fp: int | None = None
        #: the CRC64 change of each bit's flip (None: a big filter, CRC'd whole)
        self._flips = bit_flips(m >> 3)
        #: bits flipped since the fingerprint was read, to update it from the
        #: flip table (:func:`bloom.crc64.bit_flips`) when it is next read (on
        #: a node without a bus, never: issue 48); None: past
        #: :data:`PENDING_FLIPS`, or no flip table, it is computed whole then
        self._pending: list[int] | None = None

    @classmethod
    def for_capacity(cls, n: int, p: float, k: int = DEFAULT_K) -> CountingBloomFilter:
        """Sized so the exported filter's FP rate stays <= p up to n keys."""
        return cls(m_for_capacity(n, p, k), k)

    @classmethod
    def from_keys(cls, keys: Iterable[bytes], m: int, k: int = DEFAULT_K) -> CountingBloomFilter:
        """A filter of size m holding each of ``keys`` (distinct) once: the rebuild
        a node does from its exact subscriptions when it resizes (doubling m when
        ``estimated_fp_rate`` exceeds its target, docs/architecture.md §7)."""
        f = cython.declare(CountingBloomFilter, cls(m, k))
        for key in keys:
            f.add(key)
        f._last_set = ()
        return f

    @property
    def m(self) -> int:
        """Number of counters (= exported bits)."""
        return self._m

    @property
    def k(self) -> int:
        """Hash positions per key."""
        return self._k

    # -- updates ----------------------------------------------------------------------

    def add(self, key: bytes) -> tuple[int, ...]:
        """Insert a distinct key; returns the reduced positions whose bit went 0 -> 1.

        The key's k positions are :func:`bloom.hashing.key_indexes`', made
        here one at a time from the hash's two halves reduced first (issue
        48: on the compiled plane, ``bloom._counting``, C arithmetic and
        the counters read and written in C, no tuple of positions)."""
        h1, h2 = _hash(key, SEED)
        mask = self._mask
        b = h2 & mask
        x = h1 & mask
        counters = self._counters
        flipped: list[int] = []
        for i in range(self._k):
            if i:  # g_i = g_{i-1} + h2 + i(i-1)/2 (bloom.hashing)
                x = (x + b + (i * (i - 1) >> 1)) & mask
            c = counters[x]
            if c == 0:
                counters[x] = 1
                flipped.append(x)
            elif c < SATURATED:
                counters[x] = c + 1
        return self._added(flipped)

    def add_positions(self, positions: tuple[int, ...]) -> tuple[int, ...]:
        """:meth:`add` by unreduced positions (first k used)."""
        mask = self._mask
        counters = self._counters
        flipped: list[int] = []
        for p in positions[: self._k]:
            j = p & mask
            c = counters[j]
            if c == 0:
                counters[j] = 1
                flipped.append(j)
            elif c < SATURATED:
                counters[j] = c + 1
        return self._added(flipped)

    def _added(self, flipped: list[int]) -> tuple[int, ...]:
        """An add's bits set and its flips kept for the fingerprint."""
        if flipped:
            bits = self._bits
            for j in flipped:
                bits[j] = 1
            pending = self._pending  # (see _pending)
            if pending is not None:
                pending += flipped
                if len(pending) > PENDING_FLIPS:
                    self._pending = self._fp = None
        self._last_set = out = tuple(flipped)
        self._last_cleared = ()
        return out

    def remove(self, key: bytes) -> tuple[int, ...]:
        """Remove a key added once; returns the reduced positions whose bit went 1 -> 0.

        Raises KeyError (and changes nothing) if a counter of the key is zero
        (its positions made as :meth:`add` makes them, twice: once to check,
        once to count down)."""
        h1, h2 = _hash(key, SEED)
        mask = self._mask
        b = h2 & mask
        x0 = h1 & mask
        k = self._k
        counters = self._counters
        x = x0
        for i in range(k):
            if i:
                x = (x + b + (i * (i - 1) >> 1)) & mask
            if counters[x] == 0:
                raise KeyError(key)
        flipped: list[int] = []
        x = x0
        for i in range(k):
            if i:
                x = (x + b + (i * (i - 1) >> 1)) & mask
            c = counters[x]
            if c == SATURATED:
                continue  # unknown true count: never decrement
            if c == 1:
                counters[x] = 0
                flipped.append(x)
            elif c:  # 0 only if the counts were already corrupted by a bad remove
                counters[x] = c - 1
        return self._removed(flipped)

    def remove_positions(self, positions: tuple[int, ...], key: object = None) -> tuple[int, ...]:
        """:meth:`remove` by unreduced positions (first k used)."""
        mask = self._mask
        reduced = [p & mask for p in positions[: self._k]]
        counters = self._counters
        for j in reduced:
            if counters[j] == 0:
                raise KeyError(key if key is not None else "positions not in filter")
        flipped: list[int] = []
        for j in reduced:
            c = counters[j]
            if c == SATURATED:
                continue  # (as in remove)
            if c == 1:
                counters[j] = 0
                flipped.append(j)
            elif c:
                counters[j] = c - 1
        return self._removed(flipped)

    def _removed(self, flipped: list[int]) -> tuple[int, ...]:
        """A remove's bits cleared and its flips kept for the fingerprint."""
        if flipped:
            bits = self._bits
            for j in flipped:
                bits[j] = 0
            pending = self._pending  # (see _pending)
            if pending is not None:
                pending += flipped
                if len(pending) > PENDING_FLIPS:
                    self._pending = self._fp = None
        self._last_cleared = out = tuple(flipped)
        self._last_set = ()
        return out

    @property
    def last_set(self) -> tuple[int, ...]:
        """Positions that went 0 -> 1 in the last operation (empty after a remove)."""
        return self._last_set

    @property
    def last_cleared(self) -> tuple[int, ...]:
        """Positions that went 1 -> 0 in the last operation (empty after an add)."""
        return self._last_cleared

    # -- queries --------------------------------------------------------------------------

    def __contains__(self, key: bytes) -> bool:
        return self._bloom.contains_positions(key_positions(key, self._k))

    def contains_positions(self, positions: tuple[int, ...]) -> bool:
        """True when every one of the first k positions has a nonzero counter."""
        return self._bloom.contains_positions(positions)

    def count_at(self, j: int) -> int:
        """The counter at reduced position j (0..255, 255 = saturated)."""
        return self._counters[j]

    @property
    def exported(self) -> BloomFilter:
        """The live exported bit filter (do not modify it; use :meth:`to_bloom` for a copy)."""
        return self._bloom

    def to_bloom(self) -> BloomFilter:
        """A snapshot copy of the exported bits (``counter > 0``), maintained
        incrementally by add/remove, not recomputed from the counters."""
        return self._bloom.copy()

    def fingerprint(self) -> int:
        """CRC64 of the exported bits: the flips since it was last read folded
        in (``_pending``), or computed whole."""
        fp = self._fp
        pending = self._pending
        if fp is None or pending is None:
            fp = self._fp = self._bloom.fingerprint()
            if self._flips is not None:
                self._pending = []
            return fp
        if pending:
            flips = self._flips
            for j in pending:
                fp ^= flips[j]  # type: ignore[index]
            self._fp = fp
            pending.clear()
        return fp

    @property
    def set_bits(self) -> int:
        """Exported bits set (= nonzero counters)."""
        return self._bits.count()

    @property
    def fill_ratio(self) -> float:
        """Set bits / m."""
        return self.set_bits / self._m

    @property
    def estimated_count(self) -> float:
        """Distinct keys, estimated from the exported bits (Swamidass & Baldi)."""
        return estimate_count(self._m, self._k, self.set_bits)

    @property
    def estimated_fp_rate(self) -> float:
        """(X/m)^k of the exported bits."""
        return float(self.fill_ratio**self._k)

    def __repr__(self) -> str:
        return f"CountingBloomFilter(m={self._m}, k={self._k}, set_bits={self.set_bits})"
