"""The data plane's one switch (router/dataplane.py), the compiled request
parser (router/_parser.pyx) and the compiled plane as a whole (issues 29, 42).

The long differential runs are ``python -m tests.fuzz.fuzz_resp`` and
``python -m tests.fuzz.fuzz_loop``; here: which plane a node builds from,
INFO's ``bloomcast_data_plane`` of a real process, the build's module list
(setup.py, pyproject's cache keys, the switch), the parser twin against the
reference on the cases that matter most, and a short run of the loop
fuzzer."""

from __future__ import annotations

import importlib
import logging
import os
import sys

import pytest

import router
from netutil.dataplane import MODULES, compiled_modules
from router import dataplane
from router.config import NodeConfig
from router.info import info_sections
from router.node import Node
from router.parser import SLICE_BULKS, ProtocolError, RequestParser
from tests.fuzz import fuzz_loop
from tests.procs import bloomcast_node, connect, read_quiet

try:
    _compiled = importlib.import_module("router._parser")
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


def _python_modules(reply: bytes) -> list[str]:
    """INFO's ``bloomcast_data_plane_python_modules`` (comma-separated)."""
    for line in reply.decode().split("\r\n"):
        if line.startswith("bloomcast_data_plane_python_modules:"):
            value = line.partition(":")[2]
            return value.split(",") if value else []
    raise AssertionError(f"no bloomcast_data_plane_python_modules in {reply!r}")


def _exercised_node_info(env: dict[str, str]) -> bytes:
    """INFO bloomcast of a real node process with its bus, after it served
    each kind of request once (subscriptions, PUBLISH in line and through
    the table, MULTI, CLIENT, CLUSTER, INFO everything, a protocol error)."""
    with bloomcast_node(bus=True, env=env) as port:
        sub, pub = connect(port), connect(port)
        sub.sendall(b"SUBSCRIBE a\r\nPSUBSCRIBE b*\r\nSSUBSCRIBE {c}x\r\n")
        read_quiet(sub)
        pub.sendall(
            b"PUBLISH a 1\r\npublish b2 2\r\nSPUBLISH {c}x 3\r\nMULTI\r\nPUBLISH a 4\r\n"
            b"EXEC\r\nCLIENT LIST\r\nCLUSTER NODES\r\nCLUSTER INFO\r\nINFO everything\r\n"
            b"LATENCY LATEST\r\nCOMMAND COUNT\r\nCONFIG GET *\r\n"
        )
        read_quiet(pub)
        sub.sendall(b"UNSUBSCRIBE\r\nPUNSUBSCRIBE\r\nSUNSUBSCRIBE\r\nRESET\r\n")
        read_quiet(sub)
        pub.sendall(b"*1\r\n$x\r\n")  # a protocol error closes it
        read_quiet(pub)
        s = connect(port)
        s.sendall(b"INFO bloomcast\r\n")
        reply, _ = read_quiet(s)
        for c in (s, sub, pub):
            c.close()
    return reply


@needs_compiled
def test_the_extension_is_built():
    """This machine kind has gcc and the Python headers: `uv sync` builds the
    compiled data plane, so its absence is a broken build, not a skip."""
    assert _compiled is not None, "router._parser was not built (see `uv sync`'s output)"


def test_a_node_started_with_no_extensions_reports_python():
    env = {**os.environ, dataplane.ENV: "1"}
    reply = _info_plane(env)
    assert b"# Bloomcast\r\nbloomcast_data_plane:python\r\n" in reply


@needs_compiled
def test_a_node_started_without_the_switch_reports_compiled():
    env = {k: v for k, v in os.environ.items() if k != dataplane.ENV}
    reply = _info_plane(env)
    assert b"# Bloomcast\r\nbloomcast_data_plane:compiled\r\n" in reply


@needs_compiled
def test_a_compiled_node_loads_no_python_twin_nor_cython():
    """A real compiled node process with its bus, after serving each kind of
    request, has imported none of the pure-Python data plane's modules (router.stats,
    cluster_bus.link, ...) nor cython (its Shadow module): INFO reads its
    sys.modules (issue 50)."""
    env = {k: v for k, v in os.environ.items() if k != dataplane.ENV}
    reply = _exercised_node_info(env)
    assert b"bloomcast_data_plane:compiled\r\n" in reply
    assert _python_modules(reply) == []


def test_a_python_node_reports_the_python_modules_it_runs():
    """The same field on the pure-Python data plane lists every module of it and cython
    (so the compiled node's empty list is a reading, not a blank)."""
    reply = _exercised_node_info({**os.environ, dataplane.ENV: "1"})
    assert b"bloomcast_data_plane:python\r\n" in reply
    loaded = _python_modules(reply)
    assert {"router.stats", "router.dispatch", "cluster_bus.link", "cython"} <= set(loaded)


def test_the_node_builds_its_parts_from_the_switch(monkeypatch):
    monkeypatch.setenv(dataplane.ENV, "1")
    node = Node(NodeConfig(port=0))
    assert node.plane is dataplane.python()
    python_modules = {
        type(node.pubsub): "router.pubsub",
        type(node.context): "router.context",
        type(node.stats): "router.stats",
        node.client_class: "router.client",
    }
    assert {cls.__module__: name for cls, name in python_modules.items()} == {
        name: name for name in python_modules.values()
    }
    assert info_sections(node)["bloomcast"]["bloomcast_data_plane"] == "python"
    monkeypatch.delenv(dataplane.ENV)
    node = Node(NodeConfig(port=0))
    want = "python" if _compiled is None else "compiled"
    assert info_sections(node)["bloomcast"]["bloomcast_data_plane"] == want
    assert node.plane.bus.name == want
    if _compiled is not None:
        assert type(node.pubsub).__module__ == "router._pubsub"
        assert type(node.context).__module__ == "router._context"
        assert node.client_class.__module__ == "router._client"
        assert node.plane.RequestParser is _compiled.RequestParser


