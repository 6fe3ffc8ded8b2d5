"""The cyclic garbage collector of a node process (issue 28 item 6).

A full collection walks every tracked container, and every reference each
one holds; with a million subscriptions that walk held the loop 230 ms. The
node keeps the walk short three ways:

- subscriptions hold few tracked objects (:mod:`router.pubsub`: a name's
  single subscriber is not wrapped in a set; a client's names are a dict of
  bytes, which CPython never tracks);
- :func:`settle` freezes what exists once the node serves (``gc.freeze``,
  as Instagram's servers do): the modules, the command table, and the
  subscription tables themselves, which later grow without ever being
  walked again (their values are clients, which the collector still sees
  through each client's own references);
- a larger first-generation threshold, so the young generation is walked
  less often (its walk stays short: it holds what one batch allocated);
- what survives a full collection is frozen too (:class:`Pauses` does it
  at the collection's end), so the next full collection walks only what
  came since: 10,000 connections (13 tracked objects each) made a full
  walk of 33-48 ms, a pause every client saw. The price is CPython's for
  ``gc.freeze``: a reference cycle that was alive when frozen and becomes
  garbage later is not collected (a dial task in flight whose failure ties
  it to its exception and traceback is one). A connection's objects need
  no collector (they are freed by their reference counts when it closes,
  in the states tests/router/test_collector.py opens: the frozen count
  returns to where it was); for the rest, :class:`Reclaimer` looks once
  every :data:`RECLAIM_SECONDS` whether any frozen object died, and walks
  everything in the node only if one did.

Looking costs the node a ``fork()`` (the page tables are copied: ~13 ms
for 630 MB here, the pause Redis's BGSAVE takes, its ``latest_fork_usec``):
the child, a copy-on-write image of the node at that instant, runs a full
collection, unfreezes, runs another (which finds exactly the frozen objects
that died) and reports the count and the commonest types through a pipe,
then exits without returning to the event loop; every descriptor it
inherited is closed first, so a finalizer it runs cannot touch a socket,
file or pipe of the node. Only when it found something does the node walk
everything itself (:func:`reclaim`, a pause: 155 ms with 10,000 clients
holding 1,000,000 channels, since the subscription tables are walked too),
logged with the types found. Counted in INFO: ``gc_reclaim_checks``,
``gc_reclaim_check_failures`` (a child that failed or outlived
:data:`CHECK_TIMEOUT_SECONDS`: the node then walks, as it would without
``fork``), ``gc_frozen_garbage`` (the last check's count), ``gc_reclaims``,
``gc_reclaimed_objects``. Every other collection in ``bloomcast bench
hostile`` stays under 8 ms. The child's copy-on-write pages are extra
memory while it runs (at most the node's tracked objects' pages), as for
Redis's fork.

:class:`Pauses` records every collection's duration (``gc.callbacks``), for
INFO's ``# Collector`` section and ``bloomcast bench hostile``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
from collections import Counter
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import Any

log = logging.getLogger("bloomcast.node")

#: gc.set_threshold once frozen (CPython's default is 700, 10, 10)
THRESHOLDS = (5_000, 1, 1)
#: seconds between two walks of everything, frozen objects included (Reclaimer)
RECLAIM_SECONDS = 3600.0
#: a checking child that has not reported by then is killed (SIGKILL)
CHECK_TIMEOUT_SECONDS = 120.0
#: the commonest types of a check's finds, logged
TYPES_REPORTED = 5


class Pauses:
    """Collections counted and timed through ``gc.callbacks``; ``sink``, when
    set, is given each pause's milliseconds (the node's latency monitor:
    ``collector-pause``, :mod:`router.latency`)."""

    def __init__(self) -> None:
        self.sink: Callable[[float], None] | None = None
        self.collections = 0
        self.worst_ms = 0.0
        self.over_50ms = 0
        self.total_ms = 0.0
        self._started = 0.0
        self.reclaims = 0  # Reclaimer walks
        self.reclaimed = 0  # objects they collected
        self.checks = 0  # Reclaimer's forked looks
        self.check_failures = 0
        self.frozen_garbage = 0  # what the last look found

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = perf_counter()
            return
        if info.get("generation") == 2:
            gc.freeze()  # the survivors are not walked again (module doc)
        ms = (perf_counter() - self._started) * 1000
        self.collections += 1
        self.total_ms += ms
        self.worst_ms = max(self.worst_ms, ms)
        if ms > 50:
            self.over_50ms += 1
        if self.sink is not None:
            self.sink(ms)

    def info_fields(self) -> dict[str, int | str]:
        """INFO ``# Collector``."""
        return {
            "gc_collections": self.collections,
            "gc_pause_max_ms": f"{self.worst_ms:.2f}",
            "gc_pause_total_ms": f"{self.total_ms:.2f}",
            "gc_pauses_over_50ms": self.over_50ms,
            "gc_frozen_objects": gc.get_freeze_count(),
            "gc_reclaim_checks": self.checks,
            "gc_reclaim_check_failures": self.check_failures,
            "gc_frozen_garbage": self.frozen_garbage,
            "gc_reclaims": self.reclaims,
            "gc_reclaimed_objects": self.reclaimed,
            "gc_threshold": ",".join(map(str, gc.get_threshold())),
        }


