"""Budget: the bulk work of every client, bounded per event-loop turn.

Redis runs a SUBSCRIBE of a million channels, a bare UNSUBSCRIBE, a
disconnecting client's cleanup or a PUBSUB listing in one go, holding its
loop meanwhile. A node shares one budget per loop turn among all of them
instead (docs/architecture.md §4, DESIGN.md §5f): :data:`OPS_PER_TURN`
operations (one name subscribed, unsubscribed, counted or listed; a long
pattern weighs more), and at most :data:`SECONDS_PER_TURN`, whoever asks.

- Work that fits in what is left of this turn's budget runs at once
  (:meth:`Budget.admit`): a SUBSCRIBE of three channels costs one integer
  comparison more than before.
- Anything else becomes a :class:`Job`, queued. The queue runs in a
  ``call_soon`` callback once per loop turn, round robin in slices of
  :data:`SLICE_OPS`, so one client's million names never delays another's
  ten by more than a turn. A job's client waits meanwhile (the command
  answered with a future: :mod:`router.client` blocks it, as Redis blocks
  a client), so its replies leave in order and later commands wait behind.

Not thread-safe: one asyncio loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from time import perf_counter
from typing import Any, Protocol, cast

#: operations of bulk work per loop turn, all clients together (~1-2 ms:
#: a turn with nothing else to do costs ~20 us, so small slices lose little)
OPS_PER_TURN = 512
#: the most one loop turn spends on queued jobs, whatever their weight
SECONDS_PER_TURN = 0.002
#: a job runs at most this many operations before the next job's turn
SLICE_OPS = 64
#: kept back after the queue ran for the clients read in the next turn, so
#: small commands run at once while a big job is in progress
RESERVE_OPS = OPS_PER_TURN // 4


class Job(Protocol):
    """Bulk work in slices: ``step(ops)`` runs at most about ``ops``
    operations and returns how many it ran; ``done`` once it has finished
    (or its client went away)."""

    done: bool

    def step(self, ops: int) -> int: ...


class Budget:
    """The per-loop-turn work budget shared by all clients, and the queue of
    jobs that did not fit in it."""

    __slots__ = ("_jobs", "_loop", "_scheduled", "left", "ops", "seconds")

    def __init__(self, ops: int = OPS_PER_TURN, seconds: float = SECONDS_PER_TURN) -> None:
        self.ops = ops
        self.seconds = seconds
        self.left = ops
        self._jobs: deque[Job] = deque()
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def pending(self) -> int:
        """Jobs queued (waiting or in progress)."""
        return len(self._jobs)

    def admit(self, ops: int) -> bool:
        """Charge ``ops`` operations to this turn and return True when they
        fit in what is left; False: the caller queues a :class:`Job`."""
        if ops > self.left:
            return False
        self.left -= ops
        if not self._scheduled:
            self._schedule()  # the budget comes back on the next turn
        return True

    def queue(self, job: Job) -> None:
        """Run ``job`` in slices from the next loop turn on."""
        self._jobs.append(job)
        if not self._scheduled:
            self._schedule()

    def _schedule(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        self._scheduled = True
        loop.call_soon(self._run)

    def _run(self) -> None:
        """One loop turn of queued work: a fresh budget, jobs round robin
        until it or :attr:`seconds` is spent."""
        left = self.ops
        jobs = self._jobs
        deadline = perf_counter() + self.seconds
        while jobs and left > 0:
            job = jobs.popleft()
            left -= max(1, job.step(min(left, SLICE_OPS)))
            if not job.done:
                jobs.append(job)
            if perf_counter() > deadline:
                break
        if jobs:
            self.left = RESERVE_OPS
            self._loop.call_soon(self._run)  # type: ignore[union-attr]
        else:
            self.left = max(left, RESERVE_OPS)
            self._scheduled = False


class Waiter(Protocol):
    """What the budget needs of a job's client (a connection)."""

    closed: bool

    @property
    def in_exec(self) -> bool: ...


#: ``after(future, reply)``: a future of ``reply`` once ``future`` ended
#: (:meth:`router.pubsub.PubSub.after`)
After = Callable[["asyncio.Future[Any]", bytes], "asyncio.Future[bytes]"]


class Work:
    """A job of the budget (:class:`router.budget.Job`) with a reply: run
    whole at once, or in slices while its client waits on :attr:`future`."""

    __slots__ = ("after", "client", "done", "future", "parts", "waits", "weight")

    def __init__(self, after: After, client: Waiter, weight: int) -> None:
        self.after = after
        self.client = client
        self.weight = weight
        self.done = False
        self.parts: list[bytes] = []
        self.waits: list[asyncio.Future[None]] | None = None  # visibility waits
        self.future: asyncio.Future[bytes] | None = None

    @property
    def reply(self) -> bytes:
        return b"".join(self.parts)

    def step(self, ops: int) -> int:
        raise NotImplementedError

    def finish(self) -> None:
        """Called by ``step`` once the work is done: resolve the future."""
        self.done = True
        future = self.future
        if future is None or future.done():
            return
        if self.waits is None:
            future.set_result(self.reply)
            return

        def confirmed(waited: asyncio.Future[bytes]) -> None:
            if not future.done():
                future.set_result(waited.result())

        self.waited().add_done_callback(confirmed)

    def waited(self) -> asyncio.Future[bytes]:
        """The reply once every visibility wait has ended."""
        waits = cast("list[asyncio.Future[None]]", self.waits)
        gathered = waits[0] if len(waits) == 1 else asyncio.gather(*waits, return_exceptions=True)
        return self.after(cast("asyncio.Future[None]", gathered), self.reply)
