"""Publish right after a remote SUBSCRIBE: the ledger of Redis Cluster's delivery
semantics (issue 27), shared by tests/integration/test_subscribe_visibility.py
and ``bloomcast bench visibility``.

A trial subscribes on node i over a raw RESP connection (no client library
between the reply and what follows) and, the moment the reply is read,
publishes on node j over a connection opened beforehand; Redis Cluster
broadcasts every PUBLISH, so there the subscriber always gets it. Works
against any cluster whose nodes accept any channel (bloomcast; Redis Cluster
for SUBSCRIBE / PSUBSCRIBE; SSUBSCRIBE only where the slot's owner is asked).
"""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import hiredis

from bloomcast.testing.ports import LOOPBACK

#: (subscribe command, publish command, message kind) of each channel kind
KINDS = (
    ("SUBSCRIBE", "PUBLISH", b"message"),
    ("PSUBSCRIBE", "PUBLISH", b"pmessage"),
    ("SSUBSCRIBE", "SPUBLISH", b"smessage"),
)


def command(*args: str) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        raw = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


class RawConn:
    """A raw RESP connection to a node on ``host:port``."""

    def __init__(self, port: int, host: str = LOOPBACK, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()

    def send(self, *args: str) -> None:
        self.sock.sendall(command(*args))

    def read(self, timeout: float = 5.0) -> Any:
        """The next reply; TimeoutError when none came in ``timeout`` seconds."""
        self.sock.settimeout(timeout)
        while (reply := self.reader.gets()) is False:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the server")
            self.reader.feed(data)
        return reply

    def call(self, *args: str) -> Any:
        self.send(*args)
        return self.read()

    def close(self) -> None:
        self.sock.close()


@dataclass
class Ledger:
    """Trials made, messages delivered, and each SUBSCRIBE's reply time (s)."""

    expected: int = 0
    delivered: int = 0
    waits: list[float] = field(default_factory=list)


def subscribe_then_publish(
    ports: Sequence[int], trials: int, kinds: Sequence[tuple[str, str, bytes]] = KINDS
) -> Ledger:
    """``trials`` trials rotating over node pairs (i, j), i != j, and ``kinds``."""
    n = len(ports)
    publishers = [RawConn(p) for p in ports]
    out = Ledger()
    try:
        for t in range(trials):
            sub_kind, pub_kind, msg_kind = kinds[t % len(kinds)]
            i = t % n
            j = (i + 1 + (t // n) % (n - 1)) % n
            name = f"vis{{{t}}}.{time.monotonic_ns()}"
            target = name[:-3] + "*" if sub_kind == "PSUBSCRIBE" else name
            sub = RawConn(ports[i])
            try:
                t0 = time.perf_counter()
                sub.send(sub_kind, target)
                reply = sub.read()
                out.waits.append(time.perf_counter() - t0)
                if reply[0].lower() != sub_kind.lower().encode():
                    raise RuntimeError(f"{sub_kind} answered {reply!r}")
                publishers[j].call(pub_kind, name, "now")
                out.expected += 1
                try:
                    got = sub.read(timeout=1.0)
                except TimeoutError:
                    got = None
                out.delivered += bool(got and got[0] == msg_kind and got[-1] == b"now")
            finally:
                sub.close()
    finally:
        for p in publishers:
            p.close()
    return out


def subscribe_churn(port: int, seconds: float) -> float:
    """SUBSCRIBE + UNSUBSCRIBE cycles per second of fresh channels on one
    connection, each reply awaited (every SUBSCRIBE flips filter bits)."""
    conn = RawConn(port)
    cycles = 0
    try:
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            name = f"churn.{cycles}.{time.monotonic_ns()}"
            conn.call("SUBSCRIBE", name)
            conn.call("UNSUBSCRIBE", name)
            cycles += 1
        return cycles / (time.perf_counter() - start)
    finally:
        conn.close()


def subscribe_churn_many(ports: Sequence[int], connections: int, seconds: float) -> float:
    """SUBSCRIBE + UNSUBSCRIBE cycles per second summed over ``connections``
    connections churning at once, spread over ``ports`` in turn, each on its
    own fresh channels and each reply awaited before its next command (one
    process, a selector: every connection with a reply read sends its next
    command in the same pass, so a node reads many connections' commands in
    one loop turn, as under real churn)."""
    conns = [RawConn(ports[i % len(ports)]) for i in range(connections)]
    sel = selectors.DefaultSelector()
    stamp = time.monotonic_ns()
    # per connection: cycles done, and whether its SUBSCRIBE's reply is awaited
    done = [0] * connections
    subscribed = [False] * connections
    try:
        for i, conn in enumerate(conns):
            conn.sock.setblocking(False)
            sel.register(conn.sock, selectors.EVENT_READ, i)
        start = time.perf_counter()
        deadline = start + seconds

        def send(i: int) -> None:
            name = f"many.{stamp}.{i}.{done[i]}"
            verb = "UNSUBSCRIBE" if subscribed[i] else "SUBSCRIBE"
            conns[i].sock.sendall(command(verb, name))

        for i in range(connections):
            send(i)
        while True:
            now = time.perf_counter()
            if now >= deadline:
                break
            for key, _ in sel.select(deadline - now):
                i = key.data
                conn = conns[i]
                data = conn.sock.recv(65536)
                if not data:
                    raise ConnectionError("closed by the server")
                conn.reader.feed(data)
                while (reply := conn.reader.gets()) is not False:
                    if subscribed[i]:
                        done[i] += 1
                    subscribed[i] = not subscribed[i]
                    if reply[0] not in (b"subscribe", b"unsubscribe"):
                        raise RuntimeError(f"churn answered {reply!r}")
                    send(i)
        return sum(done) / (time.perf_counter() - start)
    finally:
        sel.close()
        for conn in conns:
            conn.close()
