"""Fuzz the RESP request parser: ``uv run python -m tests.fuzz.fuzz_resp --count 1000000``.

Mutates valid requests (bit flips, cut points, insertions of protocol bytes
and RESP3 type bytes, huge counts) and feeds them in random chunks to three
parsers: the pure-Python data plane's (hiredis fast path on), the pure-Python reference
(``fast=False``) and, when the extension is built, the compiled twin
(``router._parser.RequestParser``, issue 29; ``--no-compiled`` leaves it
out, and ``--require-compiled`` fails without it). Only ProtocolError may
escape; every call returns; the parser never holds more than it was fed;
all of them return the same requests and raise the same error (class and
text) at the same point. The compiled twin and the reference must also
agree on where a huge request is sliced (``backlog``), the bytes buffered,
``partial_bytes``, ``query_buffer`` and what ``release`` hands over.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from router.parser import SLICE_BULKS, ProtocolError, RequestParser

try:
    from router._parser import RequestParser as CompiledParser
except ImportError:  # not built: the fuzzer compares the Python paths only
    CompiledParser = None  # type: ignore[assignment,misc]

SEEDS = [
    b"*3\r\n$7\r\nPUBLISH\r\n$4\r\nnews\r\n$5\r\nhello\r\n",
    b"SUBSCRIBE a b c\r\n",
    b"ECHO \"a\\x41\\n\" 'b\\'c'\r\n",
    b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n*0\r\n*-1\r\n",
    b"PING\nPING\r\n",
    # reply types a request must not contain, which hiredis would accept
    b"*3\r\n$7\r\nPUBLISH\r\n+news\r\n=9\r\ntxt:hello\r\n",
    b"*2\r\n$4\r\nECHO\r\n(12345\r\n*2\r\n$4\r\nECHO\r\n|1\r\n+a\r\n+b\r\n+c\r\n",
    b">2\r\n$4\r\nECHO\r\n$1\r\na\r\n~1\r\n$4\r\nPING\r\n",
    b"*2\r\n$4\r\nECHO\r\n:1\r\n*2\r\n$4\r\nECHO\r\n*1\r\n$1\r\nx\r\n",
    b"*12\r\n" + b"$1\r\na\r\n" * 12,
    b"*1\r\n$150\r\n" + b"x" * 150 + b"\r\n",
    b"*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$2\r\nbb\r\n*1\r\n$4\r\nPING\r\n",
    # a payload that looks like a big aggregate header (the fast path steps aside)
    b"*3\r\n$7\r\nPUBLISH\r\n$1\r\nc\r\n$10\r\n*12345\r\n\r\n\r\n",
    # Redis ends a line at a lone CR and skips the byte after it, and never
    # checks the two bytes after a bulk; a NUL hides a line's end from strchr
    b"*1\rX$4\rXPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nabXY*1\n\n$4\r\nPING\r\n",
    b"*2\r\n$4\r\nECHO\r\n$1\x00\r\nx\r\n*1\x00\r\n",
    # more bulks than one slice reads (backlog), when max_multibulk allows it
    b"*%d\r\n" % (SLICE_BULKS + 3) + b"$1\r\na\r\n" * (SLICE_BULKS + 3),
]
TOKENS = [b"*", b"$", b"\r\n", b"\r", b"\n", b'"', b"'", b"\\x", b"-1", b"99999999999", b"0", b" "]
TOKENS += [b"\x00", b"\rX", b"2147483648", b"2147483647"]
TOKENS += [b"+", b":", b"=", b"(", b"|", b"~", b">", b"%", b"_", b",", b"#", b"!", b"txt:"]


def mutate(rnd: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.random()
        pos = rnd.randint(0, len(buf))
        if op < 0.3 and buf:
            i = rnd.randrange(len(buf))
            buf[i] ^= 1 << rnd.randrange(8)
        elif op < 0.6:
            buf[pos:pos] = rnd.choice(TOKENS)
        elif op < 0.8 and buf:
            del buf[pos : pos + rnd.randint(1, 8)]
        else:
            buf[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
    return bytes(buf)


def make_input(rnd: random.Random) -> bytes:
    """One to four seeds, each mutated with probability 0.6: intact requests
    around a damaged one exercise the fast path and its hand-over."""
    parts = [rnd.choice(SEEDS) for _ in range(rnd.randint(1, 4))]
    return b"".join(mutate(rnd, part) if rnd.random() < 0.6 else part for part in parts)


SLICE = ("slice",)  # where a parse stopped with ``backlog`` set


def _drain(parser: object, out: list[object], slices: bool = False) -> bool:
    """Parse what is buffered into ``out``; False once a ProtocolError ended it.

    ``slices``: through ``requests()``, noting each stop with ``backlog`` set
    as :data:`SLICE` (the hiredis fast path never slices: it is not asked)."""
    try:
        if not slices:
            while (req := parser.next_request()) is not None:  # type: ignore[attr-defined]
                out.append(req)
            return True
        while True:
            out.extend(parser.requests())  # type: ignore[attr-defined]
            if not parser.backlog:  # type: ignore[attr-defined]
                return True
            out.append(SLICE)
    except ProtocolError as exc:
        out.append(("error", type(exc).__name__, str(exc)))
        return False


def _state(parser: object, running: bool) -> tuple[object, ...]:
    p: RequestParser = parser  # type: ignore[assignment]
    return (p.buffered, p.partial_bytes, p.backlog, p.query_buffer(running))


def run_one(data: bytes, rnd: random.Random, compiled: bool = True) -> None:
    authenticated = rnd.random() < 0.8
    max_bulk = rnd.choice([1 << 20, 100])
    max_multibulk = rnd.choice([1 << 10, 1 << 10, 1 << 10, 1 << 12])
    fast = RequestParser(max_bulk=max_bulk, max_multibulk=max_multibulk)
    reference = RequestParser(max_bulk=max_bulk, max_multibulk=max_multibulk, fast=False)
    twin = (
        CompiledParser(max_bulk, max_multibulk) if compiled and CompiledParser is not None else None
    )
    fast.authenticated = reference.authenticated = authenticated
    if twin is not None:
        twin.authenticated = authenticated
    got: list[object] = []
    want: list[object] = []
    sliced: list[object] = []
    twins: list[object] = []
    fed = 0
    pos = 0
    while pos < len(data):
        step = rnd.randint(1, 64) if rnd.random() < 0.5 else rnd.randint(64, 4096)
        chunk = data[pos : pos + step]
        fast.feed(chunk)
        reference.feed(chunk)
        pos += step
        fed += len(chunk)
        if rnd.random() < 0.05:
            # AUTH in the middle of a pipeline lifts the limits for what follows
            fast.authenticated = reference.authenticated = True
            if twin is not None:
                twin.authenticated = True
        going = _drain(fast, got)
        if twin is None:
            _drain(reference, want)
        else:
            twin.feed(chunk)
            _drain(reference, sliced, slices=True)
            _drain(twin, twins, slices=True)
            assert twins == sliced, f"compiled {twins!r} != reference {sliced!r} on {data!r}"
            running = rnd.random() < 0.5
            state = _state(reference, running)
            assert _state(twin, running) == state, f"{_state(twin, running)} != {state} on {data!r}"
            want = [r for r in sliced if r is not SLICE]
        assert got == want, f"fast path {got!r} != reference {want!r} on {data!r}"
        assert fast.buffered == reference.buffered <= fed
        if not going:
            break
    if twin is not None:
        assert twin.release() == reference.release(), f"release differs on {data!r}"
        assert twin.partial_bytes == reference.partial_bytes == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-compiled", action="store_true", help="the Python paths only")
    ap.add_argument("--require-compiled", action="store_true", help="fail without the twin")
    args = ap.parse_args(argv)
    compiled = not args.no_compiled and CompiledParser is not None
    if args.require_compiled and not compiled:
        print("the compiled parser (router._parser) is not built", file=sys.stderr)
        return 2
    rnd = random.Random(args.seed)
    start = time.monotonic()
    slowest = 0.0
    for i in range(args.count):
        data = make_input(rnd)
        t = time.monotonic()
        run_one(data, rnd, compiled)
        slowest = max(slowest, time.monotonic() - t)
        if i and i % 200_000 == 0:
            print(f"{i} inputs, {time.monotonic() - start:.0f} s", file=sys.stderr)
    parsers = "fast, reference and compiled" if compiled else "fast and reference"
    print(
        f"{args.count} inputs ({parsers}, seed {args.seed}), no unexpected exception, "
        f"slowest {slowest * 1000:.2f} ms, "
        f"{time.monotonic() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
