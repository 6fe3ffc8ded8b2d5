"""The sans-IO request parser: byte-by-byte feeding, sdssplitargs rules, limits,
and a short run of the fuzzer (the long one: python -m tests.fuzz.fuzz_resp)."""

from __future__ import annotations

import contextlib
import tracemalloc

import hiredis
import pytest

from router import dataplane
from router import parser as request_parser
from router.parser import ProtocolError, RequestParser, split_args
from tests.fuzz.fuzz_resp import main as fuzz_main


def parse_all(data: bytes, step: int = 1, fast: bool = True, **limits) -> list[list[bytes]]:
    parser = RequestParser(
        limits.get("max_bulk", 1 << 20), limits.get("max_multibulk", 1024), fast=fast
    )
    out = []
    for i in range(0, len(data), step):
        parser.feed(data[i : i + step])
        while (req := parser.next_request()) is not None:
            out.append(req)
    return out


def outcome(data: bytes, step: int, fast: bool) -> list[object]:
    """Requests parsed, then the error text if one ended the input."""
    parser = RequestParser(1 << 20, 1024, fast=fast)
    out: list[object] = []
    try:
        for i in range(0, len(data), step):
            parser.feed(data[i : i + step])
            while (req := parser.next_request()) is not None:
                out.append(req)
    except ProtocolError as exc:
        out.append(str(exc))
    return out


@pytest.mark.parametrize("step", [1, 2, 7, 1000])
def test_pipelined_requests_split_anywhere(step):
    data = b"*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\nPING x\r\n*0\r\n*1\r\n$4\r\nPING\r\n"
    assert parse_all(data, step) == [[b"ECHO", b"a\r\n"], [b"PING", b"x"], [b"PING"]]


PUBLISH = b"*3\r\n$7\r\nPUBLISH\r\n$4\r\nnews\r\n$5\r\nhello\r\n"


@pytest.mark.parametrize(
    "bad",
    [
        b"*3\r\n$7\r\nPUBLISH\r\n+news\r\n$5\r\nhello\r\n",  # hiredis: simple string
        b"*2\r\n$4\r\nECHO\r\n=7\r\ntxt:abc\r\n",  # verbatim, read as b"abc"
        b"*2\r\n$4\r\nECHO\r\n(123\r\n",  # big number, read as bytes
        b">2\r\n$4\r\nECHO\r\n$1\r\na\r\n",  # push: a list, same length
        b"~2\r\n$4\r\nECHO\r\n$1\r\na\r\n",  # set: a list, same length
        b"*2\r\n$4\r\nECHO\r\n|1\r\n+k\r\n+v\r\n$1\r\na\r\n",  # attribute
        b"*2\r\n$4\r\nECHO\r\n$-1\r\n",  # null bulk
        b"*2\r\n$4\r\nECHO\r\n*1\r\n$1\r\na\r\n",  # nested array
        b"*0\r\n*-1\r\nPING\r\n",  # skipped headers, then inline
    ],
)
@pytest.mark.parametrize("step", [1, 5, 4096])
def test_fast_path_agrees_with_the_reference_parser(bad, step):
    # well-formed requests around a request hiredis would accept but Redis
    # rejects or reads otherwise: the hiredis path must hand over at that byte
    data = PUBLISH * 3 + bad + PUBLISH
    want = outcome(data, step, fast=False)
    assert outcome(data, step, fast=True) == want
    assert want[:3] == [[b"PUBLISH", b"news", b"hello"]] * 3


def test_fast_path_keeps_bulk_limit():
    data = PUBLISH + b"*2\r\n$4\r\nECHO\r\n$3\r\nabc\r\n"
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        parse_all(data, 4096, max_bulk=2)


def test_huge_aggregate_header_is_not_allocated():
    # hiredis allocates a list of the announced size when it reads the header;
    # 999,999,999 elements would be 8 GB: the fast path must not see it
    parser = RequestParser(1 << 20, 1 << 31)
    tracemalloc.start()
    try:
        parser.feed(PUBLISH + b"*999999999\r\n$4\r\nECHO\r\n")
        assert parser.next_request() == [b"PUBLISH", b"news", b"hello"]
        assert parser.next_request() is None
        parser.feed(b"$1\r\na\r\n" * 100)  # the elements trickle in
        assert parser.next_request() is None
        nested = RequestParser(1 << 20, 1 << 31)
        nested.feed(PUBLISH + b"*2\r\n$4\r\nECHO\r\n*99999999\r\n$1\r\na\r\n")
        assert nested.next_request() == [b"PUBLISH", b"news", b"hello"]
        with pytest.raises(ProtocolError, match="expected '\\$', got '\\*'"):
            nested.next_request()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 1024 * 1024


_READER = hiredis.Reader


class CountingReader:
    """hiredis.Reader that counts the bytes it is given."""

    fed = 0

    def __init__(self) -> None:
        self._reader = _READER()

    def feed(self, data, offset: int = 0) -> None:
        CountingReader.fed += len(data) - offset
        self._reader.feed(data, offset)

    def gets(self):
        return self._reader.gets()


