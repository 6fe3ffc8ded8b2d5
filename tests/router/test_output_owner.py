"""One owner for a connection's output, one PUBLISH function (issue 48).

- No file of router/ or cluster_bus/ but router/connection.py assigns,
  changes or reads a connection's output fields (its queue, its byte
  counts, what it holds behind an awaited reply, its soft-limit time): read
  from the sources (the AST of every ``.py``, the text of every ``.pxd`` and
  ``.pyx``), as Redis's ``networking.c`` alone touches a client's reply
  buffer. ``self.<field>`` inside another class is that class's own field.
- PUBLISH and SPUBLISH run one function, :meth:`router.pubsub.PubSub.publish_command`,
  whether the request loop runs them in line (``PUBLISH``) or through
  :func:`router.dispatch.execute` (``PuBlIsH``, a spelling the in-line test
  does not take): the pure-Python data plane's calls are traced, and on both planes the
  two spellings give the same bytes to every client and the same counters,
  whatever the connection's state (so the in-line path's checks, ``_open``,
  agree with ``execute``'s).
"""

from __future__ import annotations

import ast
import asyncio
import re
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from bench.hot_path import CountingTransport
from router import dataplane
from router.config import NodeConfig
from router.dataplane import Plane
from router.node import Node

ROOT = Path(__file__).resolve().parents[2]
OWNER = ROOT / "router" / "connection.py"
#: a Connection's output fields (router/connection.py, router/_connection.pxd)
FIELDS = frozenset(
    {"_out", "_out_bytes", "_batching", "_soft_limit_since", "_held", "_held_bytes", "_pending"}
)
#: list methods that change the list they are called on
MUTATORS = frozenset({"append", "extend", "clear", "insert", "pop", "remove", "sort", "reverse"})


def touches(source: str, filename: str = "<source>") -> list[tuple[int, str, str]]:
    """Every use of a connection's output field in ``source``: (line, field,
    how: ``assign``, ``augassign``, ``delete``, ``mutate`` (a list method that
    changes it, an item assigned) or ``read``). ``self.<field>`` in a class
    other than ``Connection`` is that class's own field and not listed."""
    tree = ast.parse(source, filename)
    own: set[int] = set()  # ids of Attribute nodes that are another class's self.<field>
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and cls.name != "Connection":
            for node in ast.walk(cls):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    own.add(id(node))
    how: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute):
            how[id(node.target)] = "augassign"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and isinstance(node.func.value, ast.Attribute)
        ):
            how[id(node.func.value)] = "mutate"
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, (ast.Store, ast.Del))
            and isinstance(node.value, ast.Attribute)
        ):
            how[id(node.value)] = "mutate"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in FIELDS and id(node) not in own:
            if id(node) in how:
                kind = how[id(node)]
            elif isinstance(node.ctx, ast.Store):
                kind = "assign"
            elif isinstance(node.ctx, ast.Del):
                kind = "delete"
            else:
                kind = "read"
            found.append((node.lineno, node.attr, kind))
    return sorted(found)


_PXD_USE = re.compile(r"(?<!\bself)\.(" + "|".join(sorted(FIELDS)) + r")\b")


def _sources() -> list[Path]:
    return sorted(p for d in ("router", "cluster_bus") for p in (ROOT / d).rglob("*.py*"))


def _uses_outside_the_owner() -> list[str]:
    uses = []
    for path in _sources():
        name = path.relative_to(ROOT)
        if path == OWNER or path.name == "_connection.pxd":
            continue  # the owner and its C half (the inline methods)
        text = path.read_text()
        if path.suffix == ".py":
            uses += [f"{name}:{line}: {kind} {field}" for line, field, kind in touches(text)]
        elif path.suffix in (".pxd", ".pyx"):
            for n, line in enumerate(text.splitlines(), 1):
                uses += [f"{name}:{n}: {m.group(1)}" for m in _PXD_USE.finditer(line)]
    return uses


def test_no_file_but_the_connection_assigns_its_output_fields():
    written = [u for u in _uses_outside_the_owner() if " read " not in u]
    assert written == []


def test_no_file_but_the_connection_reads_its_output_fields():
    """A queue read elsewhere is one appended to elsewhere (``out = conn._out``)."""
    assert _uses_outside_the_owner() == []


def test_the_scan_finds_each_way_back_in():
    """What the two tests above must catch, and what they leave alone."""
    source = """
def loop(conn, client, queued):
    conn._out_bytes += queued
    client._soft_limit_since = None
    client._out.append(b"x")
    conn._held[0] = b"y"
    del conn._batching
    out = conn._out

class Link:
    def flush(self):
        self._pending = None
        self._out.clear()

class Connection:
    def flush(self):
        self._out_bytes = 0
"""
    assert touches(source) == [
        (3, "_out_bytes", "augassign"),
        (4, "_soft_limit_since", "assign"),
        (5, "_out", "mutate"),
        (6, "_held", "mutate"),
        (7, "_batching", "delete"),
        (8, "_out", "read"),
        (17, "_out_bytes", "assign"),  # (only connection.py may)
    ]
    assert _PXD_USE.findall("    conn._out_bytes += n\n    self._out.append(f)") == ["_out_bytes"]


