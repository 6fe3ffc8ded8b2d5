"""MONITOR's output against the oracle (redis-server 7.0.15), issue 49: a
payload holding every byte value quoted as Redis's ``sdscatrepr`` quotes it
(the node's line is built in C loops, router/hooks.py), and a monitor held
to ``client-output-buffer-limit normal`` as Redis holds it (a normal client,
``getClientType``): one that reads nothing is cut once it passes the hard
limit, one line over the hard limit cuts even a monitor that reads, and the
node counts each cut once (INFO ``client_output_buffer_limit_disconnections``)."""

from __future__ import annotations

import concurrent.futures
import re
import socket
import time

import pytest

from tests.differential.oracle import redis_only
from tests.procs import connect, read_quiet

pytestmark = [pytest.mark.timeout(120), redis_only]

#: every byte value, and the sequences an escaping shortcut could confuse
PAYLOADS = [
    bytes(range(256)),
    bytes(range(255, -1, -1)) * 40,
    b"\\x07\\\x07\x07\\\\\x08'\\'\"\\\"\x00\\",
    b"",
]
LIMITED = b'CONFIG SET client-output-buffer-limit "normal 1mb 0 0"\r\n'
UNLIMITED = b'CONFIG SET client-output-buffer-limit "normal 0 0 0"\r\n'


def _bulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def _lines(port: int) -> bytes:
    with connect(port) as mon, connect(port) as client:
        mon.sendall(b"MONITOR\r\n")
        assert read_quiet(mon)[0] == b"+OK\r\n"
        client.sendall(b"".join(_bulk(b"PUBLISH", b"ch\xff", p) for p in PAYLOADS))
        read_quiet(client)
        lines, _ = read_quiet(mon)
    return re.sub(rb"\+\d+\.\d{6} \[0 127\.0\.0\.1:\d+\]", b"+0 ?", lines)


def test_monitor_quotes_every_byte_value_as_the_oracle(servers):
    oracle, node = servers
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        theirs = pool.submit(_lines, oracle)
        ours = _lines(node)
    want = theirs.result()
    assert ours == want
    assert ours.count(b"\r\n") == len(PAYLOADS)
    assert b"\\x06\\a\\b\\t\\n\\x0b" in ours and b'!\\"#' in ours


def _monitor_count(s: socket.socket) -> int:
    s.sendall(b"CLIENT LIST\r\n")
    return read_quiet(s)[0].count(b" flags=O ")


def _cuts(s: socket.socket) -> int | None:
    """INFO's count of clients cut at an output limit (None: the server has none)."""
    s.sendall(b"INFO stats\r\n")
    m = re.search(rb"client_output_buffer_limit_disconnections:(\d+)", read_quiet(s)[0])
    return int(m[1]) if m else None


def _cut_while_not_reading(port: int) -> tuple[int, int, int | None]:
    """A monitor with a 4 KiB receive buffer that reads nothing, 400 PUBLISH
    of 64 KiB under ``normal 1mb 0 0``: (monitors before the PUBLISHes,
    monitors after, clients counted as cut meanwhile)."""
    with connect(port) as control, connect(port) as mon, connect(port) as client:
        control.sendall(LIMITED)
        assert read_quiet(control)[0] == b"+OK\r\n"
        mon.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        mon.sendall(b"MONITOR\r\n")
        time.sleep(0.1)
        before, cuts = _monitor_count(control), _cuts(control)
        client.settimeout(30)
        message = _bulk(b"PUBLISH", b"ch", b"m" * 65536)
        for _ in range(400):
            client.sendall(message)
        replies = b""
        while replies.count(b"\r\n") < 400:
            replies += client.recv(1 << 16)
        after = _monitor_count(control)
        counted = _cuts(control)
        control.sendall(UNLIMITED)
        read_quiet(control)
    return before, after, None if cuts is None or counted is None else counted - cuts


def test_a_monitor_that_reads_nothing_is_cut_at_the_normal_limit_as_the_oracle(servers):
    oracle, node = servers
    assert _cut_while_not_reading(oracle)[:2] == (1, 0)  # (Redis 7.0.15 has no counter)
    assert _cut_while_not_reading(node) == (1, 0, 1)


def _cut_by_one_line(port: int) -> tuple[bytes, bool, int | None]:
    """A monitor that reads, one PUBLISH of 2 MiB under ``normal 1mb 0 0``:
    (what the monitor got after its +OK, whether it was closed, cuts counted)."""
    with connect(port) as control, connect(port) as mon:
        control.sendall(LIMITED)
        assert read_quiet(control)[0] == b"+OK\r\n"
        cuts = _cuts(control)
        mon.sendall(b"MONITOR\r\n")
        assert read_quiet(mon)[0] == b"+OK\r\n"
        control.sendall(_bulk(b"PUBLISH", b"ch", b"x" * (2 << 20)))
        assert read_quiet(control, 2.0)[0] == b":0\r\n"
        got, closed = read_quiet(mon, 1.0)
        counted = _cuts(control)
        control.sendall(UNLIMITED)
        read_quiet(control)
    return got, closed, None if cuts is None or counted is None else counted - cuts


def test_one_line_over_the_hard_limit_cuts_a_reading_monitor_as_the_oracle(servers):
    oracle, node = servers
    assert _cut_by_one_line(oracle)[:2] == (b"", True)
    assert _cut_by_one_line(node) == (b"", True, 1)


def test_a_monitor_under_the_limit_gets_every_line(servers):
    """The limit cuts no monitor whose output stays under it: 20 PUBLISH of
    64 KiB read as they come."""
    _, node = servers
    with connect(node) as control, connect(node) as mon:
        control.sendall(LIMITED)
        read_quiet(control)
        mon.sendall(b"MONITOR\r\n")
        read_quiet(mon)
        control.sendall(_bulk(b"PUBLISH", b"ch", b"m" * 65536) * 20)
        got, closed = read_quiet(mon, 0.3)
        control.sendall(UNLIMITED)
        read_quiet(control)
    assert not closed and got.count(b'"PUBLISH" "ch"') == 20
