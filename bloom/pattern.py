"""PatternFilter: the filter of PSUBSCRIBE patterns, by literal prefix (redis/redis #122).

A glob pattern (Redis ``stringmatchlen`` syntax) can only match channels that
start with its literal prefix: the bytes before the first unescaped ``*``,
``?`` or ``[``, with ``\\x`` unescaped to ``x``. The filter stores each
pattern's prefix, cut to at most ``max_prefix`` bytes, in a counting filter,
and keeps, with counts, the set of prefix lengths in use as a bitmask (bit L
set when some pattern's prefix has length L). A pattern that starts with a
glob character has an empty prefix and matches anything: it sets the
match-all flag (the node must receive every PUBLISH).

A publisher tests only ``channel[:L]`` for each L in the mask (and
``len(channel) >= L``): no false negatives, since a matching channel starts
with the pattern's (cut) prefix.

Reference counting: the caller (the node's pattern registry) adds each
DISTINCT pattern once, when its first subscriber appears, and removes it once
when the last leaves. Two distinct patterns with the same prefix are two adds
(the counters and the length counts handle that).
"""

from __future__ import annotations

import struct
from typing import Final

from bitarray import bitarray
from bitarray.util import sc_encode

from bloom.bloom_filter import (
    MAX_DECODE_M,
    BloomFilter,
    check_geometry,
    decode_sparse,
    m_for_capacity,
)
from bloom.crc64 import crc64
from bloom.dataplane import CountingBloomFilter
from bloom.hashing import DEFAULT_K, key_positions

DEFAULT_MAX_PREFIX: Final = 16
_GLOB = frozenset(b"*?[")
_BACKSLASH = 0x5C

FORMAT_VERSION: Final = 1
_FLAG_MATCH_ALL: Final = 1
_FLAG_SC: Final = 2
# version u8, flags u8, k u8, max_prefix u8, m u64, prefix mask u64 (big-endian)
_HEADER = struct.Struct(">BBBBQQ")


def literal_prefix(pattern: bytes, max_len: int = DEFAULT_MAX_PREFIX) -> bytes:
    """The literal prefix of a Redis glob pattern, at most ``max_len`` bytes.

    Stops at the first unescaped ``*``, ``?`` or ``[``; ``\\x`` stands for
    ``x`` (a trailing lone backslash is a literal backslash, as in Redis
    ``stringmatchlen``). Returns ``b""`` when the pattern starts with a glob
    character (it may match any channel: match-all; the empty pattern, which
    matches only the empty channel, is also treated as match-all, a safe
    over-approximation). A pattern without glob characters returns its whole
    (unescaped, cut) text.
    """
    out = bytearray()
    i = 0
    n = len(pattern)
    while i < n and len(out) < max_len:
        c = pattern[i]
        if c in _GLOB:
            break
        if c == _BACKSLASH and i + 1 < n:
            i += 1
            c = pattern[i]
        out.append(c)
        i += 1
    return bytes(out)


def pattern_probe_positions(
    channel: bytes, prefix_mask: int, k: int = DEFAULT_K
) -> list[tuple[int, tuple[int, ...]]]:
    """What to test of ``channel`` against a pattern filter with ``prefix_mask``:
    ``[(L, key_positions(channel[:L], k)), ...]`` for each L set in the mask
    with ``L <= len(channel)``, in increasing L.

    The positions are unreduced, so one probe list serves every remote filter
    (any m) whose mask is a subset of ``prefix_mask``: a router computes it
    once per PUBLISH with the union of its peers' masks and ANDs each entry
    against the peers that use length L. Cost: one mmh3 hash per length in use.
    """
    out: list[tuple[int, tuple[int, ...]]] = []
    mask = prefix_mask & ((2 << min(len(channel), 63)) - 1)  # lengths <= len(channel)
    while mask:
        low = mask & -mask
        length = low.bit_length() - 1
        mask ^= low
        if length:
            out.append((length, key_positions(channel[:length], k)))
    return out


def mask_lengths(prefix_mask: int) -> tuple[int, ...]:
    """The lengths L (>= 1) whose bit is set in ``prefix_mask``, increasing."""
    out = []
    mask = prefix_mask & ~1
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


