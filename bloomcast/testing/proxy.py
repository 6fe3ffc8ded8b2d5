"""FaultProxy: a TCP proxy in front of one bus port whose faults switch at run time.

Why a proxy: a cluster bus must survive what networks do to TCP streams
(stalls, resets, frames that never arrive) without losing a forwarded PUBLISH
silently (redis/redis #122, docs/architecture.md §6). Putting each node's bus
port behind its own proxy (``--cluster-announce-bus-port``) makes those
faults reproducible on loopback, with real sockets, in one process.

Modes (:meth:`FaultProxy.pass_through`, :meth:`stall`, :meth:`reset`,
:meth:`drop_frames`):

- ``pass``: bytes are copied both ways.
- ``stall(s)``: neither direction is read nor written for ``s`` seconds (at most
  one read already under way is held back), so the kernel buffers fill and the
  sender sees back-pressure, as on a congested path; then copying resumes.
- ``reset(s)``: every current connection is closed with SO_LINGER 0 (an RST
  each way), and for ``s`` seconds new connections are accepted and reset at
  once (a peer that reboots, a middlebox that forgot the flow).
- ``drop_frames(n, type)``: the proxy parses the bus framing (14-byte header:
  magic ``bc``, version u8, type u8, flags u16, body length u32 at offset 6,
  sender u32; :mod:`cluster_bus.codec`) and silently drops the next ``n``
  frames of that type (default PUBLISH = 9), keeping the rest of the stream
  byte-exact. Only a proxy made with ``bus_framing=True`` can do this.
- ``tamper_frames(n, type)`` / ``repeat_frames(n, type)``: as an attacker on
  the path would, flip one bit in the last byte of the next ``n`` frames of
  that type, or send each of them twice (a replay).

The proxy runs an asyncio loop in a background thread (test tooling, not the
node). :attr:`counts` says what it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Coroutine
from typing import Any

from bloomcast.testing.ports import LOOPBACK, free_port

#: the bus frame header (cluster_bus/codec.py HEADER: >2sBBHII)
BUS_HEADER = struct.Struct(">2sBBHII")
BUS_MAGIC = b"bc"
PUBLISH_TYPE = 9
_LINGER_0 = struct.pack("ii", 1, 0)
_CHUNK = 65536


class _FrameFilter:
    """Splits one direction of a bus stream into frames and drops the chosen ones."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.buffer = bytearray()
        self.raw = False  # not bus framing after all: copy as is

    def feed(self, data: bytes) -> bytes:
        """The bytes to pass on: every complete frame not dropped (a partial frame
        waits for its tail, so a dropped frame is cut out whole)."""
        if self.raw:
            return data
        buf = self.buffer
        buf += data
        out = bytearray()
        pos = 0
        size = BUS_HEADER.size
        while len(buf) - pos >= size:
            magic, _version, ftype, _flags, body, _sender = BUS_HEADER.unpack_from(buf, pos)
            if magic != BUS_MAGIC:  # not our framing: stop parsing, pass the rest as is
                self.proxy.counts["unparsed_streams"] += 1
                out += buf[pos:]
                buf.clear()
                self.raw = True
                return bytes(out)
            end = pos + size + body
            if end > len(buf):
                break
            action = self.proxy._take_action(ftype)
            if action is None:
                out += buf[pos:end]
            elif action == "tamper":
                out += buf[pos : end - 1] + bytes([buf[end - 1] ^ 1])
            elif action == "repeat":
                out += buf[pos:end] * 2
            pos = end
        del buf[:pos]
        return bytes(out)


class _Pipe:
    """One proxied connection: the accepted socket, the one dialled upstream, and
    the two copying tasks (cancelled before the sockets close, so the loop never
    watches a closed descriptor)."""

    def __init__(self, down: socket.socket, up: socket.socket) -> None:
        self.down = down
        self.up = up
        self.tasks: list[asyncio.Task[None]] = []
        self.closed = False

    def end(self, *, rst: bool) -> None:
        """Stop copying; ``rst``: SO_LINGER 0, so closing sends an RST each way."""
        if self.closed:
            return
        self.closed = True
        if rst:
            for sock in (self.down, self.up):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_0)
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()

    def close_sockets(self) -> None:
        for sock in (self.down, self.up):
            with contextlib.suppress(OSError):
                sock.close()


