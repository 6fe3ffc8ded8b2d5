"""The files a PUBLISH passes through in router/ (issue 42).

A PUBLISH from a client, delivered to a local subscriber and handed to the
cluster for a remote one, then received by the remote node and delivered to
its subscriber: the pure-Python data plane's calls are traced with ``sys.setprofile``
from the client's read to the end-of-turn flush on the origin, and from the
bus's ``deliver_forwarded_run`` to the flush on the receiver (one node plays
both: the forward goes to a recording seam). Counted:

- the router/ files whose functions run, both sides together: at most 9
  (8, and the hot-channels summary's update since issue 51);
- the calls back into a file already on the call stack (a return to a file
  the path had left, as ``PubSub.publish`` being ``Node.publish`` once was):
  at most 2, both sides together.

``uv run pytest tests/router/test_publish_path.py -s`` prints the path.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from cluster_bus.api import NoPeers
from cluster_bus.frames import Publish
from router import dataplane
from router.config import NodeConfig
from router.node import Node

ROOT = str(Path(__file__).resolve().parents[2]) + "/"
PUBLISH = b"*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n$2\r\nhi\r\n"


class Transport:
    def write(self, data: bytes) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return None

    def get_write_buffer_size(self) -> int:
        return 0

    def is_reading(self) -> bool:
        return True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Seam(NoPeers):
    """The cluster: records what it is asked to forward."""

    def __init__(self) -> None:
        super().__init__("0" * 40, "127.0.0.1", 0)
        self.forwarded: list[bytes] = []

    def forward_publish(self, channel: bytes, message: bytes, shard: bool, origin_seq: int) -> int:
        self.forwarded.append(channel)
        return 1


class Trace:
    """The router/ files a traced run enters, in order, and its calls back
    into a file already on the stack (``(caller's file, callee's file,
    function)``)."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.back: list[tuple[str | None, str, str]] = []
        self._stack: list[str | None] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            path = frame.f_code.co_filename
            name = path[len(ROOT) :] if path.startswith(ROOT + "router/") else None
            below = [f for f in self._stack if f is not None]
            caller = below[-1] if below else None
            if name is not None and name != caller:
                if name in below:
                    self.back.append((caller, name, frame.f_code.co_name))
                if name not in self.files:
                    self.files.append(name)
            self._stack.append(name)
        elif event == "return" and self._stack:
            self._stack.pop()


async def _paths() -> tuple[Trace, Trace]:
    node = Node(NodeConfig(port=0), plane=dataplane.python())
    seam = Seam()
    node.set_link(seam)
    subscriber, publisher = node.client_class(node), node.client_class(node)
    for client in (subscriber, publisher):
        client.connection_made(Transport())  # type: ignore[arg-type]
    subscriber.data_received(b"SUBSCRIBE ch\r\n")
    publisher.data_received(PUBLISH)  # (the command's stat made: a PUBLISH like any later)
    await asyncio.sleep(0)
    paths = Trace(), Trace()
    for path, run in zip(
        paths,
        (
            lambda: publisher.data_received(PUBLISH),
            lambda: node.pubsub.deliver_forwarded_run(
                "ab" * 20, [Publish(1, 1, False, b"ch", b"hi")], 1
            ),
        ),
        strict=True,
    ):
        sys.setprofile(path)
        try:
            run()
            await asyncio.sleep(0)  # the end-of-turn flush
            await asyncio.sleep(0)
        finally:
            sys.setprofile(None)
    assert seam.forwarded == [b"ch", b"ch"]
    return paths


def test_a_publish_passes_through_at_most_9_files_and_returns_at_most_twice():
    origin, receiver = asyncio.run(_paths())
    print("origin", origin.files, origin.back, "\nreceiver", receiver.files, receiver.back)
    files = set(origin.files) | set(receiver.files)
    assert len(files) <= 9, sorted(files)
    assert len(origin.back) + len(receiver.back) <= 2, (origin.back, receiver.back)
    # the lifecycle and the command table are not on the path: the loop runs
    # PUBLISH, pub/sub publishes and delivers, the connection holds the output
    assert "router/node.py" not in files
    assert not [f for f in files if f.startswith("router/commands/")]
    assert origin.files[:3] == ["router/client.py", "router/dispatch.py", "router/parser.py"]
    assert receiver.files[0] == "router/pubsub.py"


def test_the_tracer_counts_a_call_back_into_a_file_on_the_stack():
    trace = Trace()
    trace._stack = ["router/a.py", None, "router/b.py"]  # a.py called b.py (through the loop)
    code = sys._getframe().f_code.replace(co_filename=ROOT + "router/a.py")
    trace(type("Frame", (), {"f_code": code})(), "call", None)  # type: ignore[arg-type]
    assert trace.back == [("router/b.py", "router/a.py", code.co_name)]
    assert trace.files == ["router/a.py"]
