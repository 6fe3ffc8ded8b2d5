"""Inline commands against the oracle, byte for byte: Redis 7.0's
``processInlineBuffer`` (the newline found with ``strchr``, so a NUL before it
hides it) and ``sdssplitargs`` (``isspace`` blanks skipped between arguments,
but only space, tab, CR, LF ending an unquoted argument)."""

from __future__ import annotations

import pytest

from tests.differential.oracle import HELLO3, assert_same_as_oracle, redis_only

pytestmark = pytest.mark.timeout(120)

BLANKS = (
    b"ECHO\x0ba\r\nECHO a\x0b\r\nECHO \x0cb\r\nECHO\x0cb\r\n"
    b"\x0bECHO\x0b \x0c a\x0bb \x0c\r\n\x0b\x0c\r\nPING\x0b\r\n"
    b"ECHO \"a\"\x0b\r\nECHO \"a\"\x0bb\r\nECHO 'a'\x0c\r\nECHO 'a'\x0cb\r\n"
    b"ECHO\ta\r\nECHO a\tb\r\nECHO \x1fa\r\nECHO \xa0a\r\nECHO\x1ca\r\n"
)

CASES = {
    "blanks": BLANKS,
    "blanks resp3": HELLO3 + BLANKS,
    "NUL hides the newline": b"PING\r\nECHO a\x00b c\r\nPING\r\n",
    "NUL first": b"\x00\r\nPING\r\n",
    "NUL in a quoted argument": b'PING\r\nECHO "a\x00b"\r\nPING\r\n',
    "NUL after the newline": b"ECHO a\r\n\x00\r\n",
    "NUL then too big": b"PING\r\nECHO a\x00b\r\n" + b"x" * 70_000 + b"\r\n",
}


# Valkey 9, the fallback oracle, splits some of these lines otherwise
REDIS_ONLY = {"blanks", "blanks resp3"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=redis_only) if n in REDIS_ONLY else n for n in CASES]
)
def test_inline_same_bytes_as_the_oracle(servers, name):
    assert_same_as_oracle(servers, CASES[name])
