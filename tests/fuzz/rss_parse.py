"""RSS over millions of parses: the compiled request parser must not leak a
reference (issue 29). ``uv run python -m tests.fuzz.rss_parse --requests 10000000``.

Feeds pipelined batches of 16 PUBLISH requests (the shape redis-benchmark
``-P 16`` sends), each batch split at a random point into two reads, plus an
inline PING and a protocol error every 1,000 batches on a fresh parser (the
error path's objects), and prints the peak RSS (``ru_maxrss``, KiB) after a
warm-up and at the end. Exit 1 when it grew by more than ``--slack`` KiB.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import resource
import sys

from router.parser import ProtocolError, RequestParser

REQUEST = b"*3\r\n$7\r\nPUBLISH\r\n$8\r\nbench:ch\r\n$5\r\nhello\r\n"
BATCH = REQUEST * 16


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run(cls: type, batches: int, rnd: random.Random) -> int:
    """Parse ``batches`` batches; returns the requests seen."""
    parser = cls(512 << 20, 1 << 20)
    seen = 0
    for i in range(batches):
        cut = rnd.randrange(1, len(BATCH))
        parser.feed(BATCH[:cut])
        seen += sum(1 for _ in parser.requests())
        parser.feed(BATCH[cut:])
        seen += sum(1 for _ in parser.requests())
        if i % 1000 == 0:
            other = cls(100, 1024)
            other.feed(b"PING a\r\n*1\r\n$3\r\nabc\r\n*1\r\n$1000\r\n")
            with contextlib.suppress(ProtocolError):
                seen += sum(1 for _ in other.requests())
            other.feed(b"*2\r\n$4\r\nECHO\r\n$3\r\nab")
            other.release()
    return seen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=10_000_000)
    ap.add_argument("--slack", type=int, default=1024, help="KiB of growth allowed")
    ap.add_argument("--python", action="store_true", help="the reference parser instead")
    args = ap.parse_args(argv)
    if args.python:
        cls: type = RequestParser
    else:
        from router._parser import RequestParser as cls  # type: ignore[import-not-found,no-redef]
    rnd = random.Random(5)
    batches = args.requests // 16
    run(cls, max(batches // 10, 1), rnd)  # warm-up: allocator and caches settle
    before = _rss_kib()
    seen = run(cls, batches, rnd)
    after = _rss_kib()
    print(f"{cls.__module__}.{cls.__name__}: {seen} requests, maxrss {before} -> {after} KiB")
    return 0 if after - before <= args.slack else 1


if __name__ == "__main__":
    sys.exit(main())
