"""OppositeBloomFilter: a bounded-memory duplicate check with no false positives.

The "opposite of a Bloom filter" (Jeff Hodges, jmhodges/opposite_of_a_bloom_filter):
a fixed array of ``size`` slots; an item hashes to one slot and overwrites it.
``contains_and_add`` answers True only if the item itself is in its slot, so
it never reports an unseen item as seen (false negatives are possible: a
later item may have overwritten the slot). The full item is stored, so the
guarantee holds exactly, not up to a hash collision.

A duplicate is still caught after x later distinct items with probability
y = (1 - 1/N)^x, so N >= 1 / (1 - y^(1/x)) (:meth:`size_for`).
"""

from __future__ import annotations

import math

import mmh3


class OppositeBloomFilter:
    """``size`` slots of items; ``contains_and_add`` never reports an unseen item."""

    __slots__ = ("_size", "_slots")

    def __init__(self, size: int) -> None:
        """Raises ValueError for size < 1."""
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        self._size = size
        self._slots: list[bytes | None] = [None] * size

    @property
    def size(self) -> int:
        """Number of slots."""
        return self._size

    def _slot(self, item: bytes) -> int:
        return mmh3.mmh3_x64_128_utupledigest(item, 0)[0] % self._size

    def contains_and_add(self, item: bytes) -> bool:
        """True when ``item`` (bytes) was seen and is still in its slot; then or
        otherwise, it now occupies its slot."""
        item = bytes(item)
        i = self._slot(item)
        slots = self._slots
        if slots[i] == item:
            return True
        slots[i] = item
        return False

    def __contains__(self, item: bytes) -> bool:
        return self._slots[self._slot(item)] == bytes(item)

    def discard(self, item: bytes) -> None:
        """Forget ``item`` if it holds its slot (e.g. its processing failed, so a
        retry must not be taken for a duplicate)."""
        item = bytes(item)
        i = self._slot(item)
        if self._slots[i] == item:
            self._slots[i] = None

    @staticmethod
    def size_for(y: float, x: int) -> int:
        """Slots N so that a duplicate is still caught with probability >= y after
        x later distinct items: N = ceil(1 / (1 - y^(1/x))) (from y = (1-1/N)^x).
        Raises ValueError unless 0 < y < 1 and x >= 1."""
        if not 0.0 < y < 1.0:
            raise ValueError(f"y must be in (0, 1), got {y}")
        if x < 1:
            raise ValueError(f"x must be >= 1, got {x}")
        # 1 - y^(1/x) computed as -expm1(ln(y)/x): accurate when it is tiny
        return math.ceil(1.0 / -math.expm1(math.log(y) / x))

    def __repr__(self) -> str:
        return f"OppositeBloomFilter(size={self._size})"
