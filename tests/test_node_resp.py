"""The sans-IO request parser: byte-by-byte feeding, sdssplitargs rules, limits,
and a short run of the fuzzer (the long one: python -m tests.fuzz.fuzz_resp)."""

from __future__ import annotations

import pytest

from router.resp import ProtocolError, RequestParser, split_args
from tests.fuzz.fuzz_resp import main as fuzz_main


def parse_all(data: bytes, step: int = 1, **limits) -> list[list[bytes]]:
    parser = RequestParser(limits.get("max_bulk", 1 << 20), limits.get("max_multibulk", 1024))
    out = []
    for i in range(0, len(data), step):
        parser.feed(data[i : i + step])
        while (req := parser.next_request()) is not None:
            out.append(req)
    return out


@pytest.mark.parametrize("step", [1, 2, 7, 1000])
def test_pipelined_requests_split_anywhere(step):
    data = b"*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\nPING x\r\n*0\r\n*1\r\n$4\r\nPING\r\n"
    assert parse_all(data, step) == [[b"ECHO", b"a\r\n"], [b"PING", b"x"], [b"PING"]]


def test_split_args_follows_sdssplitargs():
    assert split_args(b"SET \"a b\" 'c d'") == [b"SET", b"a b", b"c d"]
    assert split_args(b'ECHO "\\x41\\n\\t\\q"') == [b"ECHO", b"A\n\tq"]
    assert split_args(b"ECHO 'it\\'s'") == [b"ECHO", b"it's"]
    assert split_args(b'ECHO "open') is None
    assert split_args(b'ECHO "a"b') is None
    assert split_args(b"   ") == []


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"*x\r\n", "invalid multibulk length"),
        (b"*2000\r\n", "invalid multibulk length"),
        (b"*1\r\n+x\r\n", "expected '$', got '+'"),
        (b"*1\r\n$2000000\r\n", "invalid bulk length"),
        (b"*1\r\n$01\r\n", "invalid bulk length"),
        (b"x" * 70000, "too big inline request"),
    ],
)
def test_limits_and_errors(data, error):
    with pytest.raises(ProtocolError, match=error.replace("$", r"\$").replace("+", r"\+")):
        parse_all(data, 4096)


def test_unauthenticated_limits():
    parser = RequestParser(1 << 20, 1024)
    parser.authenticated = False
    parser.feed(b"*11\r\n")
    with pytest.raises(ProtocolError, match="unauthenticated multibulk length"):
        parser.next_request()


def test_fuzz_smoke(capsys):
    assert fuzz_main(["--count", "2000", "--seed", "3"]) == 0
    assert "2000 inputs, no unexpected exception" in capsys.readouterr().out
