"""Mutational fuzzer of the cluster bus decoder (cluster_bus.decoder.FrameDecoder).

    uv run python -m tests.fuzz.fuzz_bus --count 1000000 [--seed N]

Starts from a corpus of valid frames of every type, mutates them (bit flips,
byte overwrites, inserts, deletes, truncation, splices, length and count
fields set to extremes), feeds each input in random-sized pieces and checks:
no exception other than BusProtocolError, no input slower than a second
(hang), the decoder's buffer never above one header plus max_body
(bounded memory), and the PUBLISH fast path agreeing with the reference
decoder (``fast=False``, fed the same pieces): the same frames, then the same
error text; when the compiled plane is built, its decoder too
(``cluster_bus._decoder``, whose PUBLISH run is ``cluster_bus/_codec.pyx``'s
C), fed the same pieces. Exit status 1 with the offending input in hex on
failure.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from cluster_bus.codec import HEADER_SIZE, BusProtocolError, encode
from cluster_bus.decoder import FrameDecoder

try:
    from cluster_bus._decoder import FrameDecoder as CompiledDecoder  # type: ignore[import-not-found]
except ImportError:  # not built: the Python paths only
    CompiledDecoder = None
from cluster_bus.frames import (
    Ack,
    Fail,
    FilterDelta,
    FilterFull,
    FilterKind,
    FilterRequest,
    GossipEntry,
    Hello,
    HelloAuth,
    Leave,
    Meet,
    Message,
    Ping,
    Pong,
    ProbeAck,
    ProbeReq,
    Publish,
    Resend,
    Session,
)

MAX_BODY = 1 << 16
NID = "0123456789abcdef0123456789abcdef01234567"


def corpus() -> list[bytes]:
    g = (
        GossipEntry(NID, "127.0.0.1", 7001, 17001, 2, 5, 123456, 2**64 - 1, 7),
        GossipEntry(NID, "10.0.0.9", 7003, 17003, 0, 1, 2, 3, 4, 6380, "node-3.example"),
    )
    sparse = bytearray(128)
    sparse[3] = 0x41
    msgs: list[Message] = [
        Hello(NID, b"n" * 16, b"m" * 32, True),
        Hello(NID, b"n" * 16),
        Hello(NID, b"n" * 16, b"", False, 2**64 - 1),
        HelloAuth(b"a" * 32),
        Meet(NID, "127.0.0.1", 7001, 17001, 1, 2, 3, 0b101, False, 0, g),
        Ping(NID, "::1", 7002, 17002, 9, 8, 7, 0, True, 1, g + g, 2**32 - 1),
        Pong(NID, "h", 1, 2, 3, 4, 5, 6, False, 0, ()),
        Pong(NID, "", 1, 2, 3, 4, 5, 6, False, 0, (), 7, 6380, "me.example"),
        FilterRequest(FilterKind.PATTERNS),
        FilterFull(FilterKind.CHANNELS, 1024, 7, bytes(sparse), 11, 2),
        FilterFull(FilterKind.PATTERNS, 64, 7, b"\xff\x01" * 4, 11, 2, 0b11, True),
        FilterDelta(FilterKind.CHANNELS, 5, 1024, 1, 2, (1, 2, 1023), (7,), 3),
        Publish(1, 2, False, b"news", b"hello"),
        Publish(2**32 - 1, 2**64 - 1, True, b"", b"x" * 300),
        Fail(NID, 3),
        ProbeReq(NID),
        ProbeAck(NID),
        Leave(),
        Ack(77),
        Session(2**64 - 1, 1, 2**32 - 1),
        Session(7, 5, 9, 2, 1_700_000_000_000, 1_700_000_004_000, 3),
        Resend(0x1234, 99),
        Resend(0x1234, 99, 12),
    ]
    frames = [encode(m, sender=0x01234567) for m in msgs]
    return [*frames, b"".join(frames[:5]), b"".join(frames[8:12])]


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        n = len(buf)
        if op == 0 and n:
            i = rng.randrange(n)
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            buf[rng.randrange(n)] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op == 2:
            i = rng.randint(0, n)
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 3 and n:
            i = rng.randrange(n)
            del buf[i : i + rng.randint(1, 8)]
        elif op == 4 and n:
            del buf[rng.randrange(n) :]
        elif op == 5:
            other = rng.choice(pool)
            i = rng.randint(0, n)
            buf[i:] = other[rng.randint(0, len(other)) :]
        elif op == 6 and n >= 10:
            # the length field, or any 4-byte field, to an extreme
            i = 6 if rng.random() < 0.5 else rng.randrange(n - 3)
            buf[i : i + 4] = rng.choice((0, 1, 0xFFFFFFFF, MAX_BODY, MAX_BODY + 1)).to_bytes(
                4, "big"
            )
        elif op == 7 and n >= 4:
            buf[3] = rng.randrange(16)  # message type
        elif op == 8:
            buf += rng.choice(pool)
    return bytes(buf)


def _reference(
    data: bytes, steps: list[int], cls: type = FrameDecoder, fast: bool = False
) -> tuple[list[Message], str | None]:
    """What the reference decoder (no PUBLISH fast path) makes of the same
    pieces (or ``cls`` with ``fast``)."""
    dec = cls(max_body=MAX_BODY, fast=fast)
    out: list[Message] = []
    pos = 0
    try:
        for step in steps:
            out += dec.feed(data[pos : pos + step])
            pos += step
    except BusProtocolError as exc:
        return out, str(exc)
    return out, None


def run(count: int, seed: int = 0) -> dict[str, float]:
    """Fuzz ``count`` inputs; raise AssertionError (with the input) on a finding."""
    rng = random.Random(seed)
    pool = corpus()
    stats = {
        "inputs": 0,
        "errors": 0,
        "decoded_ok": 0,
        "frames": 0,
        "max_buffered": 0,
        "slowest_ms": 0.0,
    }
    limit = HEADER_SIZE + MAX_BODY + 4096
    for _ in range(count):
        data = mutate(rng, rng.choice(pool), pool)
        dec = FrameDecoder(max_body=MAX_BODY)
        steps = []
        t0 = time.perf_counter()
        got: list[Message] = []
        error = None
        try:
            pos = 0
            while pos < len(data):
                step = rng.choice((1, 3, 16, len(data)))
                steps.append(step)
                got += dec.feed(data[pos : pos + step])
                pos += step
                assert dec.buffered <= limit, f"buffer {dec.buffered} above {limit}"
            stats["decoded_ok"] += 1
        except BusProtocolError as exc:
            stats["errors"] += 1
            error = str(exc)
        except Exception as exc:
            raise AssertionError(f"{type(exc).__name__}: {exc} on input {data.hex()}") from exc
        stats["frames"] += len(got)
        want, want_error = _reference(data, steps)
        if (got, error) != (want, want_error):
            raise AssertionError(
                f"fast path {got!r} / {error!r} != reference {want!r} / {want_error!r}"
                f" on input {data.hex()}"
            )
        if CompiledDecoder is not None:
            compiled = _reference(data, steps, CompiledDecoder, fast=True)
            if compiled != (want, want_error):
                raise AssertionError(
                    f"compiled {compiled!r} != reference {want!r} / {want_error!r}"
                    f" on input {data.hex()}"
                )
        elapsed = (time.perf_counter() - t0) * 1000
        if elapsed > 1000:
            raise AssertionError(f"input took {elapsed:.0f} ms (hang?): {data.hex()}")
        stats["slowest_ms"] = max(stats["slowest_ms"], elapsed)
        stats["max_buffered"] = max(stats["max_buffered"], dec.buffered)
        stats["inputs"] += 1
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    t0 = time.time()
    try:
        stats = run(args.count, args.seed)
    except AssertionError as exc:
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    stats["seconds"] = round(time.time() - t0, 1)
    print(" ".join(f"{k}={v}" for k, v in stats.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
