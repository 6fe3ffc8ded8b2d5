"""Request framing edges against redis-server 7.0.15, byte for byte, with
whether the connection closes (router/parser.py, both paths): Redis finds a
line's end with ``strchr(..., '\\r')`` and skips the byte after it, never
checks the two bytes after a bulk, stops at a NUL (and waits), accepts a
multibulk count up to INT_MAX (and waits for the arguments), skips a
negative one, and refuses lines over 64 KiB without an end."""

from __future__ import annotations

import pytest

from tests.differential.oracle import assert_same_as_oracle, exchange, redis_only
from tests.procs import connect, read_quiet

pytestmark = [pytest.mark.timeout(120), redis_only]

EDGES = {
    "lone CR line ends": b"*1\rX$4\rXPING\r\n",
    "lone CR, then LF kept": b"*2\r\r$4\r\rECHO\r\r$1\r\rx\r\n",
    "bytes after a bulk unchecked": b"*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n",
    "LF only in a count line": b"*1\n$4\r\nPING\r\n",
    "LF only in a bulk line": b"*1\r\n$4\n$4\r\nPING\r\n",
    "count 1048577 waits": b"*1048577\r\n$4\r\nPING\r\n",
    "count INT_MAX waits": b"*2147483647\r\n",
    "count over INT_MAX": b"*2147483648\r\n",
    "count far over": b"*99999999999999999999\r\n",
    "negative count skipped": b"*-5\r\nPING\r\n*-1\r\n*0\r\nPING\r\n",
    "minus zero": b"*-0\r\n",
    "empty count": b"*\r\n",
    "count with plus": b"*+1\r\n$4\r\nPING\r\n",
    "count with leading zero": b"*01\r\n$4\r\nPING\r\n",
    "count line not ended": b"*1\r",
    "empty bulk length": b"*1\r\n$\r\n",
    "negative bulk length": b"*1\r\n$-1\r\n",
    "bulk length leading zero": b"*1\r\n$04\r\nPING\r\n",
    "bulk length with plus": b"*1\r\n$+4\r\nPING\r\n",
    "bulk length over proto-max-bulk-len": b"*1\r\n$536870913\r\n",
    "bulk length at proto-max-bulk-len waits": b"*1\r\n$536870912\r\n",
    "NUL hides a bulk line's end": b"*1\r\n$4\x00\r\nPING\r\n",
    "NUL in place of a bulk's $ hides the line": b"*1\r\n\x00123\r\n",
    "NUL hides a count line's end": b"*1\x00\r\nPING\r\n",
    "NUL in an inline request": b"PI\x00NG\r\n",
    "no dollar": b"*1\r\n\r\n",
    "no dollar, a high byte": b"*1\r\n\xff4\r\n",
    "no dollar, a colon": b"*1\r\n:4\r\n",
    "bulk body not complete": b"*1\r\n$4\r\nPING\r",
    "blank inline lines": b"  \r\n\r\n\n\r\nPING\n",
    "half a pipeline": b"*3\r\n$4\r\nECHO\r\n$1\r\na\r\n",
}


@pytest.mark.parametrize("case", list(EDGES))
def test_same_bytes_as_redis(servers, case):
    assert_same_as_oracle(servers, EDGES[case])


BIG = {
    "NUL before a count line's end, over 64 KiB": b"*1\x00" + b"1" * 70000 + b"\r\n",
    "NUL before a bulk line's end, over 64 KiB": b"*1\r\n$1\x00" + b"1" * 70000 + b"\r\n",
    "count line over 64 KiB": b"*" + b"1" * 70000,
    "bulk line over 64 KiB": b"*1\r\n$" + b"1" * 70000,
    "bulk line over 64 KiB, ended": b"*1\r\n$" + b"1" * 70000 + b"\r\n",
    "inline over 64 KiB after a NUL": b"PING\x00" + b" " * 70000 + b"\n",
}


@pytest.mark.parametrize("case", list(BIG))
def test_limits_same_bytes_as_redis(servers, case):
    oracle, node = servers
    assert exchange(node, BIG[case], 0.5) == exchange(oracle, BIG[case], 0.5)


def _continued(port: int, first: bytes, then: bytes) -> tuple[bytes, bytes]:
    with connect(port) as s:
        s.sendall(first)
        before = read_quiet(s)[0]
        s.sendall(then)
        return before, read_quiet(s)[0]


@pytest.mark.parametrize(
    ("first", "then"),
    [
        (b"*1\r", b"\n$4\r\nPING\r\n"),
        (b"*1\r\n$4\r", b"Z"),
        (b"*2\r\n$4\r\nECHO\r\n$3\r", b"\nab"),
        (b"*2\r\n$4\r\nECHO\r\n$3\r\nab", b"cd-*1\r\n$4\r\nPING\r\n"),
        (b"*3\r\n$4\r\nECHO\r\n", b"$1\r\na\r\n$1\r\nb\r\n"),
    ],
)
def test_a_request_completed_later_like_redis(servers, first, then):
    oracle, node = servers
    assert _continued(node, first, then) == _continued(oracle, first, then)
