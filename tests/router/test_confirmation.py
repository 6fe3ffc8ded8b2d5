"""The (P|S)(UN)SUBSCRIBE confirmation frame (:func:`router.resp.confirmation`),
written out here from the RESP spec, on both sides of the parts it encodes
once (names of 255 / 256 bytes, counts of 1023 / 1024, a bare unsubscribe's
nil, RESP2 and RESP3)."""

from __future__ import annotations

import pytest

from router import resp

KINDS = (b"subscribe", b"unsubscribe", b"psubscribe", b"punsubscribe", b"ssubscribe")


def spelled(kind: bytes, name: bytes | None, count: int, version: int) -> bytes:
    head = b">3\r\n" if version == 3 else b"*3\r\n"
    if name is None:
        target = b"_\r\n" if version == 3 else b"$-1\r\n"
    else:
        target = b"$" + str(len(name)).encode() + b"\r\n" + name + b"\r\n"
    kind_bulk = b"$" + str(len(kind)).encode() + b"\r\n" + kind + b"\r\n"
    return head + kind_bulk + target + b":" + str(count).encode() + b"\r\n"


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("kind", KINDS)
def test_confirmation_is_the_spelled_frame(kind: bytes, version: int) -> None:
    for name in (b"", b"a", b"x" * 255, b"y" * 256, b"z" * 10_000, b"\r\n$", None):
        for count in (0, 1, 1023, 1024, 123_456):
            assert resp.confirmation(kind, name, count, version) == spelled(
                kind, name, count, version
            )
