"""RSS over millions of PUBLISH through the compiled plane's request loop,
with fan-out: the loop must not leak a reference (issues 29, 42).
``uv run python -m tests.fuzz.rss_loop --publishes 10000000``.

A node in-process (:mod:`bench.hot_path`: transports that only count bytes)
with 2 channel subscribers (one RESP2, one RESP3: the push frame), and a
pattern subscriber and a shard channel subscriber; a publisher sends batches
of ``--pipeline`` PUBLISH (16; 1 takes the lone request's flush), then
one SPUBLISH and one PING with an argument (the other commands run in line),
each batch one read and one loop turn, the message size varying (so no
frame is the same object twice).
Prints the peak RSS (``ru_maxrss``, KiB) after a warm-up and at the end;
exit 1 when it grew by more than ``--slack`` KiB or when the node is not
running the compiled loop.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys

from bench.hot_path import CountingTransport, publisher_and_subscribers
from router.connection import Connection


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def run(publishes: int, pipeline: int = 16) -> tuple[int, int]:
    """(peak RSS after a tenth of the run, at the end), KiB."""
    client, publisher, _ = await publisher_and_subscribers(1)
    assert client.conn is not None
    if type(client.conn) is Connection:
        raise RuntimeError("the node runs the pure-Python data plane: build the extension")
    node = client._node
    subscribing = (
        b"HELLO 3\r\nSUBSCRIBE bench:ch\r\n",
        b"PSUBSCRIBE bench:*\r\n",
        b"SSUBSCRIBE s\r\n",
    )
    for hello in subscribing:
        sub = node.client_class(node)
        sub.connection_made(CountingTransport())  # type: ignore[arg-type]
        sub.data_received(hello)
    await asyncio.sleep(0)
    batches = publishes // pipeline
    warm = 0
    for i in range(batches):
        size = b"%d" % (i % 200 + 1)
        request = b"*3\r\n$7\r\nPUBLISH\r\n$8\r\nbench:ch\r\n$" + size + b"\r\n"
        request += b"x" * (i % 200 + 1) + b"\r\n"
        tail = b"$" + size + b"\r\n" + b"y" * (i % 200 + 1) + b"\r\n"
        others = b"*3\r\n$8\r\nSPUBLISH\r\n$1\r\ns\r\n" + tail + b"*2\r\n$4\r\nPING\r\n" + tail
        client.data_received(request * pipeline + others)
        await asyncio.sleep(0)
        if i == batches // 10:
            warm = _rss_kib()
    if publisher.written < publishes * 4:  # ":3\r\n" per PUBLISH
        raise RuntimeError(f"replies missing: {publisher.written} bytes")
    return warm, _rss_kib()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=2_000_000)
    parser.add_argument("--pipeline", type=int, default=16, help="PUBLISH per read")
    parser.add_argument("--slack", type=int, default=2048, help="KiB of growth allowed")
    args = parser.parse_args(argv)
    warm, end = asyncio.run(run(args.publishes, args.pipeline))
    grew = end - warm
    print(
        f"rss_loop: {args.publishes} PUBLISH x 3 receivers, {args.pipeline} per read: "
        f"peak RSS {warm} -> {end} KiB"
    )
    return 0 if grew <= args.slack else 1


if __name__ == "__main__":
    sys.exit(main())
