"""Fuzz the RESP request parser: ``uv run python -m tests.fuzz.fuzz_resp --count 1000000``.

Mutates valid requests (bit flips, cut points, insertions of protocol bytes,
huge counts) and feeds them in random chunks. Only ProtocolError may escape;
every call returns; the parser never holds more than it was fed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from router.resp import ProtocolError, RequestParser

SEEDS = [
    b"*3\r\n$7\r\nPUBLISH\r\n$4\r\nnews\r\n$5\r\nhello\r\n",
    b"SUBSCRIBE a b c\r\n",
    b"ECHO \"a\\x41\\n\" 'b\\'c'\r\n",
    b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n*0\r\n*-1\r\n",
    b"PING\nPING\r\n",
]
TOKENS = [b"*", b"$", b"\r\n", b"\r", b"\n", b'"', b"'", b"\\x", b"-1", b"99999999999", b"0", b" "]


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


def run_one(data: bytes, rnd: random.Random) -> None:
    parser = RequestParser(max_bulk=1 << 20, max_multibulk=1 << 10)
    parser.authenticated = rnd.random() < 0.8
    fed = 0
    pos = 0
    try:
        while pos < len(data):
            step = rnd.randint(1, 64)
            parser.feed(data[pos : pos + step])
            pos += step
            fed += step
            while parser.next_request() is not None:
                pass
            assert parser.buffered <= fed
    except ProtocolError:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rnd = random.Random(args.seed)
    start = time.monotonic()
    slowest = 0.0
    for i in range(args.count):
        data = mutate(rnd, b"".join(rnd.choice(SEEDS) for _ in range(rnd.randint(1, 3))))
        t = time.monotonic()
        run_one(data, rnd)
        slowest = max(slowest, time.monotonic() - t)
        if i and i % 200_000 == 0:
            print(f"{i} inputs, {time.monotonic() - start:.0f} s", file=sys.stderr)
    print(
        f"{args.count} inputs, no unexpected exception, slowest {slowest * 1000:.2f} ms, "
        f"{time.monotonic() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
