"""The ledger: what was published, what each subscriber received, and the verdict.

Why: "nothing lost silently" is only checkable when every message has a
number (antirez, redis/redis #122: "use message IDs"). A :class:`Publisher`
sends ``<publisher>:<n>`` with n = 1, 2, ... at a steady rate; each
:class:`Subscriber` (a raw RESP pub/sub connection read by a thread) records
every message it gets; :meth:`Ledger.verdict` compares the two over a window
of numbers:

- expected: the numbers published in the window (every PUBLISH that was
  answered, numbered in order; an uncertain one is left out);
- delivered: distinct expected numbers received;
- lost: expected minus delivered;
- duplicated: receipts beyond the first of a number;
- reordered: receipts of a number smaller than one already received from the
  same publisher (a gap filled late, as a replay that overtook nothing must not).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import hiredis


@dataclass(frozen=True)
class Verdict:
    """One subscriber's ledger over a window of publisher numbers."""

    subscriber: str
    expected: int
    delivered: int
    lost: int
    duplicated: int
    reordered: int
    lost_numbers: tuple[int, ...] = ()

    @property
    def clean(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.reordered == 0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lost_numbers"] = list(self.lost_numbers[:20])
        return d


def _connect(address: tuple[str, int], netns: str | None, timeout: float) -> socket.socket:
    """A TCP connection to a node, made from inside ``netns`` when given (the
    calling thread enters it: it is the ledger's own thread)."""
    if netns is not None:
        from bloomcast.testing.faults import enter_netns

        enter_netns(netns)
    sock = socket.create_connection(address, timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _command(*args: str | bytes) -> bytes:
    parts = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


class Publisher:
    """Publishes ``<name>:<n>`` on ``channel`` at ``rate`` per second from a thread.

    A raw RESP connection (no client library retries: a retried PUBLISH would
    publish one number twice and blame the bus). A number counts as published
    once its PUBLISH was answered; one whose connection failed on the way is
    *uncertain* (it may or may not have gone out) and left out of every
    verdict; the next number goes on a new connection.
    """

    def __init__(
        self,
        address: tuple[str, int],
        channel: str,
        *,
        name: str = "p",
        rate: float = 300.0,
        netns: str | None = None,
    ) -> None:
        self.address = address
        self.netns = netns
        self.channel = channel
        self.name = name
        self.rate = rate
        self.published = 0  # the last number sent (answered or uncertain)
        self.uncertain: set[int] = set()
        #: n -> (sent, answered or None), wall-clock seconds: when the node can
        #: have handled the PUBLISH (the chaos checker matches loss notices on it)
        self.times: dict[int, tuple[float, float | None]] = {}
        self._paused = threading.Event()
        self._idle = threading.Event()  # the thread saw the pause: nothing in flight
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Publisher:
        name = f"publisher-{self.name}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        sock: socket.socket | None = None
        reader = hiredis.Reader()
        period = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            if self._paused.is_set():
                self._idle.set()
                time.sleep(0.01)
                next_at = time.monotonic()
                continue
            n = self.published + 1
            try:
                if sock is None:
                    sock = _connect(self.address, self.netns, 5.0)
                    reader = hiredis.Reader()
                sent = time.time()
                self.times[n] = (sent, None)
                sock.sendall(_command("PUBLISH", self.channel, f"{self.name}:{n}"))
                reply = reader.gets()
                while reply is False:
                    data = sock.recv(4096)
                    if not data:
                        raise ConnectionError("closed")
                    reader.feed(data)
                    reply = reader.gets()
                self.times[n] = (sent, time.time())
                self.published = n
            except OSError:
                self.uncertain.add(n)
                self.published = n
                if sock is not None:
                    sock.close()
                sock = None
                time.sleep(0.05)
                continue
            next_at += period
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1.0:
                next_at = time.monotonic()  # far behind: do not burst
        if sock is not None:
            sock.close()

    def pause(self, timeout: float = 10.0) -> None:
        """Stop publishing; returns once no PUBLISH of the thread is in flight."""
        self._idle.clear()
        self._paused.set()
        if self._thread is not None and self._thread.is_alive() and not self._idle.wait(timeout):
            raise TimeoutError("the publisher did not pause")

    def resume(self) -> None:
        self._paused.clear()

    def burst(self, count: int) -> None:
        """While paused: publish exactly the next ``count`` numbers from the
        caller's thread, each answered before this returns."""
        if not self._idle.is_set():
            raise RuntimeError("burst() needs the publisher paused")
        reader = hiredis.Reader()
        with _connect(self.address, None, 5.0) as sock:
            for _ in range(count):
                n = self.published + 1
                sock.sendall(_command("PUBLISH", self.channel, f"{self.name}:{n}"))
                while (reply := reader.gets()) is False:
                    data = sock.recv(4096)
                    if not data:
                        raise ConnectionError("closed")
                    reader.feed(data)
                if isinstance(reply, hiredis.ReplyError):
                    raise reply
                self.published = n

    def wait_published(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.published < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"publisher at {self.published}, wanted {n}")
            time.sleep(0.01)

    def stop(self) -> int:
        """Stop and return the last number published."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        return self.published


class Subscriber:
    """One pub/sub connection (``channels`` and / or ``patterns``) read by a thread.

    A raw RESP connection: a client library that reconnects and re-subscribes
    on its own would hide the very disconnects this records. ``received``:
    (publisher, n) in arrival order; ``other``: messages that are not
    ``<publisher>:<n>`` (e.g. JSON loss notes); ``closed``: the server closed
    the connection (``--on-publish-loss disconnect``, or the node died).
    """

    def __init__(
        self,
        name: str,
        address: tuple[str, int],
        *,
        channels: tuple[str, ...] = (),
        patterns: tuple[str, ...] = (),
        netns: str | None = None,
    ) -> None:
        self.name = name
        self.address = address
        self.channels = channels
        self.patterns = patterns
        self.netns = netns
        self.received: list[tuple[str, int]] = []
        self.other: list[tuple[str, bytes]] = []
        self.confirmed_at = 0.0  # wall clock when every confirmation had arrived
        self.closed_at: float | None = None  # when the server closed it
        self.closed = False
        self.error = ""
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 15.0) -> Subscriber:
        """Subscribe, wait for every confirmation, then read in the thread."""
        self._thread = threading.Thread(target=self._run, name=f"sub-{self.name}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"subscriber {self.name} not confirmed: {self.error}")
        return self

    def _run(self) -> None:
        try:
            sock = _connect(self.address, self.netns, 5.0)
        except OSError as exc:
            self.error = repr(exc)
            self.closed = True
            return
        reader = hiredis.Reader()
        try:
            if self.channels:
                sock.sendall(_command("SUBSCRIBE", *self.channels))
            if self.patterns:
                sock.sendall(_command("PSUBSCRIBE", *self.patterns))
            want = len(self.channels) + len(self.patterns)
            sock.settimeout(0.2)
            while not self._stop.is_set():
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    raise ConnectionError("closed by the server")
                reader.feed(data)
                while (msg := reader.gets()) is not False:
                    kind = msg[0]
                    if kind in (b"subscribe", b"psubscribe"):
                        want -= 1
                        if want == 0:
                            self.confirmed_at = time.time()
                            self._ready.set()
                    elif kind == b"message":
                        self._record(msg[1], msg[2])
                    elif kind == b"pmessage":
                        self._record(msg[2], msg[3])
        except OSError as exc:
            self.closed_at = time.time()
            self.closed = True
            self.error = repr(exc)
        finally:
            sock.close()

    def _record(self, channel: bytes, data: bytes) -> None:
        name, sep, num = data.partition(b":")
        if sep and num.isdigit():
            self.received.append((name.decode(), int(num)))
        else:
            self.other.append((channel.decode(errors="replace"), data))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def numbers(self, publisher: str) -> list[int]:
        return [n for p, n in list(self.received) if p == publisher]

    def wait_closed(self, timeout: float) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.closed


class Ledger:
    """A publisher and its subscribers; verdicts over windows of numbers."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher
        self.subscribers: dict[str, Subscriber] = {}

    def add(self, sub: Subscriber) -> Subscriber:
        self.subscribers[sub.name] = sub
        return sub

    def drain(self, last: int, timeout: float = 20.0, names: list[str] | None = None) -> None:
        """Wait until each subscriber (``names``: those) holds number ``last``, or timeout."""
        deadline = time.monotonic() + timeout
        subs = [self.subscribers[n] for n in names] if names else list(self.subscribers.values())
        pub = self.publisher.name
        while time.monotonic() < deadline:
            if all(sub.closed or last in set(sub.numbers(pub)) for sub in subs):
                return
            time.sleep(0.05)

    def verdict(self, name: str, first: int, last: int) -> Verdict:
        """Subscriber ``name``'s verdict over publisher numbers ``first..last``."""
        got = self.subscribers[name].numbers(self.publisher.name)
        seen: set[int] = set()
        duplicated = reordered = 0
        top = 0
        for n in got:
            if n in seen:
                duplicated += 1
                continue
            seen.add(n)
            if n < top:
                reordered += 1
            top = max(top, n)
        expected = set(range(first, last + 1)) - self.publisher.uncertain
        lost = sorted(expected - seen)
        return Verdict(
            name,
            len(expected),
            len(expected & seen),
            len(lost),
            duplicated,
            reordered,
            tuple(lost),
        )
