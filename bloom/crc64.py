"""CRC64 as Redis computes it (``src/crc64.c``): the fingerprint of a filter.

Jones polynomial 0xad93d23594c935a9, reflected input and output, initial value
0, final xor 0. Check value: ``crc64(b"123456789") == 0xe9c6d914c4b8d9ca``
(the test vector in Redis's ``crc64.c``). crcmod's predefined ``crc-64-jones``
starts from all ones and does NOT match, so the function is built from the
polynomial (with its implicit x^64 term, hence 0x1_AD93D23594C935A9).

crcmod silently falls back to pure Python (~100x slower) when its C extension
is missing; fingerprints are computed on every filter change, so that
fallback is refused at import time.
"""

from __future__ import annotations

import sys
from array import array

import crcmod

try:  # the C extension; crcmod imports it lazily and hides its absence
    import crcmod._crcfunext
except ImportError as exc:  # pragma: no cover - depends on the installed wheel
    raise ImportError(
        "bloom.crc64 needs crcmod's C extension (crcmod._crcfunext); "
        "reinstall crcmod from a wheel or with a C compiler available"
    ) from exc

# crcmod's package namespace shadows its ``crcmod.crcmod`` module; read the module itself
if not sys.modules["crcmod.crcmod"]._usingExtension:  # pragma: no cover
    raise ImportError("crcmod is not using its C extension; reinstall crcmod")

_POLY = 0x1AD93D23594C935A9
_crc64 = crcmod.mkCrcFun(_POLY, initCrc=0, rev=True, xorOut=0)
#: the CRC's byte table (crc of one more byte b: table[(crc ^ b) & 0xFF] ^ crc >> 8)
_BYTE_TABLE: list[int] = crcmod.Crc(_POLY, initCrc=0, rev=True, xorOut=0).table

CHECK_VALUE = 0xE9C6D914C4B8D9CA
"""``crc64(b"123456789")``, Redis ``crc64.c`` test vector."""


def crc64(data: bytes, crc: int = 0) -> int:
    """Redis CRC64 of ``data`` (bytes-like), continuing from ``crc``.

    Because the final xor is 0, ``crc64(b, crc64(a)) == crc64(a + b)``.
    Returns an unsigned 64-bit int.
    """
    return int(_crc64(data, crc))


#: filters up to this many bytes get a flip table (:func:`bit_flips`): 8
#: tables of n 64-bit values, 64 x n bytes (128 KiB for the default 2 KiB
#: filter, 256 KiB at this cap, built in ~10-80 ms once per size); a bigger
#: filter's CRC64 is computed whole
FLIP_TABLE_MAX_BYTES = 1 << 12
_flip_tables: dict[int, array[int]] = {}


def bit_flips(nbytes: int) -> array[int] | None:
    """The CRC64 change of flipping each bit of an ``nbytes``-byte message
    (bit j in big-endian bit order: byte j >> 3, mask 0x80 >> (j & 7), as a
    bitarray's bytes), at index j; None above :data:`FLIP_TABLE_MAX_BYTES`.

    Redis's CRC64 starts from 0 and xors nothing out, so it is linear over
    GF(2): for messages of one length, crc(a ^ b) == crc(a) ^ crc(b). A
    message with one bit set has zero bytes before it (which leave the
    register at 0) and z zero bytes after it, so its CRC is that of the one
    byte continued over z zero bytes: a filter's fingerprint is kept up to
    date by xoring the entries of the bits that flipped, O(flips) instead of
    O(m) (issue 48: two CRC64s of the whole filter were 15% of a SUBSCRIBE
    + UNSUBSCRIBE on a node, and every peer computed one per delta). Built
    once per size, shared by every filter of that size (8 x n continued
    CRCs of one byte: milliseconds)."""
    table = _flip_tables.get(nbytes)
    if table is not None or nbytes > FLIP_TABLE_MAX_BYTES or nbytes < 1:
        return table
    table = array("Q", bytes(8 * 8 * nbytes))
    step = _BYTE_TABLE  # one zero byte more: the reflected CRC's byte step
    for bit in range(8):
        crc = _crc64(bytes((0x80 >> bit,)), 0)  # the bit in the last byte
        for z in range(nbytes):  # ... then in the byte z places before the end
            table[(nbytes - 1 - z) * 8 + bit] = crc
            crc = step[crc & 0xFF] ^ (crc >> 8)
    _flip_tables[nbytes] = table
    return table