class FaultProxy:
    """Listen on ``listen_port`` (None: a free one), forward to ``target_port``.

    ``bus_framing``: parse bloomcast bus frames (needed by :meth:`drop_frames`;
    off for other protocols, e.g. Redis Cluster's bus). Start with :meth:`start`
    or ``with``; every mode switch is thread-safe.
    """

    def __init__(
        self,
        target_port: int,
        listen_port: int | None = None,
        *,
        host: str = LOOPBACK,
        target_host: str | None = None,
        bus_framing: bool = True,
        netns: str | None = None,
    ) -> None:
        self.host = host
        self.target = (target_host or host, target_port)
        self.port = listen_port if listen_port is not None else free_port(host)
        self.bus_framing = bus_framing
        self.netns = netns  # listen and dial inside this network namespace
        self.counts: Counter[str] = Counter()
        self._pipes: set[_Pipe] = set()
        self._stall_until = 0.0
        self._reset_until = 0.0
        self._drop: dict[int, int] = {}
        self._alter: dict[int, list[str]] = {}  # frame type -> "tamper" / "repeat" queue
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._conn_tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FaultProxy:
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready = threading.Event()

        def run() -> None:
            if self.netns is not None:  # the thread's sockets live in the namespace
                from bloomcast.testing.faults import enter_netns

                enter_netns(self.netns)
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._listen())
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"fault-proxy-{self.port}", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"fault proxy on {self.port} did not start")
        return self

    async def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(128)
        sock.setblocking(False)
        self._listener = sock
        self._accept_task = asyncio.get_running_loop().create_task(self._accept_loop(sock))

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                down, _ = await loop.sock_accept(listener)
            except OSError:
                await asyncio.sleep(0.01)
                continue
            task = loop.create_task(self._accepted(down))
            self._conn_tasks.add(task)
            task.add_done_callback(self._conn_tasks.discard)

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        self._run(self._shutdown())
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()
        self._loop = None

    async def _shutdown(self) -> None:
        if self._accept_task is not None:
            self._accept_task.cancel()
        for pipe in list(self._pipes):
            pipe.end(rst=False)
        for task in list(self._conn_tasks):
            task.cancel()
        await asyncio.gather(*self._conn_tasks, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    # -- modes -------------------------------------------------------------------------

    def pass_through(self) -> None:
        """Mode ``pass``: end any stall, reset window or pending drops."""
        with self._lock:
            self._stall_until = self._reset_until = 0.0
            self._drop.clear()
            self._alter.clear()

    def stall(self, seconds: float) -> None:
        """Mode ``stall``: stop reading and writing both ways for ``seconds``."""
        with self._lock:
            self._stall_until = time.monotonic() + seconds
        self.counts["stalls"] += 1

    def reset(self, seconds: float) -> None:
        """Mode ``reset``: RST every current connection, and new ones for ``seconds``."""
        with self._lock:
            self._reset_until = time.monotonic() + seconds
        self.counts["reset_windows"] += 1
        self._run(self._reset_all())

    async def _reset_all(self) -> None:
        for pipe in list(self._pipes):
            pipe.end(rst=True)
            self.counts["connections_reset"] += 1

    def drop_frames(self, n: int, frame_type: int = PUBLISH_TYPE) -> None:
        """Mode ``drop_frames``: silently drop the next ``n`` bus frames of ``frame_type``."""
        if not self.bus_framing:
            raise ValueError("drop_frames needs bus_framing=True")
        with self._lock:
            self._drop[frame_type] = self._drop.get(frame_type, 0) + n

    def tamper_frames(self, n: int, frame_type: int) -> None:
        """Flip a bit in the last byte of the next ``n`` frames of ``frame_type``."""
        self._queue_alter(n, frame_type, "tamper")

    def repeat_frames(self, n: int, frame_type: int) -> None:
        """Send each of the next ``n`` frames of ``frame_type`` twice (a replay)."""
        self._queue_alter(n, frame_type, "repeat")

    def _queue_alter(self, n: int, frame_type: int, action: str) -> None:
        if not self.bus_framing:
            raise ValueError(f"{action} needs bus_framing=True")
        with self._lock:
            self._alter.setdefault(frame_type, []).extend([action] * n)

    def _take_action(self, frame_type: int) -> str | None:
        """What to do with the next frame of ``frame_type``: None passes it."""
        if self._take_drop(frame_type):
            return "drop"
        with self._lock:
            queue = self._alter.get(frame_type)
            if not queue:
                return None
            action = queue.pop(0)
        self.counts[f"frames_{action}ed"] += 1
        return action

    def pending_drops(self, frame_type: int = PUBLISH_TYPE) -> int:
        with self._lock:
            return self._drop.get(frame_type, 0)

    def _take_drop(self, frame_type: int) -> bool:
        with self._lock:
            left = self._drop.get(frame_type, 0)
            if left <= 0:
                return False
            self._drop[frame_type] = left - 1
        self.counts["frames_dropped"] += 1
        return True

    # -- copying ---------------------------------------------------------------------

    async def _accepted(self, down: socket.socket) -> None:
        self.counts["accepted"] += 1
        down.setblocking(False)
        up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        up.setblocking(False)
        pipe = _Pipe(down, up)
        try:
            if time.monotonic() < self._reset_until:
                self.counts["refused_reset"] += 1
                pipe.end(rst=True)
                return
            loop = asyncio.get_running_loop()
            try:
                await loop.sock_connect(up, self.target)
            except OSError:
                self.counts["upstream_refused"] += 1
                pipe.end(rst=True)
                return
            for s in (down, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pipe.tasks = [
                loop.create_task(self._copy(pipe, down, up)),
                loop.create_task(self._copy(pipe, up, down)),
            ]
            self._pipes.add(pipe)
            await asyncio.gather(*pipe.tasks, return_exceptions=True)
        finally:
            self._pipes.discard(pipe)
            pipe.end(rst=False)
            pipe.close_sockets()

    async def _copy(self, pipe: _Pipe, src: socket.socket, dst: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        frames = _FrameFilter(self) if self.bus_framing else None
        try:
            while not pipe.closed:
                await self._while_stalled()
                data = await loop.sock_recv(src, _CHUNK)
                if not data:
                    break
                await self._while_stalled()
                if frames is not None:
                    data = frames.feed(data)
                if data and not pipe.closed:
                    await loop.sock_sendall(dst, data)
                    self.counts["bytes"] += len(data)
        except OSError:
            pass
        # one side ended: end the whole connection (as a dead middlebox would)
        pipe.end(rst=False)

    async def _while_stalled(self) -> None:
        while True:
            left = self._stall_until - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, 0.05))
