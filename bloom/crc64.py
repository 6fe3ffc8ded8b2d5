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

CHECK_VALUE = 0xE9C6D914C4B8D9CA
"""``crc64(b"123456789")``, Redis ``crc64.c`` test vector."""


def crc64(data: bytes, crc: int = 0) -> int:
    """Redis CRC64 of ``data`` (bytes-like), continuing from ``crc``.

    Because the final xor is 0, ``crc64(b, crc64(a)) == crc64(a + b)``.
    Returns an unsigned 64-bit int.
    """
    return int(_crc64(data, crc))
