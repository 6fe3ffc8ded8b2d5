"""Key hashing shared by every filter: one mmh3 128-bit hash, enhanced double hashing.

``key_positions(key, k)`` returns k unreduced 64-bit positions

    g_i = h1 + i*h2 + (i^3 - i)/6  (mod 2^64),  i = 0..k-1

where (h1, h2) are the two 64-bit halves of MurmurHash3_x64_128(key, seed 0)
(Dillinger & Manolios, "Bloom Filters in Probabilistic Verification", 2004,
enhanced double hashing). A filter of size m (a power of two) reduces a
position with ``g & (m - 1)``, so the positions of a key are computed once
and reused for every filter size (and folding a filter of size 2m to m keeps
them consistent). The first j positions for k are the positions for j < k,
so a caller may hash once with the largest k in use and slice.

k, the seed and the scheme are cluster-wide constants (docs/architecture.md §7): a change
is a protocol version change.
"""

from __future__ import annotations

import mmh3

DEFAULT_K = 7
"""Hash functions per key, cluster-wide (carried by the protocol version)."""

SEED = 0
"""mmh3 seed, cluster-wide."""

_M64 = (1 << 64) - 1
#: the hash: ``hash128(key, SEED)`` is (h1, h2), unsigned 64-bit ints
hash128 = mmh3.mmh3_x64_128_utupledigest
_hash = hash128


def key_positions(key: bytes, k: int = DEFAULT_K) -> tuple[int, ...]:
    """The k unreduced positions (unsigned 64-bit ints) of ``key`` (bytes-like)."""
    h1, h2 = _hash(key, SEED)
    if k == 7:  # DEFAULT_K, unrolled: the hot path of every add and query
        # g_i = g_{i-1} + h2 + i(i-1)/2: running sums, no multiplications
        a = h1 + h2
        b = a + h2 + 1
        c = b + h2 + 3
        d = c + h2 + 6
        e = d + h2 + 10
        f = e + h2 + 15
        return (h1, a & _M64, b & _M64, c & _M64, d & _M64, e & _M64, f & _M64)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    # incremental form of the same sequence: x_{i+1} = x_i + y_i, y_{i+1} = y_i + i + 1
    out = [h1]
    x, y = h1, h2
    for i in range(1, k):
        x = (x + y) & _M64
        y = (y + i) & _M64
        out.append(x)
    return tuple(out)


def key_indexes(key: bytes, mask: int, k: int = DEFAULT_K) -> tuple[int, ...]:
    """The k positions of ``key`` reduced to a filter of size ``mask + 1`` (a
    power of two): ``tuple(p & mask for p in key_positions(key, k))``, without
    the 64-bit positions. Reduction is a ring homomorphism (mod 2^64, then
    mod m, m dividing 2^64), so the sums run on the halves reduced first:
    small ints, where the 64-bit sums each made a multi-digit int (issue 48:
    the counting filter's update was a third of a SUBSCRIBE's instructions
    on a node without a bus)."""
    if k != 7:
        return tuple(p & mask for p in key_positions(key, k))
    h1, h2 = _hash(key, SEED)
    b = h2 & mask
    x0 = h1 & mask
    x1 = x0 + b
    x2 = x1 + b + 1
    x3 = x2 + b + 3
    x4 = x3 + b + 6
    x5 = x4 + b + 10
    x6 = x5 + b + 15
    return (x0, x1 & mask, x2 & mask, x3 & mask, x4 & mask, x5 & mask, x6 & mask)


def reduce_positions(positions: tuple[int, ...], m: int) -> tuple[int, ...]:
    """Positions reduced to a filter of size ``m`` (a power of two): ``g & (m - 1)``."""
    mask = m - 1
    return tuple(p & mask for p in positions)


def is_power_of_two(m: int) -> bool:
    """True when ``m`` is a positive power of two."""
    return m > 0 and m & (m - 1) == 0
