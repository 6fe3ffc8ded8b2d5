"""The connection state machine, sans-IO (router/connection.py, router/states.py),
driven by the request loop (router/dispatch.py): bytes in, its state and the
wire's calls out; the output limits it holds a client to; on both data planes
(the ``plane`` fixture). ``timeout``, ``tcp-keepalive`` and ``tcp-backlog`` on
a node."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest

from router import pause
from router.config import NodeConfig
from router.connection import PREAUTH_OUTPUT_LIMIT
from router.dataplane import Plane
from router.node import Node
from router.settings import Settings
from router.states import (
    BLOCK,
    DONE,
    TRANSITIONS,
    ReplyMode,
    State,
)


class Wire:
    """A transport that keeps what the connection did to it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.pending = 0  # bytes the "socket" did not take
        self.stuck = False  # the "socket" takes nothing more: each write stays pending
        self.calls: list[str] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        if self.stuck:
            self.pending += len(data)

    def close(self) -> None:
        self.calls.append("close")

    def abort(self) -> None:
        self.calls.append("abort")

    def write_eof(self) -> None:
        self.calls.append("eof")

    def get_write_buffer_size(self) -> int:
        return self.pending

    def is_reading(self) -> bool:
        return True


def _conn(plane: Plane, config: NodeConfig | None = None) -> tuple[Node, Any, Wire]:
    node = Node(config or NodeConfig(port=0), plane=plane)
    wire = Wire()
    conn = plane.Connection(node.context, wire, node.next_client_id(), node.pubsub.schedule_flush)
    assert conn.admit()
    return node, conn, wire


def _feed(plane: Plane, conn: Any, data: bytes) -> Any:
    action = plane.process(conn, data, time.monotonic())
    conn.flush()
    return action


def test_states_follow_subscriptions_multi_and_protocol(plane):
    async def main() -> list[State]:
        _, conn, _ = _conn(plane)
        seen = [conn.state]
        for request in (
            b"SUBSCRIBE a\r\n",  # RESP2 + a subscription: the restricted context
            b"UNSUBSCRIBE\r\n",
            b"MULTI\r\n",
            b"PING\r\n",
            b"EXEC\r\n",
            b"HELLO 3\r\n",
            b"SUBSCRIBE a\r\n",  # RESP3: no restricted context
            b"HELLO 2\r\n",
            b"RESET\r\n",
            b"QUIT\r\n",
        ):
            _feed(plane, conn, request)
            seen.append(conn.state)
        return seen

    assert asyncio.run(main()) == [
        State.NORMAL,
        State.SUBSCRIBED,
        State.NORMAL,
        State.IN_MULTI,
        State.IN_MULTI,
        State.NORMAL,
        State.NORMAL,
        State.NORMAL,
        State.SUBSCRIBED,
        State.NORMAL,
        State.CLOSING,
    ]


def test_every_transition_is_in_the_table_and_closing_is_final(plane):
    async def main() -> None:
        _, conn, wire = _conn(plane)
        with pytest.raises(RuntimeError):
            conn._to(State.EXECUTING)  # not from NORMAL
        conn.close_after_reply()
        conn._to(State.NORMAL)  # ignored: closing is final
        assert conn.state is State.CLOSING
        conn.kill()
        assert conn.state is State.CLOSED and conn.closed and wire.calls == ["abort"]

    asyncio.run(main())
    assert TRANSITIONS[State.CLOSED] == frozenset()
    assert set(TRANSITIONS) == set(State)


def test_quit_writes_the_reply_then_closes(plane):
    async def main() -> Wire:
        _, conn, wire = _conn(plane)
        plane.process(conn, b"PING\r\nQUIT\r\nPING\r\n", time.monotonic())
        return wire

    wire = asyncio.run(main())
    assert b"".join(wire.writes) == b"+PONG\r\n+OK\r\n" and wire.calls == ["close"]


def test_client_reply_is_a_state_of_its_own(plane):
    async def main() -> tuple[bytes, list[ReplyMode]]:
        _, conn, wire = _conn(plane)
        modes = []
        for request in (
            b"CLIENT REPLY SKIP\r\n",
            b"PING one\r\n",  # skipped
            b"PING two\r\n",
            b"CLIENT REPLY OFF\r\n",
            b"CLIENT REPLY SKIP\r\n",  # stays OFF
            b"PING three\r\n",
            b"CLIENT REPLY ON\r\n",  # answers +OK
        ):
            _feed(plane, conn, request)
            modes.append(conn.reply_mode)
        return b"".join(wire.writes), modes

    out, modes = asyncio.run(main())
    assert out == b"$3\r\ntwo\r\n+OK\r\n"
    on, off, skip = ReplyMode.ON, ReplyMode.OFF, ReplyMode.SKIP
    assert modes == [skip, on, on, off, off, off, on]


