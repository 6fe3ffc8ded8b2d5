"""BitSlicedIndex: many peers' Bloom filters of one geometry, sliced by bit.

Row j is an int bitmask of the peers whose filter has bit j set (peers are
small ints: slot numbers the caller maps to node ids). A key may be in peer
P's filter iff bit P is set in every one of its k rows, so a query is k row
ANDs — its cost does not grow with the number of peers (Python ints AND
whole machine words at a time; bit-sliced signatures, Faloutsos 1985; docs/architecture.md §7).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

from bitarray import bitarray

from bloom.bloom_filter import BloomFilter, check_geometry
from bloom.hashing import DEFAULT_K


class BitSlicedIndex:
    """Rows of peer bitmasks for filters of size ``m`` and ``k`` positions."""

    __slots__ = ("_bits", "_folded", "_k", "_m", "_mask", "_members", "_rows")

    def __init__(self, m: int, k: int = DEFAULT_K) -> None:
        """m a power of two >= 8, 1 <= k <= 255 (ValueError otherwise)."""
        check_geometry(m, k)
        self._m = m
        self._k = k
        self._mask = m - 1
        self._rows = [0] * m
        self._members = 0
        self._bits: dict[int, bitarray] = {}  # each peer's bits at this m, for remove
        self._folded = 0  # peers whose filter was larger and folded down

    @property
    def m(self) -> int:
        """Filter size of this index."""
        return self._m

    @property
    def k(self) -> int:
        """Positions per key."""
        return self._k

    @property
    def peers(self) -> int:
        """Bitmask of the peers held (bit P = peer P), as :meth:`query` answers."""
        return self._members

    @property
    def nbytes(self) -> int:
        """Bytes this index holds in the process (``sys.getsizeof`` of the row list,
        every row int and every peer's bit copy): the in-memory cost, as opposed to
        the m/8 bytes per filter on the wire. Rows are ints of up to (highest
        peer slot + 1) bits, so this grows with m x peers / 8 plus per-int overhead."""
        rows = self._rows
        size = sys.getsizeof(rows) + sum(map(sys.getsizeof, rows))
        return size + sum(map(sys.getsizeof, self._bits.values())) + sys.getsizeof(self._bits)

    def __len__(self) -> int:
        return len(self._bits)

    def __contains__(self, peer: int) -> bool:
        return peer in self._bits

    def set(self, peer: int, bloom_filter: BloomFilter) -> None:
        """Hold (or replace) ``peer``'s filter.

        A filter with a larger m is folded down to this index's m (no false
        negatives; a little more FP); a smaller m cannot be unfolded and raises
        ValueError, as does a different k or a negative peer.
        """
        if peer < 0:
            raise ValueError(f"peer must be >= 0, got {peer}")
        if bloom_filter.k != self._k:
            raise ValueError(f"filter has k={bloom_filter.k}, index has k={self._k}")
        folded = False
        if bloom_filter.m > self._m:
            bloom_filter = bloom_filter.fold(self._m)
            folded = True
        elif bloom_filter.m < self._m:
            raise ValueError(
                f"filter has m={bloom_filter.m}, smaller than the index's m={self._m}; "
                "use an index of that size"
            )
        self.remove(peer)
        bit = 1 << peer
        rows = self._rows
        bits = bitarray(bloom_filter.bits)
        for j in bits.search(1):
            rows[j] |= bit
        self._bits[peer] = bits
        self._members |= bit
        if folded:
            self._folded |= bit

    def apply_delta(
        self,
        peer: int,
        set_positions: Iterable[int],
        cleared_positions: Iterable[int],
        flips: Sequence[int] | None = None,
        crc: int = 0,
    ) -> int:
        """Set then clear positions of ``peer``'s filter (reduced with m-1, so
        positions of a filter of this m, as CountingBloomFilter reports them),
        its rows and its held bits (:meth:`held`) in one pass; returns ``crc``
        xored with ``flips[j]`` for each bit j that flipped (a CRC64 kept up
        to date, ``bloom.crc64.bit_flips``), ``crc`` unchanged without ``flips``.

        Idempotent. Raises KeyError for an unknown peer; ValueError when
        clearing in a filter that was folded (its other half is unknown).
        """
        bits = self._bits.get(peer)
        if bits is None:
            raise KeyError(peer)
        bit = 1 << peer
        mask = self._mask
        rows = self._rows
        for p in set_positions:
            j = p & mask
            if not bits[j]:
                bits[j] = 1
                rows[j] |= bit
                if flips is not None:
                    crc ^= flips[j]
        cleared = tuple(cleared_positions)
        if cleared:
            if self._folded & bit:
                raise ValueError(f"peer {peer}'s filter was folded; clear needs a full filter")
            keep = ~bit
            for p in cleared:
                j = p & mask
                if bits[j]:
                    bits[j] = 0
                    rows[j] &= keep
                    if flips is not None:
                        crc ^= flips[j]
        return crc

    def held(self, peer: int) -> bitarray:
        """``peer``'s bits as held (not a copy: :meth:`apply_delta` changes
        them; KeyError when absent)."""
        return self._bits[peer]

    def remove(self, peer: int) -> None:
        """Forget ``peer`` (no-op when absent)."""
        bits = self._bits.pop(peer, None)
        if bits is None:
            return
        keep = ~(1 << peer)
        rows = self._rows
        for j in bits.search(1):
            rows[j] &= keep
        self._members &= keep
        self._folded &= keep

    def filter_of(self, peer: int) -> BloomFilter:
        """A copy of ``peer``'s filter as held (KeyError when absent)."""
        return BloomFilter(self._m, self._k, bitarray(self._bits[peer]))

    def query(self, positions: Sequence[int]) -> int:
        """Bitmask of the peers whose filter contains the key with these unreduced
        positions (from key_positions; the first k are used)."""
        rows = self._rows
        mask = self._mask
        acc = self._members
        if len(positions) != self._k:
            positions = positions[: self._k]
        for p in positions:
            acc &= rows[p & mask]
            if not acc:
                return 0
        return acc

    def __repr__(self) -> str:
        return f"BitSlicedIndex(m={self._m}, k={self._k}, peers={len(self._bits)})"
