"""bloom: Bloom filters, fingerprints and the bit-sliced routing index (docs/architecture.md §7).

Public API (import from ``bloom``):

- :func:`crc64` — Redis CRC64 (Jones), the filter fingerprint.
- :func:`bit_flips` — what each bit flip does to a filter's CRC64 (the CRC is linear).
- :data:`DEFAULT_K`, :func:`key_positions` — one
  mmh3 128-bit hash, enhanced double hashing, unreduced 64-bit positions.
- :class:`BloomFilter`, :class:`CountingBloomFilter` — bits and counters.
- :func:`literal_prefix`, :class:`PatternFilter`, :class:`RemotePatternFilter`,
  :func:`pattern_probe_positions` — filters of PSUBSCRIBE patterns.
- :class:`OppositeBloomFilter` — duplicate check with no false positives.
- :class:`BitSlicedIndex` — peers' filters as rows of peer bitmasks.
"""

from bloom.bitsliced import BitSlicedIndex
from bloom.bloom_filter import BloomFilter, m_for_capacity, theoretical_fp_rate
from bloom.crc64 import bit_flips, crc64
from bloom.dataplane import CountingBloomFilter
from bloom.hashing import DEFAULT_K, key_positions, reduce_positions
from bloom.opposite import OppositeBloomFilter
from bloom.pattern import (
    DEFAULT_MAX_PREFIX,
    PatternFilter,
    RemotePatternFilter,
    literal_prefix,
    mask_lengths,
    pattern_probe_positions,
)

__all__ = [
    "DEFAULT_K",
    "DEFAULT_MAX_PREFIX",
    "BitSlicedIndex",
    "BloomFilter",
    "CountingBloomFilter",
    "OppositeBloomFilter",
    "PatternFilter",
    "RemotePatternFilter",
    "bit_flips",
    "crc64",
    "key_positions",
    "literal_prefix",
    "m_for_capacity",
    "mask_lengths",
    "pattern_probe_positions",
    "reduce_positions",
    "theoretical_fp_rate",
]