class PatternFilter:
    """Counting filter of pattern prefixes, prefix-length mask and match-all flag."""

    __slots__ = ("_counting", "_length_counts", "_lengths", "_mask", "_match_all", "_max_prefix")

    def __init__(self, m: int, k: int = DEFAULT_K, max_prefix: int = DEFAULT_MAX_PREFIX) -> None:
        """m a power of two >= 8; 1 <= max_prefix <= 63 (the mask is a u64)."""
        if not 1 <= max_prefix <= 63:
            raise ValueError(f"max_prefix must be in 1..63, got {max_prefix}")
        self._counting = CountingBloomFilter(m, k)
        self._max_prefix = max_prefix
        self._length_counts = [0] * (max_prefix + 1)
        self._mask = 0
        self._lengths: tuple[int, ...] = ()
        self._match_all = 0  # number of distinct match-all patterns

    @classmethod
    def for_capacity(
        cls, n: int, p: float, k: int = DEFAULT_K, max_prefix: int = DEFAULT_MAX_PREFIX
    ) -> PatternFilter:
        """Sized so the prefix filter's FP rate stays <= p up to n patterns."""
        return cls(m_for_capacity(n, p, k), k, max_prefix)

    @property
    def m(self) -> int:
        """Bits of the prefix filter."""
        return self._counting.m

    @property
    def k(self) -> int:
        """Hash positions per prefix."""
        return self._counting.k

    @property
    def max_prefix(self) -> int:
        """L: the longest prefix stored."""
        return self._max_prefix

    @property
    def match_all(self) -> bool:
        """True while some pattern starts with a glob character."""
        return self._match_all > 0

    @property
    def prefix_lengths(self) -> int:
        """Bitmask: bit L set when some stored prefix has length L."""
        return self._mask

    @property
    def lengths(self) -> tuple[int, ...]:
        """The prefix lengths in use, increasing."""
        return self._lengths

    # -- updates -----------------------------------------------------------------------

    def add(self, pattern: bytes) -> tuple[int, ...]:
        """Insert a distinct pattern; returns the prefix-filter positions that went
        0 -> 1 (empty for a match-all pattern; watch ``match_all`` and
        ``prefix_lengths`` for the other changes)."""
        prefix = literal_prefix(pattern, self._max_prefix)
        if not prefix:
            self._match_all += 1
            return ()
        n = len(prefix)
        self._length_counts[n] += 1
        if self._length_counts[n] == 1:
            self._mask |= 1 << n
            self._lengths = mask_lengths(self._mask)
        return self._counting.add(prefix)

    def remove(self, pattern: bytes) -> tuple[int, ...]:
        """Remove a pattern added once; returns the positions that went 1 -> 0.
        Raises KeyError when the pattern is detectably absent."""
        prefix = literal_prefix(pattern, self._max_prefix)
        if not prefix:
            if self._match_all == 0:
                raise KeyError(pattern)
            self._match_all -= 1
            return ()
        n = len(prefix)
        if self._length_counts[n] == 0:
            raise KeyError(pattern)
        cleared = self._counting.remove(prefix)
        self._length_counts[n] -= 1
        if self._length_counts[n] == 0:
            self._mask &= ~(1 << n)
            self._lengths = mask_lengths(self._mask)
        return cleared

    @property
    def last_set(self) -> tuple[int, ...]:
        """Positions that went 0 -> 1 in the last prefix-filter change."""
        return self._counting.last_set

    @property
    def last_cleared(self) -> tuple[int, ...]:
        """Positions that went 1 -> 0 in the last prefix-filter change."""
        return self._counting.last_cleared

    # -- queries -----------------------------------------------------------------------

    def may_match(self, channel: bytes) -> bool:
        """False only when no stored pattern can match ``channel`` (no false negatives)."""
        if self._match_all:
            return True
        bloom = self._counting.exported
        k = self._counting.k
        n = len(channel)
        for length in self._lengths:
            if length > n:
                break
            if bloom.contains_positions(key_positions(channel[:length], k)):
                return True
        return False

    @property
    def counting(self) -> CountingBloomFilter:
        """The counting filter of prefixes (live)."""
        return self._counting

    def to_bloom(self) -> BloomFilter:
        """Snapshot of the exported prefix bits."""
        return self._counting.to_bloom()

    def bits_fingerprint(self) -> int:
        """CRC64 of the exported prefix bits only (for a protocol that carries the
        mask and the match-all flag in their own fields)."""
        return self._counting.fingerprint()

    def fingerprint(self) -> int:
        """CRC64 over the exported bits, then the prefix mask (8 bytes big-endian)
        and the match-all flag (1 byte): changes when any of the three changes."""
        crc = self._counting.fingerprint()
        return crc64(self._mask.to_bytes(8, "big") + (b"\x01" if self._match_all else b"\x00"), crc)

    @property
    def set_bits(self) -> int:
        """Exported prefix bits set."""
        return self._counting.set_bits

    @property
    def fill_ratio(self) -> float:
        """Set bits / m."""
        return self._counting.fill_ratio

    @property
    def estimated_fp_rate(self) -> float:
        """(X/m)^k of the prefix bits (per probe)."""
        return self._counting.estimated_fp_rate

    # -- wire: the exported state (bits, mask, flag); counters stay local -------------

    def to_bytes(self) -> bytes:
        """``>BBBBQQ`` header (version=1, flags: 1 match-all, 2 compressed; k,
        max_prefix, m, prefix mask) + the exported bits (raw or sc_encode)."""
        bits = self._counting.exported.bits
        raw = bits.tobytes()
        flags = _FLAG_MATCH_ALL if self._match_all else 0
        if self.m >= 1024:
            packed = sc_encode(bits)
            if len(packed) < len(raw):
                raw, flags = packed, flags | _FLAG_SC
        header = _HEADER.pack(FORMAT_VERSION, flags, self.k, self._max_prefix, self.m, self._mask)
        return header + raw

    @staticmethod
    def from_bytes(data: bytes, max_m: int = MAX_DECODE_M) -> RemotePatternFilter:
        """Decode :meth:`to_bytes`: the exported (non-counting) state of a pattern
        filter. Raises ValueError on malformed input or an m above ``max_m``."""
        if len(data) < _HEADER.size:
            raise ValueError("pattern filter encoding too short")
        version, flags, k, max_prefix, m, mask = _HEADER.unpack_from(data)
        if version != FORMAT_VERSION:
            raise ValueError(f"unsupported pattern filter encoding version {version}")
        if flags & ~(_FLAG_MATCH_ALL | _FLAG_SC):
            raise ValueError(f"unknown pattern filter flags {flags:#x}")
        if not 1 <= max_prefix <= 63 or mask >> (max_prefix + 1) or mask & 1:
            raise ValueError("prefix mask has lengths outside 1..max_prefix")
        check_geometry(m, k)
        if m > max_m:
            raise ValueError(f"pattern filter m={m} exceeds the limit {max_m}")
        payload = bytes(data[_HEADER.size :])
        if flags & _FLAG_SC:
            bits = decode_sparse(payload, m)
        else:
            if len(payload) != m // 8:
                raise ValueError(f"pattern filter bits are {len(payload)} bytes, expected {m // 8}")
            bits = bitarray(endian="big")
            bits.frombytes(payload)
        bloom = BloomFilter(m, k, bits)  # validates m, k and the length
        return RemotePatternFilter(bloom, mask, bool(flags & _FLAG_MATCH_ALL), max_prefix)

    def snapshot(self) -> RemotePatternFilter:
        """The exported state as a :class:`RemotePatternFilter` (copy)."""
        return RemotePatternFilter(self.to_bloom(), self._mask, self.match_all, self._max_prefix)

    def __repr__(self) -> str:
        return (
            f"PatternFilter(m={self.m}, k={self.k}, lengths={self._lengths}, "
            f"match_all={self.match_all})"
        )


class RemotePatternFilter:
    """A peer's pattern filter as received: prefix bits, length mask, match-all.

    Same ``may_match`` and ``fingerprint`` as :class:`PatternFilter`, no counters.
    """

    __slots__ = ("bloom", "lengths", "match_all", "max_prefix", "prefix_lengths")

    def __init__(
        self, bloom: BloomFilter, prefix_lengths: int, match_all: bool, max_prefix: int
    ) -> None:
        self.bloom = bloom
        self.prefix_lengths = prefix_lengths
        self.lengths = mask_lengths(prefix_lengths)
        self.match_all = match_all
        self.max_prefix = max_prefix

    def may_match(self, channel: bytes) -> bool:
        """False only when no pattern of the peer can match ``channel``."""
        if self.match_all:
            return True
        bloom = self.bloom
        k = bloom.k
        n = len(channel)
        for length in self.lengths:
            if length > n:
                break
            if bloom.contains_positions(key_positions(channel[:length], k)):
                return True
        return False

    def fingerprint(self) -> int:
        """Same definition as :meth:`PatternFilter.fingerprint`."""
        return crc64(
            self.prefix_lengths.to_bytes(8, "big") + (b"\x01" if self.match_all else b"\x00"),
            self.bloom.fingerprint(),
        )
