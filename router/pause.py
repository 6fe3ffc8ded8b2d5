"""CLIENT PAUSE / UNPAUSE: Redis 7.0's ``pauseClients`` with asyncio, no
threads and no polling.

While a pause is on, a command it covers is not run: the client is postponed
like a Redis blocked client (``blockPostponeClient``): :meth:`ClientPause.postpone`
returns a future, the connection stops reading (what follows stays buffered,
so replies keep their order) and, when the pause ends, the command is checked
and run again from the start (it may be postponed again by a newer pause).

- ``WRITE`` covers the commands Redis flags ``write`` or ``may-replicate``
  that the node has: PUBLISH and SPUBLISH (Redis replicates them), FLUSHALL,
  FLUSHDB, FUNCTION FLUSH, and an EXEC whose transaction holds one of them.
- ``ALL`` covers every command of every client (the node has no replicas,
  which Redis alone exempts).
- A new pause never lowers the level nor brings the end forward (Redis keeps
  the most restrictive type and the latest end); one ``call_later`` timer ends
  it, and CLIENT UNPAUSE ends it at once. Postponed commands run in the order
  they arrived.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _Context(Protocol):
    """What a pause sets of the node's context (:class:`router.context.CommandContext`)."""

    paused: bool


class Connection(Protocol):
    """What a pause reads and marks of a client (:class:`router.connection.Connection`)."""

    closed: bool
    postponed: bool
    multi: Iterable[tuple[_Named, list[bytes]]] | None


#: ``run(client, args)``: a postponed command run when the pause ends, counted
#: as the request loop counts it (:func:`router.dispatch.execute_counted`)
Run = Callable[[Any, list[bytes]], "bytes | asyncio.Future[bytes]"]

OFF, WRITE, ALL = 0, 1, 2

#: the node's commands Redis 7.0 flags write or may-replicate
WRITE_COMMANDS = frozenset({"publish", "spublish", "flushall", "flushdb", "function|flush"})


class ClientPause:
    """The node's pause state and its postponed commands."""

    __slots__ = ("_timer", "_waiting", "context", "end", "level", "run")

    def __init__(self, run: Run) -> None:
        self.run = run
        self.level = OFF
        #: the node's context, whose ``paused`` mirrors ``level != OFF`` (the
        #: request loop reads it in C on every read: router.dispatch._open)
        self.context: _Context | None = None
        self.end = 0.0  # time.monotonic() when the pause ends
        self._timer: asyncio.TimerHandle | None = None
        self._waiting: list[tuple[Connection, list[bytes], asyncio.Future[bytes]]] = []

    def pause(self, milliseconds: int, level: int) -> None:
        end = time.monotonic() + milliseconds / 1000
        self._set_level(max(self.level, level))
        if end <= self.end and self._timer is not None:
            return
        self.end = max(self.end, end)
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(loop.time() + (self.end - time.monotonic()), self.unpause)

    def unpause(self) -> None:
        """End the pause now and run the postponed commands in arrival order."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._set_level(OFF)
        self.end = 0.0
        waiting, self._waiting = self._waiting, []
        for client, args, future in waiting:
            client.postponed = False
            if client.closed or future.done():
                continue
            reply = self.run(client, args)
            if isinstance(reply, bytes):
                future.set_result(reply)
            else:  # postponed again (a pause started meanwhile) or waiting
                reply.add_done_callback(functools.partial(_pass_on, target=future))

    def _set_level(self, level: int) -> None:
        self.level = level
        if self.context is not None:
            self.context.paused = level != OFF

    def holds(self, client: Connection, cmd: _Named) -> bool:
        """Whether the pause in effect postpones ``cmd`` (Redis ``processCommand``)."""
        if self.level == ALL:
            return True
        if cmd.name in WRITE_COMMANDS:
            return True
        return cmd.name == "exec" and any(c.name in WRITE_COMMANDS for c, _ in client.multi or ())

    def postpone(self, client: Connection, args: list[bytes]) -> asyncio.Future[bytes]:
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        client.postponed = True  # its output flows meanwhile (Connection.write)
        self._waiting.append((client, args, future))
        return future


def _pass_on(source: asyncio.Future[bytes], *, target: asyncio.Future[bytes]) -> None:
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    else:
        target.set_result(source.result())