def test_the_owner_is_scanned_and_does_touch_them():
    """The scan reads connection.py as it reads the others (so an empty list
    elsewhere is not an empty scan)."""
    kinds = {kind for _, _, kind in touches(OWNER.read_text())}
    assert {"assign", "augassign", "mutate", "read"} <= kinds
    assert OWNER in _sources() and len(_sources()) > 20


# ------------------------------------------------------------ one PUBLISH function


class Recording(CountingTransport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        super().write(data)
        self.writes.append(data)

    def is_reading(self) -> bool:
        return True


#: (name, setup by the publisher, setup by the subscriber): each scenario is
#: then a pipeline of PUBLISH / SPUBLISH (spelled ``{P}`` / ``{S}``) and a PING
SCENARIOS = {
    "open": (b"", b"SUBSCRIBE ch\r\nSSUBSCRIBE sh\r\n"),
    "no subscriber": (b"", b""),
    "multi": (b"MULTI\r\n", b"SUBSCRIBE ch\r\n"),
    "client reply skip": (b"CLIENT REPLY SKIP\r\n", b"PSUBSCRIBE c*\r\n"),
    "client reply off": (b"CLIENT REPLY OFF\r\n", b"SUBSCRIBE ch\r\n"),
    "resp2 subscribed": (b"SUBSCRIBE other\r\n", b"SUBSCRIBE ch\r\n"),
    "resp3 subscribed": (b"HELLO 3\r\nSUBSCRIBE other\r\n", b"HELLO 3\r\nSUBSCRIBE ch\r\n"),
    "restricted user": (
        b"ACL SETUSER u on >pw +@all -spublish resetchannels &ch\r\nAUTH u pw\r\n",
        b"SUBSCRIBE ch\r\n",
    ),
    "not authenticated": (b"AUTH default wrong\r\n", b"AUTH default pw\r\nSUBSCRIBE ch\r\n"),
}
PIPELINE = (
    b"{P} ch m1\r\n{P} ch m2\r\n{S} sh m3\r\n{P} nobody m4\r\n{P} ch\r\nPING\r\n"
    b"{P} ch m5 extra\r\nEXEC\r\n"
)


def _run(plane: Plane, scenario: str, publish: bytes, spublish: bytes) -> tuple[Any, ...]:
    """The scenario with PUBLISH spelled ``publish``: every client's output,
    then the counters that PUBLISH and SPUBLISH move."""
    setup, subscribe = SCENARIOS[scenario]
    requirepass = "pw" if scenario == "not authenticated" else ""

    async def main() -> tuple[Any, ...]:
        node = Node(NodeConfig(port=0, requirepass=requirepass), plane=plane)
        node.context.slice_ns = 1 << 62  # one read, no slice (a loaded machine)
        sub, pub = plane.Client(node), plane.Client(node)
        sub_out, pub_out = Recording(), Recording()
        sub.connection_made(sub_out)  # type: ignore[arg-type]
        pub.connection_made(pub_out)  # type: ignore[arg-type]
        for client, data in ((sub, subscribe), (pub, setup)):
            if data:
                client.data_received(data)
                for _ in range(3):
                    await asyncio.sleep(0)
        pub.data_received(PIPELINE.replace(b"{P}", publish).replace(b"{S}", spublish))
        for _ in range(3):
            await asyncio.sleep(0)
        stats = node.stats
        counted = {
            name: (stat.calls, stat.failed_calls, stat.rejected_calls)
            for name, stat in stats.commands.items()
            if name in ("publish", "spublish", "ping")
        }
        return (
            b"".join(pub_out.writes),
            b"".join(sub_out.writes),
            counted,
            stats.commands_processed,
            stats.publish_received,
            stats.messages_delivered,
        )

    return asyncio.run(main())


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_publish_in_line_and_through_execute_agree(plane, scenario):
    in_line = _run(plane, scenario, b"PUBLISH", b"SPUBLISH")
    executed = _run(plane, scenario, b"PuBlIsH", b"SpUbLiSh")
    assert in_line == executed
    if scenario == "open":  # (the scenarios do publish: the comparison is not of nothing)
        publisher, subscriber, counted, _, received, delivered = in_line
        assert publisher.startswith(b":1\r\n:1\r\n:1\r\n:0\r\n-ERR wrong number")
        assert subscriber.count(b"$7\r\nmessage\r\n") == 2
        assert counted["publish"] == (3, 0, 2) and counted["spublish"] == (1, 0, 0)
        assert (received, delivered) == (4, 3)


class _Calls:
    """The pure-Python data plane's calls of router/pubsub.py and router/dispatch.py functions."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            path = frame.f_code.co_filename
            if path.endswith(("router/pubsub.py", "router/dispatch.py")):
                self.names.append(frame.f_code.co_name)


@pytest.mark.parametrize(("publish", "through_execute"), [(b"PUBLISH", False), (b"PuBlIsH", True)])
def test_both_paths_run_the_one_publish_function(publish, through_execute):
    plane = dataplane.python()

    async def main() -> list[str]:
        node = Node(NodeConfig(port=0), plane=plane)
        client = plane.Client(node)
        client.connection_made(Recording())  # type: ignore[arg-type]
        calls = _Calls()
        sys.setprofile(calls)
        try:
            client.data_received(publish + b" ch m\r\n" + publish + b" ch m\r\n")
        finally:
            sys.setprofile(None)
        await asyncio.sleep(0)
        return calls.names

    names = asyncio.run(main())
    assert names.count("publish_command") == 2
    assert names.count("execute") == (2 if through_execute else 0)
