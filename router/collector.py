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
  returns to where it was); for the rest, :class:`Reclaimer` unfreezes and
  walks everything once every :data:`RECLAIM_SECONDS`, counted in INFO
  (``gc_reclaims``, ``gc_reclaimed_objects``) beside ``gc_frozen_objects``.
  That walk is a pause: 155 ms with 10,000 clients holding 1,000,000
  channels (the subscription tables are walked too), once an hour; every
  other collection in ``bloomcast bench hostile`` stays under 8 ms.

:class:`Pauses` records every collection's duration (``gc.callbacks``), for
INFO's ``# Collector`` section and ``bloomcast bench hostile``.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterable
from time import perf_counter
from typing import Any

#: gc.set_threshold once frozen (CPython's default is 700, 10, 10)
THRESHOLDS = (5_000, 1, 1)
#: seconds between two walks of everything, frozen objects included (Reclaimer)
RECLAIM_SECONDS = 3600.0


class Pauses:
    """Collections counted and timed through ``gc.callbacks``."""

    def __init__(self) -> None:
        self.collections = 0
        self.worst_ms = 0.0
        self.over_50ms = 0
        self.total_ms = 0.0
        self._started = 0.0
        self.reclaims = 0  # Reclaimer walks
        self.reclaimed = 0  # objects they collected

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

    def info_fields(self) -> dict[str, int | str]:
        """INFO ``# Collector``."""
        return {
            "gc_collections": self.collections,
            "gc_pause_max_ms": f"{self.worst_ms:.2f}",
            "gc_pause_total_ms": f"{self.total_ms:.2f}",
            "gc_pauses_over_50ms": self.over_50ms,
            "gc_frozen_objects": gc.get_freeze_count(),
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


class Reclaimer:
    """:func:`reclaim` every ``period`` seconds on the node's loop."""

    def __init__(self, pauses: Pauses, period: float = RECLAIM_SECONDS) -> None:
        self.pauses = pauses
        self.period = period
        self._handle: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = loop.call_later(self.period, self._run, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        reclaim(self.pauses)
        self.start(loop)
