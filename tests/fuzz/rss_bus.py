"""RSS over millions of forwarded PUBLISH through the bus's compiled plane:
they must not leak a reference (issue 29).
``uv run python -m tests.fuzz.rss_bus --frames 4000000``.

In-process (:mod:`bench.hot_path`: transports and links that only count
bytes), half the frames each way: read from a peer's link in batches of 16
(decoded, numbered in order, delivered to a RESP2 and a RESP3 subscriber of
the channel and a pattern subscriber), and forwarded to a peer by
``forward_publish`` (routed, numbered, framed, kept in a 1 MiB replay
buffer, so frames are evicted as they come); the message size varies, so
no frame is the same object twice. Prints the peak RSS (``ru_maxrss``, KiB)
after a tenth of each half and at the end; exit 1 when it grew by more than
``--slack`` KiB or when the bus does not run the compiled plane.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys

from bench.hot_path import CHANNEL, forwarder, numbered, receiver
from cluster_bus.codec import encode_publish, short_id
from cluster_bus.link import Link

BATCH = 16


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def receive(frames: int) -> tuple[int, int]:
    """(peak RSS after a tenth, at the end), KiB, of ``frames`` frames read."""
    more = (b"HELLO 3\r\nSUBSCRIBE bench:ch\r\n", b"PSUBSCRIBE bench:*\r\n")
    link, sub_transport, peer = await receiver(more)
    if type(link) is Link:
        raise RuntimeError("the bus runs the reference: build the extension")
    sender = short_id(peer)
    templates = [encode_publish(sender, 1, 0, False, CHANNEL, b"x" * n) for n in range(1, 201)]
    seq, warm = 0, 0
    for i in range(frames // BATCH):
        link.data_received(numbered(templates[i % 200], BATCH, seq + 1))
        seq += BATCH
        await asyncio.sleep(0)
        if i == frames // BATCH // 10:
            warm = _rss_kib()
    if link.closed or sub_transport.written < seq * 30:
        raise RuntimeError(f"messages missing: {sub_transport.written} bytes for {seq} frames")
    return warm, _rss_kib()


async def forward(forwards: int) -> tuple[int, int]:
    """(peak RSS after a tenth, at the end), KiB, of ``forwards`` forwards."""
    publish, link = forwarder(replay_bytes=1 << 20)
    if type(getattr(publish, "__self__", None)).__module__ != "cluster_bus._forwarding":
        raise RuntimeError("the bus runs the reference: build the extension")
    messages = [b"y" * n for n in range(1, 201)]
    warm = 0
    for i in range(forwards):
        publish(CHANNEL, messages[i % 200], False, i)
        if i % BATCH == 0:
            await asyncio.sleep(0)
        if i == forwards // 10:
            warm = _rss_kib()
    if link.frames != forwards:
        raise RuntimeError(f"forwards missing: {link.frames} of {forwards}")
    return warm, _rss_kib()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=2_000_000, help="half read, half forwarded")
    parser.add_argument("--slack", type=int, default=2048, help="KiB of growth allowed")
    args = parser.parse_args(argv)
    grew = 0
    for name, half in (("read", receive), ("forwarded", forward)):
        warm, end = asyncio.run(half(args.frames // 2))
        grew = max(grew, end - warm)
        print(f"rss_bus: {args.frames // 2} frames {name}: peak RSS {warm} -> {end} KiB")
    return 0 if grew <= args.slack else 1


if __name__ == "__main__":
    sys.exit(main())