def test_subscribe_visibility_blocks_and_holds_messages_behind_the_reply(plane):
    async def main() -> tuple[list[State], bytes]:
        node, conn, wire = _conn(plane)
        waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        node.link.filters_changed = lambda changes: waiting  # type: ignore[method-assign]
        states = []
        action = plane.process(conn, b"SUBSCRIBE a\r\nPING\r\n", time.monotonic())
        states.append(conn.state)
        assert action is BLOCK and conn.blocked is not None
        node.pubsub.publish(b"a", b"early", False)  # held behind the confirmation
        waiting.set_result(None)
        await asyncio.sleep(0)
        assert plane.unblock(conn) is DONE
        states.append(conn.state)
        conn.flush()
        return states, b"".join(wire.writes)

    states, out = asyncio.run(main())
    assert states == [State.BLOCKED, State.SUBSCRIBED]
    assert out == (
        b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"
        b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$5\r\nearly\r\n"
        b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    )


def _limited(plane: Plane, hard: int) -> tuple[Node, Any, Wire]:
    """A connection under a pubsub hard limit of ``hard`` bytes."""
    return _conn(plane, NodeConfig(port=0, pubsub_hard_limit=hard, pubsub_soft_limit=0))


def test_messages_held_behind_a_reply_count_against_the_pubsub_hard_limit(plane):
    """A subscriber BLOCKED on its SUBSCRIBE's confirmation holds the messages
    that come meanwhile (module doc): their bytes are its output buffer
    (CLIENT LIST omem) and it is cut at the hard limit, the held messages
    freed, as Redis cuts a client whose reply buffer passes it."""

    async def main() -> tuple[list[int], list[str], int, int, list[bytes]]:
        node, conn, wire = _limited(plane, 10_000)
        waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        node.link.filters_changed = lambda changes: waiting  # type: ignore[method-assign]
        assert plane.process(conn, b"SUBSCRIBE a\r\nPING\r\n", time.monotonic()) is BLOCK
        omem = []
        for _ in range(12):  # 12 x ~1 KB: past 10,000 at the 10th
            node.pubsub.publish(b"a", b"m" * 1000, False)
            node.pubsub.flush_all()
            omem.append(conn.output_buffer_size())
        waiting.set_result(None)
        await asyncio.sleep(0)
        cut = node.stats.output_buffer_limit_disconnections
        return omem, wire.calls, cut, len(conn._held), wire.writes

    omem, calls, cut, held, writes = asyncio.run(main())
    frame = len(b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1000\r\n") + 1002
    assert omem[:9] == [frame * i for i in range(1, 10)]  # what it holds is its omem
    assert omem[9:] == [0, 0, 0]  # cut at the 10th (10,290 > 10,000), its held output freed
    assert (calls, cut, held, writes) == (["abort"], 1, 0, [])


def test_a_postponed_subscriber_gets_its_messages_and_is_cut_at_the_hard_limit(plane):
    """CLIENT PAUSE ALL postpones a subscriber's PING (BLOCKED): nothing waits
    behind a command that has not run, so its messages are written as ever
    (Redis writes to a postponed client) and its output buffer is held to the
    limit; the PONG would come after them. Before issue 41 they were held
    with no bound (281 MB of RSS for 256 MB published)."""

    async def main() -> tuple[int, list[int], list[str], int]:
        node, conn, wire = _limited(plane, 10_000)
        _feed(plane, conn, b"SUBSCRIBE a\r\n")
        node.context.pause.pause(60_000, pause.ALL)
        assert plane.process(conn, b"PING\r\n", time.monotonic()) is BLOCK
        written = len(wire.writes)
        wire.stuck = True  # the subscriber reads nothing from here on
        buffered = []
        for _ in range(12):  # 12 x ~1 KB: the 10th would take it past 10,000
            node.pubsub.publish(b"a", b"m" * 1000, False)
            node.pubsub.flush_all()
            buffered.append(wire.pending)
        cut = node.stats.output_buffer_limit_disconnections
        node.context.pause.unpause()
        return written, buffered, wire.calls, cut

    written, buffered, calls, cut = asyncio.run(main())
    frame = len(b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1000\r\n") + 1002
    assert written == 1  # the confirmation
    # each message written at once (not held behind the postponed PING), until
    # the 10th, which would pass the limit with what the socket holds: the
    # client is cut before it is buffered, as Redis cuts at the append
    assert buffered == [frame * i for i in range(1, 10)] + [frame * 9] * 3
    assert (calls, cut) == (["abort"], 1)


def test_unauthenticated_client_over_the_preauth_limit_is_cut(plane):
    # one read, no slice: 481 replies in one turn whatever the machine's
    # load (under ASan and a loaded machine the 5 ms budget ended it at 300)
    async def main(pings: int, pending: int, auth: bool) -> tuple[int, list[str], int]:
        node, conn, wire = _conn(plane, NodeConfig(port=0, requirepass="pw"))
        node.context.slice_ns = 1 << 62
        wire.pending = pending
        _feed(plane, conn, (b"AUTH pw\r\n" if auth else b"") + b"PING\r\n" * pings)
        out = b"".join(wire.writes)
        return out.count(b"\r\n"), wire.calls, node.stats.output_buffer_limit_disconnections

    noauth = len(b"-NOAUTH Authentication required.\r\n")
    limit = PREAUTH_OUTPUT_LIMIT
    assert limit // noauth == 481  # Redis 7.0.15: 481 answered, 482 cut with no reply
    assert asyncio.run(main(481, 0, False)) == (481, [], 0)
    assert asyncio.run(main(482, 0, False)) == (0, ["abort"], 1)
    assert asyncio.run(main(1, limit - noauth, False)) == (1, [], 0)  # left by an earlier write
    assert asyncio.run(main(1, limit - noauth + 1, False)) == (0, ["abort"], 1)
    # authenticated: no limit (+OK and 600 PONG over ten times the limit)
    replies, calls, cut = asyncio.run(main(600, 10 * limit, True))
    assert (replies, calls, cut) == (601, [], 0)


def test_config_set_swaps_the_settings_whole(plane):
    async def main() -> tuple[Settings, Settings, bytes]:
        node, conn, wire = _conn(plane)
        before = node.context.settings
        _feed(plane, conn, b"CONFIG SET timeout 7 client-output-buffer-limit 'pubsub 1mb 0 0'\r\n")
        _feed(plane, conn, b"CONFIG SET timeout 9 maxclients 0\r\n")  # a bad pair: nothing
        return before, node.context.settings, b"".join(wire.writes)

    before, after, out = asyncio.run(main())
    assert out.startswith(b"+OK\r\n-ERR CONFIG SET failed")
    assert before.timeout == 0 and after.timeout == 7
    assert after.pubsub_limits == (1024 * 1024, 0, 0) and after.queue_limit == 1024 * 1024


def test_timeout_closes_idle_clients_not_subscribers():
    async def main() -> tuple[bool, bool, bool]:
        node = Node(NodeConfig(port=0, timeout=1))
        await node.start()
        try:
            _, idle_w = await asyncio.open_connection("127.0.0.1", node.port)
            sub_r, sub_w = await asyncio.open_connection("127.0.0.1", node.port)
            sub_w.write(b"SUBSCRIBE a\r\n")
            await sub_r.readexactly(len(b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"))
            await asyncio.sleep(0.5)
            early = len(node.clients)
            await asyncio.sleep(1.4)
            late = len(node.clients)
            subscribed_left = all(c.channels for c in node.clients.values())
            idle_w.close()
            sub_w.close()
            return early == 2, late == 1, subscribed_left
        finally:
            await node.stop()

    assert asyncio.run(main()) == (True, True, True)


def test_keepalive_and_backlog_reach_the_sockets(monkeypatch):
    backlogs = []
    import router.node

    real_listen = router.node.listen

    async def listen(*args: Any, **kwargs: Any) -> Any:
        backlogs.append(kwargs.get("backlog"))
        return await real_listen(*args, **kwargs)

    monkeypatch.setattr(router.node, "listen", listen)

    async def main() -> tuple[int, int, int, int]:
        node = Node(NodeConfig(port=0, tcp_keepalive=30, tcp_backlog=7))
        await node.start()
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", node.port)
            await asyncio.sleep(0.05)
            (conn,) = node.clients.values()
            with socket.socket(fileno=socket.dup(conn.extras.fd)) as s:
                opts = (
                    s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                    s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                    s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                    s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                )
            writer.close()
            return opts
        finally:
            await node.stop()

    assert asyncio.run(main()) == (1, 30, 10, 3)
    assert backlogs == [7]
