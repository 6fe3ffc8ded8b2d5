"""router/hooks.py's own tables and rules, beside the differential tests
(tests/differential/test_slowlog_monitor.py) that compare its output with
redis-server 7.0.15."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router import hooks
from router.commands import COMMANDS
from router.hooks import FAST, SKIP_SLOWLOG, UNMONITORED, flags_of, redacted, sdscatrepr


def _names() -> list[str]:
    names = []
    for cmd in COMMANDS.values():
        names += [cmd.name, *(c.name for c in (cmd.subcommands or {}).values())]
    return names


def test_flag_tables_are_redis_7_0_15s_for_every_command_of_the_node():
    names = _names()
    assert {n for n in names if {"admin", "skip_monitor"} & flags_of(n)} == UNMONITORED
    assert {n for n in names if "skip_slowlog" in flags_of(n)} == SKIP_SLOWLOG
    assert {n for n in names if "fast" in flags_of(n)} == FAST


def test_sdscatrepr_quotes_as_redis():
    assert (
        sdscatrepr(b'a"b\\c\n\r\t\x07\x08\x00\xff ~') == b'"a\\"b\\\\c\\n\\r\\t\\a\\b\\x00\\xff ~"'
    )


def _line_builders() -> list:
    """The pure-Python data plane's MONITOR line, and the compiled one when it is built
    (as the node would pick it: not under ``BLOOMCAST_NO_EXTENSIONS``)."""
    builders = [hooks.python_monitor_line]
    try:
        from router._resp import monitor_line
    except ImportError:
        return builders
    return [*builders, monitor_line]


def _reference(head: bytes, args: list[bytes]) -> bytes:
    return head + b"".join(b" " + sdscatrepr(a) for a in args) + b"\r\n"


#: every byte value, then the sequences an escaping shortcut could confuse:
#: an escaped backslash before ``x07``, quotes, 7 and 8 beside backslashes
TRICKY = [
    bytes(range(256)),
    bytes(range(255, -1, -1)) * 3,
    b"\\x07\\\x07\x07\\\x08'\\'\"\\\"\x00\\",
    b"",
    b"x" * 70_000,
]


@pytest.mark.parametrize("build", _line_builders(), ids=lambda f: f.__module__)
def test_monitor_line_escapes_every_byte_as_sdscatrepr(build):
    assert build(b"+1.000000 [0 127.0.0.1:1]", TRICKY) == _reference(
        b"+1.000000 [0 127.0.0.1:1]", TRICKY
    )
    assert build(b"h", [b"PUBLISH", bytes(range(256))]).endswith(
        b' "\\x00\\x01\\x02\\x03\\x04\\x05\\x06\\a\\b\\t\\n\\x0b\\x0c\\r\\x0e'
        + b"\\x0f"
        + b"".join(b"\\x%02x" % c for c in range(16, 32))
        + b" !\\\"#$%&'()*+,-./0123456789:;<=>?@"
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\\\]^_`abcdefghijklmnopqrstuvwxyz{|}~"
        + b"".join(b"\\x%02x" % c for c in range(127, 256))
        + b'"\r\n'
    )


@given(st.lists(st.binary(max_size=40) | st.sampled_from(TRICKY[2:3]), max_size=5))
def test_monitor_line_builders_agree_on_any_arguments(args):
    for build in _line_builders():
        assert build(b"h", args) == _reference(b"h", args)


def test_the_node_builds_monitor_lines_with_its_plane():
    """Under ``BLOOMCAST_NO_EXTENSIONS`` the pure-Python data plane's; else the compiled
    one when it is built."""
    if os.environ.get("BLOOMCAST_NO_EXTENSIONS"):
        assert hooks.monitor_line is hooks.python_monitor_line
    else:
        assert hooks.monitor_line is _line_builders()[-1]


def test_redaction_stops_where_redis_returned():
    hello = [b"HELLO", b"3", b"AUTH", b"u", b"p", b"BAD", b"AUTH", b"x", b"y"]
    shown = [b"HELLO", b"3", b"AUTH", b"(redacted)", b"(redacted)", b"BAD", b"AUTH", b"x", b"y"]
    assert redacted("hello", hello) == shown
    assert redacted("auth", [b"AUTH", b"a", b"b", b"c"]) == [b"AUTH", b"a", b"b", b"c"]
    assert redacted("config|set", [b"CONFIG", b"SET", b"REQUIREPASS", b"pw", b"timeout", b"1"]) == [
        b"CONFIG", b"SET", b"REQUIREPASS", b"(redacted)", b"timeout", b"1"
    ]  # fmt: skip


def test_latency_histogram_buckets_are_redis_hdr_steps(plane):
    """Bucket i holds a call of fewer than (1024 << i) + (8 << i) ns (its
    whole microseconds, at least 1): Redis 7's bounds 1, 2, 4, 8, 16, 33 us..."""
    stat = plane.NodeStats().command_stat("ping")

    def bucket(usec: int) -> int:
        stat.histogram = None
        stat.timed(usec * 1000, 1)
        return stat.histogram.index(1)

    def reference(value: int) -> int:
        level = 0
        while value >= (1032 << level) and level < 20:
            level += 1
        return level

    for usec in [*range(0, 5000), 16_508, 16_509, 10**6, 10**7]:
        assert bucket(usec) == reference(usec * 1000), usec
    stat.histogram = None
    stat.timed(30_000, 3)  # three calls of 10 us each
    assert stat.histogram[reference(10_000)] == 3 and stat.nanoseconds >= 30_000


class _Monitor:
    """What :meth:`Hooks.feed` reads of a client (a connection in a node)."""

    def __init__(self, client_id: int) -> None:
        self.id = client_id
        self.addr = "127.0.0.1:1"
        self.extras = SimpleNamespace(db=0, monitor=False)
        self.ctx = SimpleNamespace(settings=SimpleNamespace(normal_limited=False))
        self.closing = False
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


def test_a_commands_line_is_made_once_for_every_monitor():
    watched = hooks.Hooks()
    monitors = [_Monitor(i) for i in range(3)]
    for m in monitors:
        watched.monitors[m.id] = m
    own = watched.feed(monitors[0], [b"PUBLISH", b"ch", b"x" * 100_000])
    assert own.endswith(b'"PUBLISH" "ch" "' + b"x" * 100_000 + b'"\r\n')
    assert monitors[1].written[0] is monitors[2].written[0] is own  # one object, not a copy