def settle(pauses: Pauses | None = None, tables: Iterable[dict[Any, Any]] = ()) -> None:
    """Once the node serves: collect, freeze what is left (``tables`` too:
    CPython tracks a dict only once it holds a container, and a full
    collection untracks an empty one, so each is made tracked first), raise
    the first threshold, and time every later collection with ``pauses``."""
    gc.collect()
    for table in tables:
        if not gc.is_tracked(table):
            table[None] = []  # a container: the dict is tracked from now on
            del table[None]
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    if pauses is not None and pauses not in gc.callbacks:
        gc.callbacks.append(pauses)


def reclaim(pauses: Pauses | None = None) -> int:
    """Unfreeze, collect everything, freeze again: the cycles that formed
    among frozen objects are freed (module doc). Returns how many objects
    the collection found unreachable; counted in ``pauses``."""
    gc.unfreeze()
    found = gc.collect()  # timed by Pauses as any collection; it freezes at its end
    gc.freeze()
    if pauses is not None:
        pauses.reclaims += 1
        pauses.reclaimed += found
    return found


def frozen_garbage(types: int = TYPES_REPORTED) -> dict[str, Any]:
    """In this process: what :func:`reclaim` would find among the frozen
    objects, by running it: a full collection first (what is not frozen),
    then unfrozen. Returns ``{"found": n, "types": [[name, count], ...]}``
    (the commonest ``types``). Destructive (it frees what it finds and
    leaves everything unfrozen): the Reclaimer runs it in a forked child."""
    gc.collect()
    gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)  # found objects are kept, to be named
    try:
        found = gc.collect()
        names = Counter(type(o).__qualname__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return {"found": found, "types": [list(t) for t in names.most_common(types)]}


def _child(write_fd: int) -> None:
    """The forked child: close every inherited descriptor but the pipe's
    write end (0-2 become /dev/null), offer itself first to the OOM killer
    (its copy-on-write pages are extra memory), look, report one JSON line,
    exit. Never returns, whatever is raised."""
    code = 1
    try:
        os.closerange(3, write_fd)
        os.closerange(write_fd + 1, os.sysconf("SC_OPEN_MAX"))
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
        report = json.dumps(frozen_garbage()).encode() + b"\n"
        os.write(write_fd, report)
        code = 0
    finally:
        os._exit(code)


class Reclaimer:
    """Every ``period`` seconds on the node's loop: a forked child looks for
    frozen objects that died, and only if it finds some the node walks
    everything (:func:`reclaim`; module doc). Without ``fork`` it walks."""

    def __init__(
        self,
        pauses: Pauses,
        period: float = RECLAIM_SECONDS,
        check_timeout: float = CHECK_TIMEOUT_SECONDS,
    ) -> None:
        self.pauses = pauses
        self.period = period
        self.check_timeout = check_timeout
        self._handle: asyncio.TimerHandle | None = None
        self._check: _Check | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = loop.call_later(self.period, self._run, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._check is not None:
            self._check.abandon()
            self._check = None

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        if not hasattr(os, "fork"):
            reclaim(self.pauses)
            self.start(loop)
            return
        try:
            self._check = _Check(loop, self.check_timeout, self._checked)
        except OSError as exc:  # no pipe, no fork (EAGAIN, ENOMEM): a failed check
            log.warning("collector: cannot fork the reclaim check (%s)", exc)
            self._checked(loop, None)

    def _checked(self, loop: asyncio.AbstractEventLoop, report: dict[str, Any] | None) -> None:
        self._check = None
        pauses = self.pauses
        pauses.checks += 1
        if report is None:
            pauses.check_failures += 1
            log.warning("collector: the reclaim check failed; walking everything in the node")
            reclaim(pauses)
        else:
            found = pauses.frozen_garbage = int(report["found"])
            if found:
                types = ", ".join(f"{name} x{count}" for name, count in report["types"])
                log.info(
                    "collector: %d frozen objects died (%s): walking everything to free them",
                    found,
                    types,
                )
                reclaim(pauses)
        self.start(loop)


class _Check:
    """One forked look (:func:`_child`), read through a pipe on the loop;
    ``done(loop, report)`` gets the report, or None if the child failed or
    outlived ``timeout`` (then killed)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        timeout: float,
        done: Callable[[asyncio.AbstractEventLoop, dict[str, Any] | None], None],
    ) -> None:
        self._loop = loop
        self._done = done
        self._data = bytearray()
        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:
            _child(write_fd)  # never returns
        os.close(write_fd)
        self._pid = pid
        self._fd = read_fd
        os.set_blocking(read_fd, False)
        loop.add_reader(read_fd, self._readable)
        self._timer: asyncio.TimerHandle | None = loop.call_later(timeout, self._expired)

    def _readable(self) -> None:
        try:
            chunk = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        if chunk:
            self._data += chunk
            return
        self._close()  # EOF: the child wrote its line and exited (or died)
        report = None
        with contextlib.suppress(ValueError):  # a child that died: no report
            report = json.loads(self._data)
        self._reap()
        self._done(self._loop, report)

    def _expired(self) -> None:
        self._timer = None
        self.abandon()
        self._done(self._loop, None)

    def abandon(self) -> None:
        """Kill the child, if still running, and stop reading."""
        if self._fd < 0:
            return
        self._close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self._pid, 0)  # killed: gone at once, no zombie left

    def _close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1

    def _reap(self) -> None:
        """Collect the exited child; tried again later if it has not yet
        exited (it closes its pipe just before ``_exit``)."""
        try:
            pid, _ = os.waitpid(self._pid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            self._loop.call_later(0.05, self._reap)
