"""The compiled data plane's switch, its request parser and its request
loop (issue 29).

The long differential runs are ``python -m tests.fuzz.fuzz_resp`` and
``python -m tests.fuzz.fuzz_loop``; here: which parser and loop a node
picks, INFO's ``bloomcast_data_plane`` of a real process, the parser twin
against the reference on the cases that matter most, and a short run of
the loop fuzzer."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import types

import pytest

import router
from cluster_bus.api import NoPeers
from router import dataplane
from router.client import Client
from router.config import NodeConfig
from router.connection import Connection
from router.info import info_sections
from router.node import Node
from router.parser import SLICE_BULKS, ProtocolError, RequestParser
from tests.fuzz import fuzz_loop
from tests.procs import bloomcast_node, connect, read_quiet

try:
    _compiled = importlib.import_module("router._dataplane")
except ImportError:
    _compiled = None

#: only a build asked to be pure (BLOOMCAST_NO_EXTENSIONS=1 at `uv sync`) may
#: lack the extension; anywhere else test_the_extension_is_built fails
needs_compiled = pytest.mark.skipif(
    _compiled is None and bool(os.environ.get(dataplane.ENV)),
    reason="a pure build (BLOOMCAST_NO_EXTENSIONS=1)",
)
PARSERS = [RequestParser] + ([_compiled.RequestParser] if _compiled is not None else [])


def _info_plane(env: dict[str, str]) -> bytes:
    with bloomcast_node(env=env) as port:
        s = connect(port)
        s.sendall(b"INFO bloomcast\r\n")
        reply, _ = read_quiet(s)
        s.close()
    return reply


@needs_compiled
def test_the_extension_is_built():
    """This machine kind has gcc and the Python headers: `uv sync` builds the
    compiled data plane, so its absence is a broken build, not a skip."""
    assert _compiled is not None, "router._dataplane was not built (see `uv sync`'s output)"


def test_a_node_started_with_no_extensions_reports_python():
    env = {**os.environ, dataplane.ENV: "1"}
    reply = _info_plane(env)
    assert b"# Bloomcast\r\nbloomcast_data_plane:python\r\n" in reply


@needs_compiled
def test_a_node_started_without_the_switch_reports_compiled():
    env = {k: v for k, v in os.environ.items() if k != dataplane.ENV}
    reply = _info_plane(env)
    assert b"# Bloomcast\r\nbloomcast_data_plane:compiled\r\n" in reply


def test_the_node_builds_its_connections_parser_and_loop_from_the_switch(monkeypatch):
    monkeypatch.setenv(dataplane.ENV, "1")
    node = Node(NodeConfig(port=0))
    assert node.context.parser_class is RequestParser
    assert node.context.connection_class is Connection
    assert node.client_class is Client
    assert info_sections(node)["bloomcast"] == {"bloomcast_data_plane": "python"}
    monkeypatch.delenv(dataplane.ENV)
    node = Node(NodeConfig(port=0))
    want = "python" if _compiled is None else "compiled"
    assert info_sections(node)["bloomcast"] == {"bloomcast_data_plane": want}
    if _compiled is not None:
        assert node.context.parser_class is _compiled.RequestParser
        cls = node.context.connection_class
        assert issubclass(cls, Connection) and cls.receive is _compiled.process
        assert issubclass(node.client_class, Client)
        assert node.client_class.data_received is _compiled.data_received


@needs_compiled
def test_the_compiled_request_loop_agrees_with_the_reference():
    """A short run of tests/fuzz/fuzz_loop.py: the same scripts through both
    loops, every output byte and the final state compared (the long run:
    ``python -m tests.fuzz.fuzz_loop --count 100000``)."""
    assert fuzz_loop.run(150, seed=7) == 150


def test_a_blocked_subscribers_message_waits_behind_its_reply_in_both_loops():
    """A subscriber whose second SUBSCRIBE waits for the pub/sub budget
    (blocked, a reply already queued this turn) is published to in the same
    turn: the message is held behind the awaited reply in both loops, where
    the twin's fast path (the queue's slot read at its offset) would have
    appended it before the reply."""
    import asyncio

    subscribe = b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n"
    subscribe += b"*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\nb\r\n$1\r\nc\r\n"
    publish = b"*3\r\n$7\r\nPUBLISH\r\n$1\r\na\r\n$2\r\nhi\r\n"

    async def run() -> list[bytes]:
        sides = [fuzz_loop.Side(node) for node in fuzz_loop.nodes()]
        for side in sides:
            side.node.pubsub.budget.ops = side.node.pubsub.budget.left = 1
        await asyncio.sleep(0)
        for side in sides:
            side.send(0, subscribe)
            side.send(1, publish)
            assert side.clients[0].conn is not None
            assert side.clients[0].conn.blocked is not None
        for _ in range(5):
            await asyncio.sleep(0)
        return [bytes(side.wires[0].out) for side in sides]

    reference, twin = asyncio.run(run())
    assert reference.endswith(b":3\r\n*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n")
    assert twin == reference


def _both_loops(steps: list[tuple[int, bytes]]) -> list[list[bytes]]:
    """Each client's output on the reference node and on the twin node after
    ``steps`` (client, bytes), a loop turn after each."""
    import asyncio

    async def run() -> list[list[bytes]]:
        sides = [fuzz_loop.Side(node) for node in fuzz_loop.nodes()]
        await asyncio.sleep(0)
        for client, data in steps:
            for side in sides:
                side.send(client, data)
            await asyncio.sleep(0)
        for _ in range(3):
            await asyncio.sleep(0)
        return [[bytes(wire.out) for wire in side.wires] for side in sides]

    return asyncio.run(run())


def _resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def test_a_pubsub_limit_past_a_c_long_long_is_no_limit_in_both_loops():
    """CONFIG SET accepts a pubsub hard limit of 2**63 bytes (no upper bound,
    as memtoull): the twin's limits are C long longs, and a PUBLISH after it
    must still run (review of stop 35: it raised OverflowError)."""
    limit = b"pubsub 9223372036854775808 0 0"
    reference, twin = _both_loops(
        [
            (1, _resp(b"SUBSCRIBE", b"ch")),
            (0, _resp(b"CONFIG", b"SET", b"client-output-buffer-limit", limit)),
            (0, _resp(b"PUBLISH", b"ch", b"hi") * 3),
        ]
    )
    assert reference[0] == b"+OK\r\n" + b":1\r\n" * 3
    assert reference[1].endswith(b"$2\r\nhi\r\n")
    assert twin == reference


def test_a_client_cut_by_its_own_publish_is_logged_with_publish_in_both_loops(caplog):
    """A RESP3 client stays NORMAL while subscribed, so its PUBLISH runs in
    line; a message to itself past the pubsub limit cuts it during the
    PUBLISH, and the log line names the command as Redis's does: cmd=publish
    (the twin set last_command only after the delivery before review)."""
    caplog.set_level(logging.INFO, logger="bloomcast")
    reference, twin = _both_loops(
        [
            (0, _resp(b"HELLO", b"3") + _resp(b"SUBSCRIBE", b"ch")),
            # from another client: a limit over what client 0 has pending
            (1, _resp(b"CONFIG", b"SET", b"client-output-buffer-limit", b"pubsub 400 0 0")),
            (0, _resp(b"PUBLISH", b"ch", b"x" * 500)),
        ]
    )
    assert twin == reference
    cuts = [r.getMessage() for r in caplog.records if "output buffer limits" in r.getMessage()]
    assert len(cuts) == 2, cuts  # one per node
    assert all(" cmd=publish " in line for line in cuts), cuts


@needs_compiled
def test_a_counter_held_elsewhere_keeps_its_value_and_one_past_a_digit_is_exact():
    """The twin adds to a counter's int in place when only its slot holds it
    (``_long_add_in_place``): an int read out of the stats before a PUBLISH
    must keep its value, and sums across the small ints' end (256) and a
    30-bit digit (2**30) must be exact, in both loops."""
    import asyncio

    request = _resp(b"PUBLISH", b"ch", b"x" * 5)

    async def run() -> tuple[list[list[tuple[int, ...]]], list[bool]]:
        sides = [fuzz_loop.Side(node) for node in fuzz_loop.nodes()]
        for side in sides:
            # ints made here, held by the slot alone once assigned
            side.node.stats.net_input_bytes = int("1073741800")  # 2**30 - 24
            side.node.stats.publish_received = int("254")
        await asyncio.sleep(0)
        seen: list[list[tuple[int, ...]]] = [[], []]
        same_int: list[bool] = []  # the twin's counter kept its object (added in place)
        for _ in range(3):
            # unheld: the twin may add in place
            ids = [id(s.node.stats.net_input_bytes) for s in sides]
            for side in sides:
                side.send(0, request)
            await asyncio.sleep(0)
            same_int.append(id(sides[1].node.stats.net_input_bytes) == ids[1])
            # held: the ints read here must not change
            held = [(s.node.stats.net_input_bytes, s.node.stats.publish_received) for s in sides]
            for side in sides:
                side.send(0, request)
            await asyncio.sleep(0)
            for side, got, (bytes_before, published_before) in zip(sides, seen, held, strict=True):
                stats = side.node.stats
                # copies: the list must not hold the counters' own ints
                now = (int(str(stats.net_input_bytes)), int(str(stats.publish_received)))
                got.append((bytes_before, published_before, *now))
            del held
        return seen, same_int

    (reference, twin), same_int = asyncio.run(run())
    n, start = len(request), 2**30 - 24
    expected = [
        (start + (2 * i + 1) * n, 255 + 2 * i, start + (2 * i + 2) * n, 256 + 2 * i)
        for i in range(3)
    ]
    assert reference == expected
    assert twin == reference
    # the first add crosses 2**30 (a new int); the later unheld ones are in place
    assert same_int == [False, True, True]


@needs_compiled
def test_a_connections_replaced_receive_is_called_by_both_clients():
    """``CompiledClient.data_received`` runs the compiled loop in C only when
    ``conn.receive`` is that loop bound to the connection; a ``receive``
    replaced on the instance is called, as the reference client calls it
    (review of this round: the twin decided from the class alone)."""
    import asyncio

    async def run() -> list[list[bytes]]:
        sides = [fuzz_loop.Side(node) for node in fuzz_loop.nodes()]
        seen: list[list[bytes]] = [[], []]
        for side, got in zip(sides, seen, strict=True):
            conn = side.clients[0].conn
            assert conn is not None
            original = conn.receive

            def spy(data=b"", now=0.0, got=got, original=original):
                got.append(data)
                return original(data, now)

            conn.receive = spy  # type: ignore[method-assign]
        await asyncio.sleep(0)
        for side in sides:
            side.send(0, _resp(b"PING"))
        await asyncio.sleep(0)
        assert [bytes(side.wires[0].out) for side in sides] == [b"+PONG\r\n"] * 2
        return seen

    reference, twin = asyncio.run(run())
    assert reference == [b"*1\r\n$4\r\nPING\r\n"]
    assert twin == reference


@needs_compiled
def test_a_lone_nodes_replaced_forward_publish_is_called_by_both_loops():
    """On a node without a bus (``NoPeers``) the twin skips the call of
    ``forward_publish``, whose answer is always 0; a method replaced on the
    link (as tests do with ``filters_changed``) is still called, in order."""
    import asyncio

    async def run() -> list[list[tuple[bytes, bytes, bool, int]]]:
        nodes = fuzz_loop.nodes()
        calls: list[list[tuple[bytes, bytes, bool, int]]] = [[], []]
        sides = []
        for node, seen in zip(nodes, calls, strict=True):
            assert type(node.link) is NoPeers

            def forward(channel, message, shard, seq, seen=seen):
                seen.append((channel, message, shard, seq))
                return 1

            node.link.forward_publish = forward  # type: ignore[method-assign]
            sides.append(fuzz_loop.Side(node))
        await asyncio.sleep(0)
        for side in sides:
            side.send(0, _resp(b"PUBLISH", b"a", b"1") + _resp(b"SPUBLISH", b"b", b"2"))
        await asyncio.sleep(0)
        return calls

    reference, twin = asyncio.run(run())
    assert reference == [(b"a", b"1", False, 1), (b"b", b"2", True, 2)]
    assert twin == reference


def test_an_extension_that_does_not_import_is_one_warning(monkeypatch, caplog):
    monkeypatch.delenv(dataplane.ENV, raising=False)
    monkeypatch.setitem(sys.modules, "router._dataplane", None)  # import fails
    monkeypatch.delattr(router, "_dataplane", raising=False)
    with caplog.at_level(logging.WARNING, logger="bloomcast.node"):
        assert dataplane.load() is None
    assert len(caplog.records) == 1
    assert "running the Python core" in caplog.records[0].getMessage()
    assert dataplane.parser_class(None) is RequestParser


def test_a_stale_build_without_every_twin_is_one_warning(monkeypatch, caplog):
    stale = types.ModuleType("router._dataplane")
    stale.RequestParser = RequestParser  # type: ignore[attr-defined]  # no `process`
    monkeypatch.delenv(dataplane.ENV, raising=False)
    monkeypatch.setitem(sys.modules, "router._dataplane", stale)
    monkeypatch.setattr(router, "_dataplane", stale, raising=False)
    with caplog.at_level(logging.WARNING, logger="bloomcast.node"):
        assert dataplane.load() is None
    assert len(caplog.records) == 1
    assert "old build (no process" in caplog.records[0].getMessage()


def _outcome(cls: type, data: bytes, step: int, **kw: object) -> list[object]:
    limits = (kw.pop("max_bulk", 1 << 20), kw.pop("max_multibulk", 1 << 20))
    # the reference is the pure-Python path (hiredis reads a huge multibulk
    # whole: only the reference path slices it)
    parser = cls(*limits, fast=False)
    parser.authenticated = kw.pop("authenticated", True)
    out: list[object] = []
    try:
        for i in range(0, len(data), step):
            parser.feed(data[i : i + step])
            while True:
                out.extend(parser.requests())
                if not parser.backlog:
                    break
                out.append("slice")
            out.append((parser.buffered, parser.partial_bytes, parser.query_buffer(False)))
    except ProtocolError as exc:
        out.append(str(exc))
    return out


CASES = [
    b"*3\r\n$7\r\nPUBLISH\r\n$4\r\nnews\r\n$5\r\nhello\r\n" * 3,
    b"PING\r\nECHO \"a\\x41\" 'b'\r\n\r\n*0\r\n*-1\r\nPING\n",
    b"*%d\r\n" % (2 * SLICE_BULKS + 5) + b"$1\r\na\r\n" * (2 * SLICE_BULKS + 5),
    b"*1\rX$4\rXPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nabXY",  # lone CRs, unread bytes
    b"*2\r\n$4\r\nECHO\r\n$1\x00\r\nx\r\n*1\r\n",  # a NUL hides the CR
    b"*1\r\n+PING\r\n",  # expected '$', got '+'
    b"*1\r\n\xff4\r\nPING\r\n",  # got a byte that is not UTF-8
    b"*1\r\n$-1\r\n",
    b"*1\r\n$01\r\nx\r\n",  # a leading zero: invalid bulk length
    b"*1\r\n$200\r\n" + b"x" * 200 + b"\r\n",  # over max_bulk below
    b"*9223372036854775808\r\n",  # past string2ll
    b"*2000\r\n",  # over max_multibulk below
    b"*11\r\n",  # unauthenticated multibulk length
    b"*1\r\n$16385\r\n",  # unauthenticated bulk length
    b'ECHO "unbalanced\r\n',
    b"*" + b"1" * 70000,  # too big mbulk count string
    b"*1\r\n$" + b"1" * 70000,  # too big bulk count string
    b"x" * 70000,  # too big inline request
]


@needs_compiled
@pytest.mark.parametrize("data", CASES)
@pytest.mark.parametrize("step", [1, 7, 1 << 20])
def test_the_compiled_parser_agrees_with_the_reference(data, step):
    for kw in ({}, {"max_bulk": 100, "max_multibulk": 1024}, {"authenticated": False}):
        want = _outcome(RequestParser, data, step, **dict(kw))
        assert _outcome(_compiled.RequestParser, data, step, **dict(kw)) == want, kw


@pytest.mark.parametrize("cls", PARSERS)
def test_release_hands_over_the_partial_request(cls):
    parser = cls(1 << 20, 1 << 20)
    parser.feed(b"*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n$5\r\nhel")
    assert parser.next_request() is None
    assert parser.partial_bytes == 9
    assert parser.release() == [b"PUBLISH", b"ch"]
    assert parser.partial_bytes == 0


@pytest.mark.parametrize("cls", PARSERS)
def test_a_protocol_error_is_the_reference_class_with_redis_text(cls):
    parser = cls(1 << 20, 1 << 20)
    parser.feed(b"*1\r\n:1\r\n")
    with pytest.raises(ProtocolError, match=r"^ERR Protocol error: expected '\$', got ':'$"):
        parser.next_request()
