"""BloomFilter: m bits (m a power of two), k positions per key from :mod:`bloom.hashing`.

Formulas (docs/architecture.md §7):
- false-positive rate after n distinct keys: (1 - e^(-k n / m))^k (Bloom 1970;
  the classic approximation);
- from the bits alone, with X bits set: FP ~ (X/m)^k and
  n ~ -(m/k) ln(1 - X/m) (Swamidass & Baldi, 2007).

Bits are a ``bitarray`` in big-endian bit order (bit j of the filter is bit
``7 - j % 8`` of byte ``j // 8``), the order the cluster bus sends them in.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Final

from bitarray import bitarray
from bitarray.util import sc_decode, sc_encode

from bloom.crc64 import crc64
from bloom.hashing import DEFAULT_K, is_power_of_two, key_positions

MIN_M: Final = 8
"""Smallest filter size: whole bytes on the wire."""

MAX_DECODE_M: Final = 1 << 28
"""Largest m that ``from_bytes`` accepts by default (32 MiB of bits, ~28M keys at
1%): a forged header must not make a node allocate more from a short frame."""

FORMAT_VERSION: Final = 1
_FLAG_SC: Final = 1  # payload is bitarray.util.sc_encode output
# version u8, flags u8, k u8, m u64 (big-endian)
_HEADER = struct.Struct(">BBBQ")


def check_geometry(m: int, k: int) -> None:
    """Raise ValueError unless m is a power of two >= 8 and 1 <= k <= 255."""
    if not isinstance(m, int) or not is_power_of_two(m) or m < MIN_M:
        raise ValueError(f"m must be a power of two >= {MIN_M}, got {m!r}")
    if not isinstance(k, int) or not 1 <= k <= 255:
        raise ValueError(f"k must be an int in 1..255, got {k!r}")


def theoretical_fp_rate(m: int, k: int, n: int) -> float:
    """(1 - e^(-k n / m))^k: expected false-positive rate after n distinct keys."""
    if n <= 0:
        return 0.0
    return float((1.0 - math.exp(-k * n / m)) ** k)


def m_for_capacity(n: int, p: float, k: int = DEFAULT_K) -> int:
    """Smallest power of two m (>= 8) with theoretical_fp_rate(m, k, n) <= p.

    k is fixed (a cluster-wide constant), so this is the m that meets ``p``
    with that k; at the optimum k it is the classic m = -n ln p / (ln 2)^2
    rounded up to a power of two. Raises ValueError for n < 0 or p outside (0, 1).
    """
    if n < 0:
        raise ValueError(f"capacity n must be >= 0, got {n}")
    if not 0.0 < p < 1.0:
        raise ValueError(f"false-positive rate p must be in (0, 1), got {p}")
    m = MIN_M
    while theoretical_fp_rate(m, k, n) > p:
        m *= 2
    return m


class BloomFilter:
    """A Bloom filter of ``m`` bits (power of two >= 8) and ``k`` hash positions.

    ``add(key)`` / ``key in f`` hash with :func:`bloom.hashing.key_positions`;
    ``add_positions`` / ``contains_positions`` take those unreduced positions
    (the first ``k`` are used) so a caller hashes a key once for many filters.
    """

    __slots__ = ("_bits", "_k", "_m", "_mask")

    def __init__(self, m: int, k: int = DEFAULT_K, bits: bitarray | None = None) -> None:
        """Empty filter, or one over ``bits`` (taken as is, length m, big-endian).

        Raises ValueError on a bad geometry or a bits length other than m.
        """
        check_geometry(m, k)
        if bits is None:
            bits = bitarray(m, endian="big")
            bits.setall(0)
        elif len(bits) != m:
            raise ValueError(f"bits has length {len(bits)}, expected m={m}")
        elif bits.endian != "big":
            bits = bitarray(bits, endian="big")
        self._bits = bits
        self._m = m
        self._k = k
        self._mask = m - 1

    @classmethod
    def for_capacity(cls, n: int, p: float, k: int = DEFAULT_K) -> BloomFilter:
        """An empty filter whose FP rate stays <= p up to n distinct keys (see
        :func:`m_for_capacity`; m is rounded up to a power of two)."""
        return cls(m_for_capacity(n, p, k), k)

    # -- geometry and bits ---------------------------------------------------------

    @property
    def m(self) -> int:
        """Number of bits (a power of two)."""
        return self._m

    @property
    def k(self) -> int:
        """Number of hash positions per key."""
        return self._k

    @property
    def bits(self) -> bitarray:
        """The bits (live, big-endian bit order, length m)."""
        return self._bits

    def copy(self) -> BloomFilter:
        """An independent copy."""
        return BloomFilter(self._m, self._k, bitarray(self._bits))

    # -- membership -----------------------------------------------------------------

    def add(self, key: bytes) -> None:
        """Insert ``key`` (bytes-like)."""
        self.add_positions(key_positions(key, self._k))

    def add_positions(self, positions: Sequence[int]) -> None:
        """Insert a key by its unreduced positions (first k used)."""
        bits = self._bits
        mask = self._mask
        if len(positions) != self._k:
            positions = positions[: self._k]
        for p in positions:
            bits[p & mask] = 1

    def __contains__(self, key: bytes) -> bool:
        return self.contains_positions(key_positions(key, self._k))

    def contains_positions(self, positions: Sequence[int]) -> bool:
        """True when every one of the first k positions is set (no false negatives)."""
        bits = self._bits
        mask = self._mask
        if len(positions) != self._k:
            positions = positions[: self._k]
        for p in positions:  # noqa: SIM110 - a plain loop beats all(genexpr) here
            if not bits[p & mask]:
                return False
        return True

    # -- combination ----------------------------------------------------------------

    def __or__(self, other: BloomFilter) -> BloomFilter:
        """Union: the filter of both key sets. Raises ValueError if m or k differ."""
        if not isinstance(other, BloomFilter):
            return NotImplemented
        if other._m != self._m or other._k != self._k:
            raise ValueError(
                f"cannot union filters of geometry (m={self._m}, k={self._k}) and "
                f"(m={other._m}, k={other._k}); fold the larger one first"
            )
        return BloomFilter(self._m, self._k, self._bits | other._bits)

    def __ior__(self, other: BloomFilter) -> BloomFilter:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        if other._m != self._m or other._k != self._k:
            raise ValueError("cannot union filters of different geometry")
        self._bits |= other._bits
        return self

    def fold(self, m2: int) -> BloomFilter:
        """The same keys in ``m2`` bits (power of two, MIN_M <= m2 <= m): OR of the
        m2-bit slices. Valid because p & (m2-1) == (p & (m-1)) & (m2-1).
        Raises ValueError for a bad m2."""
        check_geometry(m2, self._k)
        if m2 > self._m:
            raise ValueError(f"cannot fold m={self._m} up to m2={m2}")
        bits = self._bits
        size = self._m
        while size > m2:
            size //= 2
            bits = bits[:size] | bits[size : 2 * size]
        if bits is self._bits:
            bits = bitarray(bits)
        return BloomFilter(m2, self._k, bits)

    # -- estimates --------------------------------------------------------------------

    @property
    def set_bits(self) -> int:
        """X, the number of bits set."""
        return self._bits.count()

    @property
    def fill_ratio(self) -> float:
        """X / m."""
        return self._bits.count() / self._m

    @property
    def estimated_count(self) -> float:
        """n ~ -(m/k) ln(1 - X/m) (Swamidass & Baldi); inf when every bit is set."""
        x = self._bits.count()
        return estimate_count(self._m, self._k, x)

    @property
    def estimated_fp_rate(self) -> float:
        """(X/m)^k: the false-positive rate of this filter as it is now."""
        return float((self._bits.count() / self._m) ** self._k)

    # -- wire -----------------------------------------------------------------------------

    def fingerprint(self) -> int:
        """Redis CRC64 of the bit bytes (m/8 bytes, big-endian bit order)."""
        return crc64(self._bits.tobytes())

    def to_bytes(self) -> bytes:
        """Self-describing encoding: header ``>BBBQ`` (version=1, flags, k, m) and
        the bits, either raw (m/8 bytes) or ``bitarray.util.sc_encode`` output
        (flag 1) when that is smaller (sparse filters)."""
        raw = self._bits.tobytes()
        flags = 0
        if self._m >= 1024:  # sc_encode has a few bytes of overhead; skip tiny filters
            packed = sc_encode(self._bits)
            if len(packed) < len(raw):
                raw, flags = packed, _FLAG_SC
        return _HEADER.pack(FORMAT_VERSION, flags, self._k, self._m) + raw

    @classmethod
    def from_bytes(cls, data: bytes, max_m: int = MAX_DECODE_M) -> BloomFilter:
        """Decode :meth:`to_bytes` output. Raises ValueError on any malformed input
        or an m above ``max_m``."""
        if len(data) < _HEADER.size:
            raise ValueError("bloom filter encoding too short")
        version, flags, k, m = _HEADER.unpack_from(data)
        if version != FORMAT_VERSION:
            raise ValueError(f"unsupported bloom filter encoding version {version}")
        if flags & ~_FLAG_SC:
            raise ValueError(f"unknown bloom filter encoding flags {flags:#x}")
        check_geometry(m, k)
        if m > max_m:
            raise ValueError(f"bloom filter m={m} exceeds the limit {max_m}")
        payload = bytes(data[_HEADER.size :])
        if flags & _FLAG_SC:
            bits = decode_sparse(payload, m)
        else:
            if len(payload) != m // 8:
                raise ValueError(f"bloom filter bits are {len(payload)} bytes, expected {m // 8}")
            bits = bitarray(endian="big")
            bits.frombytes(payload)
        return cls(m, k, bits)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return self._m == other._m and self._k == other._k and self._bits == other._bits

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"BloomFilter(m={self._m}, k={self._k}, set_bits={self.set_bits})"


def decode_sparse(payload: bytes, m: int) -> bitarray:
    """``bitarray.util.sc_decode`` of untrusted bytes that must hold exactly m bits.

    The length in the sc header (byte 0: bits 0-3 = count of little-endian
    length bytes that follow) is checked against m BEFORE decoding, so a
    forged length cannot make sc_decode allocate gigabytes. Raises ValueError.
    """
    if not payload:
        raise ValueError("empty compressed bits")
    nbytes = payload[0] & 0x0F
    if nbytes > 8 or len(payload) < 1 + nbytes:
        raise ValueError("bad compressed bits header")
    length = int.from_bytes(payload[1 : 1 + nbytes], "little")
    if length != m:
        raise ValueError(f"compressed bits have length {length}, expected {m}")
    try:
        bits = sc_decode(payload)
    except Exception as exc:  # bitarray raises several types on corrupt streams
        raise ValueError(f"bad compressed bits: {exc}") from exc
    if len(bits) != m:
        raise ValueError(f"compressed bits have length {len(bits)}, expected {m}")
    if bits.endian != "big":
        bits = bitarray(bits, endian="big")
    return bits


def estimate_count(m: int, k: int, set_bits: int) -> float:
    """n ~ -(m/k) ln(1 - X/m) (Swamidass & Baldi 2007); inf when X == m."""
    if set_bits >= m:
        return math.inf
    return -(m / k) * math.log1p(-set_bits / m)
