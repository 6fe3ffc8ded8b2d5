"""One connection's output, in-process: replies and the pushes it gets from
its own PUBLISHes leave in command order (Redis has one output buffer per
client), and a pipelined batch is still one ``transport.write`` per loop turn
(docs/architecture.md §3: Redis's ``handleClientsWithPendingWrites``)."""

from __future__ import annotations

import asyncio

import pytest

from bench.hot_path import CountingTransport
from router import resp
from router.config import NodeConfig
from router.dataplane import Plane
from router.node import Node


class RecordingTransport(CountingTransport):
    """The benchmark's stand-in transport, also keeping every write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        super().write(data)
        self.writes.append(data)


def _run(plane: Plane, batches: list[bytes]) -> list[bytes]:
    """Feed each batch to one client, one loop turn apart; its writes."""

    async def main() -> list[bytes]:
        client = plane.Client(Node(NodeConfig(port=0), plane=plane))
        transport = RecordingTransport()
        client.connection_made(transport)  # type: ignore[arg-type]
        for batch in batches:
            client.data_received(batch)
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        return transport.writes

    return asyncio.run(main())


SUBSCRIBED = b">3\r\n$9\r\nsubscribe\r\n$4\r\nself\r\n:1\r\n"
MESSAGE = b">3\r\n$7\r\nmessage\r\n$4\r\nself\r\n$2\r\nm%d\r\n"  # m0 .. m9


def test_self_publish_pushes_follow_the_replies_before_them(plane):
    writes = _run(
        plane, [b"HELLO 3\r\n", b"SUBSCRIBE self\r\nPUBLISH self m1\r\nPING\r\nPUBLISH self m2\r\n"]
    )
    assert len(writes) == 2  # one write per loop turn
    assert writes[1] == (
        SUBSCRIBED + MESSAGE % 1 + b":1\r\n" + b"+PONG\r\n" + MESSAGE % 2 + b":1\r\n"
    )


def test_a_pipelined_batch_is_one_write(plane):
    publish = b"*3\r\n$7\r\nPUBLISH\r\n$4\r\nself\r\n$2\r\nm%d\r\n"
    batch = b"HELLO 3\r\nSUBSCRIBE self\r\n" + b"".join(publish % (i % 10) for i in range(16))
    writes = _run(plane, [batch, b"RESET\r\nPING\r\n"])
    assert len(writes) == 2
    first = writes[0]
    assert first.index(SUBSCRIBED) < first.index(MESSAGE % 0)
    assert first.endswith(b"".join(MESSAGE % (i % 10) + b":1\r\n" for i in range(16)))
    assert writes[1] == b"+RESET\r\n+PONG\r\n"


@pytest.mark.parametrize("set_by", ["start", "CONFIG SET"])
def test_a_turn_past_the_pubsub_hard_limit_writes_the_queues_at_once(set_by, plane):
    """Messages queued in one loop turn are written as soon as the turn's
    output passes ``client-output-buffer-limit pubsub``'s hard limit, so no
    queue grows past it before the end-of-turn flush (write_to_all)."""
    hard = 4096
    config = NodeConfig(port=0, pubsub_hard_limit=hard if set_by == "start" else 0)
    message = b"x" * 100
    frame = b"*3\r\n$7\r\nmessage\r\n$4\r\nfeed\r\n$100\r\n" + message + b"\r\n"

    async def main() -> tuple[list[bytes], list[bytes]]:
        node = Node(config, plane=plane)
        # one read, no slice: on a loaded machine the 5 ms budget ended the
        # read before 30 PUBLISH had run, and no queue was written in the turn
        node.context.slice_ns = 1 << 62
        subscriber, publisher = plane.Client(node), plane.Client(node)
        sub_out, pub_out = RecordingTransport(), RecordingTransport()
        subscriber.connection_made(sub_out)  # type: ignore[arg-type]
        publisher.connection_made(pub_out)  # type: ignore[arg-type]
        subscriber.data_received(b"SUBSCRIBE feed\r\n")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        if set_by == "CONFIG SET":
            limit = b"pubsub %d 0 0" % hard
            publisher.data_received(
                resp.bulk_array([b"CONFIG", b"SET", b"client-output-buffer-limit", limit])
            )
            await asyncio.sleep(0)
            assert pub_out.writes == [b"+OK\r\n"]
        del sub_out.writes[:]
        publisher.data_received((b"PUBLISH feed " + message + b"\r\n") * 100)  # one read
        in_turn = list(sub_out.writes)  # before the loop turn ends
        await asyncio.sleep(0)
        return in_turn, sub_out.writes

    in_turn, writes = asyncio.run(main())
    assert b"".join(writes) == frame * 100  # all of them, in order
    assert len(in_turn) >= (100 * len(frame)) // (hard + len(frame))
    assert all(len(w) <= hard + len(frame) for w in writes)


def test_a_lone_request_is_written_when_it_has_run(plane):
    """An unpipelined request (one command, the first work of this loop turn)
    is written at once, without waiting for the end-of-turn flush; what it
    delivers to its own connection still precedes its reply, in one write."""

    async def main() -> list[list[bytes]]:
        client = plane.Client(Node(NodeConfig(port=0), plane=plane))
        transport = RecordingTransport()
        client.connection_made(transport)  # type: ignore[arg-type]
        seen = []
        for request in (b"HELLO 3\r\n", b"SUBSCRIBE self\r\n", b"PUBLISH self m1\r\n"):
            client.data_received(request)
            seen.append(list(transport.writes))  # before the loop turn ends
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        return seen

    hello, subscribe, publish = asyncio.run(main())
    assert len(hello) == 1 and hello[0].startswith(b"%7\r\n")  # HELLO 3's map
    assert subscribe[1:] == [SUBSCRIBED]
    assert publish[2:] == [MESSAGE % 1 + b":1\r\n"]