@pytest.mark.parametrize(
    "odd",
    [
        b"PING\r\n",  # inline
        b"*2\r\n$4\r\nECHO\r\n+x\r\n",  # a simple string hiredis would take
        b"*2\r\n$4\r\nECHO\r\n$6\r\n*12345\r\n",  # a payload like a big header
    ],
)
def test_hand_overs_keep_the_work_linear(monkeypatch, odd):
    # a pipeline alternating well-formed requests with ones the fast path hands
    # over: each hand-over must not copy the rest of the buffer into hiredis
    # again (that would be quadratic in the pipeline's length)
    monkeypatch.setattr(request_parser.hiredis, "Reader", CountingReader)
    CountingReader.fed = 0
    data = (PUBLISH + odd) * 2000
    parser = RequestParser(1 << 20, 1024)
    parser.feed(data)
    got = []
    with contextlib.suppress(ProtocolError):
        got.extend(parser.requests())
    assert got[0] == [b"PUBLISH", b"news", b"hello"]
    assert CountingReader.fed <= 2 * len(data)
    if got[-1] == [b"ECHO", b"x"] or len(got) < 4000:
        return  # the reference path stopped at a protocol error: the connection ends
    # once the odd bytes are read, the next read takes the fast path again
    CountingReader.fed = 0
    parser.feed(PUBLISH * 3)
    assert list(parser.requests()) == [[b"PUBLISH", b"news", b"hello"]] * 3
    assert CountingReader.fed == 3 * len(PUBLISH)


def test_split_args_follows_sdssplitargs():
    assert split_args(b"SET \"a b\" 'c d'") == [b"SET", b"a b", b"c d"]
    assert split_args(b'ECHO "\\x41\\n\\t\\q"') == [b"ECHO", b"A\n\tq"]
    assert split_args(b"ECHO 'it\\'s'") == [b"ECHO", b"it's"]
    assert split_args(b'ECHO "open') is None
    assert split_args(b'ECHO "a"b') is None
    assert split_args(b"   ") == []
    # isspace blanks are skipped, but only space, tab, CR, LF end an argument
    assert split_args(b"\x0bECHO\x0ba \x0c b\x0c") == [b"ECHO\x0ba", b"b\x0c"]
    assert split_args(b"ECHO 'a'\x0b \"b\"\x0c") == [b"ECHO", b"a", b"b"]


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
    out = capsys.readouterr().out
    assert "2000 inputs (" in out and "no unexpected exception" in out
    if dataplane.load() is not None:  # built (uv sync): the twin is compared too
        assert "compiled" in out


def test_a_huge_multibulk_is_parsed_in_slices_with_the_same_result():
    from router.parser import SLICE_BULKS

    n = 10 * SLICE_BULKS + 5  # over 10000: the reference path (module doc)
    data = b"*%d\r\n" % n + b"$1\r\nx\r\n" * n
    parser = RequestParser(512 << 20, 1 << 20)
    parser.feed(data)
    slices = 0
    got: list[list[bytes]] = []
    while True:
        got.extend(parser.requests())
        if not parser.backlog:
            break
        slices += 1
    assert got == [[b"x"] * n]
    assert slices == 10  # each call read at most SLICE_BULKS bulks
    whole = RequestParser(512 << 20, 1 << 20)
    whole.feed(data)
    assert whole.next_request() == [b"x"] * n  # next_request reads on through slices


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("step", [1, 3, 1000])
@pytest.mark.parametrize(
    ("data", "want"),
    [
        # Redis 7.0.15's processMultibulkBuffer: a line ends at its first CR and
        # the byte after it is skipped, whatever it is; a bulk's 2 trailing
        # bytes are not checked; a NUL before the CR hides it (strchr)
        (b"*1\rX$4\rXPING\r\n", [[b"PING"]]),
        (b"*2\r\r$4\r\rECHO\r\r$1\r\rx\r\n*1\r\n$4\r\nPINGxy", [[b"ECHO", b"x"], [b"PING"]]),
        (b"*1\r\n$4\x00\r\nPING\r\n", []),
        (b"*1\x00\r\n*1\r\n$4\r\nPING\r\n", []),
        (b"*-7\r\n*1\r\n$4\r\nPING\r\n", [[b"PING"]]),
        (b"*1\r\n$4\r\nPING\r", []),  # the bulk's 2 trailing bytes have not come
        (b"*1\r\n\xe9\r\n", ["ERR Protocol error: expected '$', got '\udce9'"]),
    ],
)
def test_line_ends_as_redis_finds_them(data, want, step, fast):
    assert outcome(data, step, fast) == want


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
def test_multibulk_counts_up_to_int_max_wait_for_their_arguments(fast):
    """Redis 7.0.15 refuses a count over INT_MAX only (the node's default
    max-multibulk-len); a count it accepts waits for its bulks."""
    parser = RequestParser(1 << 20, 2**31 - 1, fast=fast)
    parser.feed(b"*2147483647\r\n$4\r\nPING\r\n")
    assert parser.next_request() is None and parser.buffered == 0
    parser = RequestParser(1 << 20, 2**31 - 1, fast=fast)
    parser.feed(b"*2147483648\r\n")
    with pytest.raises(ProtocolError, match="invalid multibulk length"):
        parser.next_request()


@pytest.mark.parametrize("compiled", [False, True], ids=["python", "compiled"])
def test_a_request_put_back_is_the_next_one_taken(compiled):
    if compiled:
        compiled_parser = pytest.importorskip("router._parser")
        parser = compiled_parser.RequestParser(1 << 20, 1024)
    else:
        parser = RequestParser(1 << 20, 1024)
    parser.feed(b"SUBSCRIBE a\r\n*1\r\n$4\r\nPING\r\nECHO x\r\n")
    taken = []
    for req in parser.requests():
        taken.append(req)
        if req == [b"PING"]:
            parser.unread(req)  # the request loop stops at it, to run it later
            break
    assert taken == [[b"SUBSCRIBE", b"a"], [b"PING"]]
    parser.feed(b"*1\r\n$4\r\nQUIT\r\n")
    assert list(parser.requests()) == [[b"PING"], [b"ECHO", b"x"], [b"QUIT"]]
    assert parser.next_request() is None