def test_a_plane_is_one_set_of_modules():
    """No compiled class on the pure-Python data plane, no Python one on the compiled
    plane (a compiled module reaches the others by cimport)."""
    for plane in (dataplane.python(), *([] if _compiled is None else [dataplane.compiled()])):
        compiled = plane.name == "compiled"
        for name in ("RequestParser", "Connection", "Client", "PubSub", "CommandContext"):
            module = getattr(plane, name).__module__
            assert module.rpartition(".")[2].startswith("_") is compiled, (plane.name, name)


def test_the_module_list_is_one_and_uv_rebuilds_on_each_source():
    """setup.py builds netutil.dataplane.MODULES and lists none of its own;
    the compiled planes load every module of it, and pyproject's cache keys
    name each source (a source missing from the keys would leave a stale
    build after an edit)."""
    import ast
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    setup = ast.parse((root / "setup.py").read_text())
    imported = [
        alias.name
        for node in ast.walk(setup)
        if isinstance(node, ast.ImportFrom) and node.module == "netutil.dataplane"
        for alias in node.names
    ]
    assert "MODULES" in imported
    sources = {source for _, source in MODULES}
    literals = {n.value for n in ast.walk(setup) if isinstance(n, ast.Constant)}
    assert not literals & sources, "setup.py names a module source of its own"
    assert {m.rpartition(".")[2] for m in compiled_modules("router")} >= {
        "_parser",
        "_connection",
        "_dispatch",
    }
    packages = ("router", "cluster_bus", "bloom")
    assert sum(len(compiled_modules(package)) for package in packages) == len(MODULES)
    keys = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"]["cache-keys"]
    files = {key["file"] for key in keys}
    assert "netutil/dataplane.py" in files
    for module, source in MODULES:
        assert (root / source).is_file(), source
        if source.endswith(".py"):
            assert source in files, source
            assert (root / (module.replace(".", "/") + ".pxd")).is_file(), module


@needs_compiled
def test_the_compiled_planes_are_built_from_every_module_of_the_list(monkeypatch):
    """A module of the list that does not import (a partial or older build)
    gives the pure-Python data plane to the whole node, the bus's half included: the
    router's and the bus's planes both come from the one choice."""
    monkeypatch.delenv(dataplane.ENV, raising=False)
    plane = dataplane.load()
    assert (plane.name, plane.bus.name) == ("compiled", "compiled")
    assert plane.bus.Link.__module__ == "cluster_bus._link"
    monkeypatch.setitem(sys.modules, "cluster_bus._session", None)  # the bus's, cimported
    plane = dataplane.load()
    assert (plane.name, plane.bus.name) == ("python", "python")
    assert plane.bus.Link.__module__ == "cluster_bus.link"
    assert type(Node(NodeConfig(port=0)).pubsub).__module__ == "router.pubsub"


@needs_compiled
def test_every_compiled_module_was_built_against_the_others_layout():
    """Each compiled module checks, at import, the size of the classes it
    cimports from another; one built against an older ``.pxd`` says "size
    changed, may indicate binary incompatibility" (a RuntimeWarning) and then
    reads fields at the wrong offsets. setup.py regenerates every module when
    any source or ``.pxd`` is newer than the generated C, since Cython does
    not see those dependencies of a pure-Python mode module."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = "; ".join(f"import {m}" for m, _ in MODULES)
    run = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert run.returncode == 0, run.stderr[-2000:]


@needs_compiled
def test_the_compiled_request_loop_agrees_with_the_reference():
    """A short run of tests/fuzz/fuzz_loop.py: the same scripts through both
    loops, every output byte and the final state compared (the long run:
    ``python -m tests.fuzz.fuzz_loop --count 100000``)."""
    assert fuzz_loop.run(150, seed=7) == 150


def test_a_blocked_subscribers_message_waits_behind_its_reply_in_both_loops():
    """A subscriber whose second SUBSCRIBE waits for the pub/sub budget
    (blocked, a reply already queued this turn) is published to in the same
    turn: the message is held behind the awaited reply in both loops (the
    fan-out's fast path appends to a queue only when its client is not
    blocked)."""
    import asyncio

    subscribe = b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n"
    subscribe += b"*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\nb\r\n$1\r\nc\r\n"
    publish = b"*3\r\n$7\r\nPUBLISH\r\n$1\r\na\r\n$2\r\nhi\r\n"

    async def run() -> list[bytes]:
        sides = [fuzz_loop.Side(node) for node in fuzz_loop.nodes()]
        for side in sides:
            side.node.subscriptions.budget.ops = side.node.subscriptions.budget.left = 1
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


def test_an_extension_that_does_not_import_is_one_warning(monkeypatch, caplog):
    monkeypatch.delenv(dataplane.ENV, raising=False)
    monkeypatch.setitem(sys.modules, "router._connection", None)  # import fails
    monkeypatch.delattr(router, "_connection", raising=False)
    with caplog.at_level(logging.WARNING, logger="bloomcast.node"):
        assert dataplane.load() is dataplane.python()
        assert Node(NodeConfig(port=0)).context.data_plane == "python"
    assert len(caplog.records) == 2  # one line per node
    assert "the whole node runs the pure-Python data plane" in caplog.records[0].getMessage()


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
