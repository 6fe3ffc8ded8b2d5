"""Chaos runs: a seeded randomized schedule of faults over five nodes in network
namespaces, numbered publishers and subscribers, and the checker's verdict
(:mod:`bloomcast.testing.chaos_check`). Shared by
tests/integration/test_chaos.py (a short seed in CI, long seeds marked
``long``) and ``bloomcast bench chaos``.

The faults (each real: processes, routes, sockets):

- ``kill``: kill -9 a node, restart it (a new node id) after a down time; its
  subscribers die with it and new ones subscribe on the new process;
- ``pause``: SIGSTOP / SIGCONT (a GC pause, a frozen VM), short or past the
  node timeout + forget time;
- ``partition``: the nodes split in two groups that cannot reach each other
  (blackhole routes in the nodes' namespaces: silence, no RST); ``isolate``
  is one node against the rest; clients in the hub still reach every node;
- ``one_way``: node i's packets to j are dropped (TCP between them stalls);
- ``stall``: i and j cannot reach each other (a two-way cut of one pair);
- ``reset``: every TCP connection between i and j reset (``ss -K``: RSTs).

A schedule (:func:`schedule`) draws fault after fault with random gaps,
kinds, nodes and durations (partitions 2-16 s), never more than
``concurrent`` at once and never two process faults on one node at once.
Publishers on nodes 0..2 publish ``p<k>:<n>`` on ``chaos:p<k>``; every node
has a channel subscriber (all three channels), a pattern subscriber
(``chaos:*``) and a watcher of ``__bloomcast__:loss``. After the last fault
heals, the run measures how long until every node has reconverged, keeps
publishing ``settle`` seconds, stops, drains and hands the record to the
checker.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bloomcast.testing.chaos_check import (
    ChaosRecord,
    ChaosVerdict,
    FaultSpan,
    Life,
    PublisherRecord,
    SubscriberRecord,
    check,
    converged,
    loss_note,
)
from bloomcast.testing.faults import NetnsCluster, in_netns
from bloomcast.testing.ledger import Publisher, Subscriber

LOSS_CHANNEL = "__bloomcast__:loss"
KINDS = ("kill", "pause", "partition", "isolate", "one_way", "stall", "reset")
#: relative weights of the kinds in a schedule
WEIGHTS = (2, 3, 3, 3, 2, 2, 2)
PUBLISHER_NODES = (0, 1, 2)


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: ``start`` and ``duration`` in seconds from the run's
    start; ``nodes`` as :class:`chaos_check.FaultSpan` names them."""

    kind: str
    start: float
    duration: float
    nodes: tuple[int, ...]
    others: tuple[int, ...] = ()

    @property
    def end(self) -> float:
        return self.start + self.duration

    def describe(self) -> str:
        who = ",".join(map(str, self.nodes))
        if self.others:
            who += " | " + ",".join(map(str, self.others))
        return f"{self.start:6.1f}s {self.kind:9s} {who} for {self.duration:.1f}s"


def schedule(
    seed: int, duration: float, nodes: int = 5, concurrent: int = 2, first: float = 3.0
) -> list[Fault]:
    """A seeded random fault schedule over ``duration`` seconds (see the module
    docstring); every fault ends by ``duration``."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = first
    while True:
        t += rng.uniform(0.5, 5.0)
        active = [f for f in faults if f.start <= t < f.end]
        while len(active) >= concurrent:
            t = min(f.end for f in active) + 0.1
            active = [f for f in faults if f.start <= t < f.end]
        kind = rng.choices(KINDS, WEIGHTS)[0]
        busy = {n for f in active if f.kind in ("kill", "pause") for n in f.nodes}
        free = [n for n in range(nodes) if n not in busy]
        if kind == "kill":
            length = rng.uniform(0.5, 4.0)
        elif kind == "pause":
            length = rng.uniform(0.5, 3.0) if rng.random() < 0.5 else rng.uniform(3.0, 16.0)
        elif kind == "reset":
            length = 0.0
        elif kind == "one_way":
            length = rng.uniform(2.0, 10.0)
        else:
            length = rng.uniform(2.0, 16.0)
        if t + length > duration:
            return faults
        if kind in ("kill", "pause"):
            if not free:
                continue
            faults.append(Fault(kind, t, length, (rng.choice(free),)))
        elif kind == "isolate":
            one = rng.randrange(nodes)
            rest = tuple(n for n in range(nodes) if n != one)
            faults.append(Fault("partition", t, length, (one,), rest))
        elif kind == "partition":
            shuffled = rng.sample(range(nodes), nodes)
            cut = rng.randint(1, nodes - 1)
            side, other = sorted(shuffled[:cut]), sorted(shuffled[cut:])
            faults.append(Fault(kind, t, length, tuple(side), tuple(other)))
        else:
            i, j = rng.sample(range(nodes), 2)
            faults.append(Fault(kind, t, length, (i, j)))


@dataclass
class ChaosSettings:
    """One run's knobs. ``node_timeout_ms`` 2000 makes every fault above a
    long one (past node timeout + the default forget time: 2 + 10 s)."""

    seed: int = 1
    duration: float = 60.0
    rate: float = 40.0  # PUBLISH/s per publisher
    node_timeout_ms: int = 2000
    extra_args: tuple[str, ...] = ()
    log_dir: Path | None = None
    faults: list[Fault] | None = None  # a fixed schedule instead of a seeded one
    progress: Callable[[str], None] | None = None
    #: write the whole record there (pickle) for a look after the run
    record_path: Path | None = None

    @property
    def settle(self) -> float:
        """Seconds of clear time a pair needs to heal: reconnect (dial backoff
        cap, node timeout / 2), refute FAIL, resync filters: 2 node timeouts
        plus the backoff cap and a margin."""
        nt = self.node_timeout_ms / 1000
        return 2 * nt + min(2.0, max(0.2, nt / 2)) + 2.0


@dataclass
class ChaosResult:
    record: ChaosRecord
    verdict: ChaosVerdict
    faults: list[Fault]
    log: list[str] = field(default_factory=list)


class ChaosRun:
    """Runs one schedule against a :class:`NetnsCluster` of five nodes."""

    def __init__(self, settings: ChaosSettings) -> None:
        self.s = settings
        self.nodes = 5
        args = (
            "--node-timeout-ms",
            str(settings.node_timeout_ms),
            "--subscribe-visibility-timeout",
            str(max(1000, settings.node_timeout_ms)),
            *settings.extra_args,
        )
        self.cluster = NetnsCluster(self.nodes, extra_args=list(args), log_dir=settings.log_dir)
        self.faults = (
            settings.faults
            if settings.faults is not None
            else schedule(settings.seed, settings.duration, self.nodes)
        )
        self.lives: dict[int, list[Life]] = {i: [] for i in range(self.nodes)}
        self.subs: list[tuple[int, int, Subscriber]] = []  # (node, life, subscriber)
        self.watchers: list[tuple[int, int, Subscriber]] = []
        self.publishers: list[tuple[int, Publisher]] = []
        self.spans: list[FaultSpan] = []
        self.log: list[str] = []
        self._cuts: Counter[tuple[int, int]] = Counter()
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []

    # -- helpers -----------------------------------------------------------------

    def _say(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        self.log.append(line)
        if self.s.progress is not None:
            self.s.progress(line)

    def _address(self, i: int) -> tuple[str, int]:
        return (self.cluster.addresses[i], self.cluster.ports[i])

    def _myid(self, i: int) -> str:
        def ask() -> str:
            with redis.Redis(
                host=self.cluster.addresses[i], port=self.cluster.ports[i], socket_timeout=2
            ) as r:
                return str(r.execute_command("CLUSTER", "MYID").decode())

        return in_netns(self.cluster.hub, ask)

    def _new_life(self, i: int, started: float) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                node_id = self._myid(i)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        life = len(self.lives[i])
        self.lives[i].append(Life(i, node_id, started))
        ns = self.cluster.hub
        addr = self._address(i)
        channels = tuple(f"chaos:p{k}" for k in PUBLISHER_NODES)
        g = f"{i}.{life}"
        watcher = Subscriber(f"loss{g}", addr, channels=(LOSS_CHANNEL,), netns=ns).start(30)
        chan = Subscriber(f"chan{g}", addr, channels=channels, netns=ns).start(30)
        pat = Subscriber(f"pat{g}", addr, patterns=("chaos:*",), netns=ns).start(30)
        with self._lock:
            self.watchers.append((i, life, watcher))
            self.subs += [(i, life, chan), (i, life, pat)]

    def _end_life(self, i: int, at: float) -> None:
        lives = self.lives[i]
        last = lives[-1]
        lives[-1] = Life(last.node, last.node_id, last.started, at)

    def _cut(self, pairs: list[tuple[int, int]], on: bool) -> None:
        with self._lock:
            for pair in pairs:
                self._cuts[pair] += 1 if on else -1
                want = self._cuts[pair] > 0
                if want != (pair in self.cluster.cuts):
                    self.cluster.one_way(*pair, cut=want)

    # -- faults ------------------------------------------------------------------

    def _apply(self, fault: Fault, t0: float) -> None:
        try:
            delay = t0 + fault.start - time.time()
            if delay > 0:
                time.sleep(delay)
            self._say(fault.describe())
            start = time.time()
            end = self._run_fault(fault)
            self.spans.append(FaultSpan(fault.kind, fault.nodes, start, end, fault.others))
        except BaseException as exc:  # reported by the run, never lost in a thread
            self._errors.append(exc)

    def _run_fault(self, fault: Fault) -> float:
        c = self.cluster
        if fault.kind == "kill":
            (i,) = fault.nodes
            proc = c.processes[i]
            assert proc is not None
            proc.kill()
            proc.wait(10)
            self._end_life(i, time.time())
            time.sleep(fault.duration)
            started = time.time()
            c.start_node(i)
            self._new_life(i, started)
            return time.time()
        if fault.kind == "pause":
            (i,) = fault.nodes
            proc = c.processes[i]
            assert proc is not None
            os.kill(proc.pid, signal.SIGSTOP)
            time.sleep(fault.duration)
            os.kill(proc.pid, signal.SIGCONT)
            return time.time()
        if fault.kind == "reset":
            i, j = fault.nodes
            c.reset_links(i, j)
            return time.time()
        if fault.kind == "partition":
            pairs = [(a, b) for a in fault.nodes for b in fault.others]
            pairs += [(b, a) for a, b in pairs]
        elif fault.kind == "one_way":
            pairs = [fault.nodes]  # type: ignore[list-item]
        else:  # stall
            i, j = fault.nodes
            pairs = [(i, j), (j, i)]
        self._cut(pairs, True)
        time.sleep(fault.duration)
        self._cut(pairs, False)
        return time.time()

    # -- the run -----------------------------------------------------------------

    def converged(self) -> bool:
        """Every node knows the four others, none failing or lost, filters held."""
        for i in range(self.nodes):
            try:
                info = self.cluster.cluster_info(i)
            except Exception:
                return False
            if not converged(info, self.nodes):
                return False
        return True

    def run(self) -> ChaosResult:
        c = self.cluster
        c.start(120)
        try:
            return self._run()
        finally:
            for _, _, sub in self.subs + self.watchers:
                sub.stop()
            for _, pub in self.publishers:
                pub.stop()
            c.stop()

    def _run(self) -> ChaosResult:
        c = self.cluster
        now = time.time()
        for i in range(self.nodes):
            self._new_life(i, now - 1)
        for k in PUBLISHER_NODES:
            pub = Publisher(
                self._address(k), f"chaos:p{k}", name=f"p{k}", rate=self.s.rate, netns=c.hub
            )
            self.publishers.append((k, pub.start()))
        time.sleep(1.0)
        t0 = time.time()
        self._say(f"seed {self.s.seed}: {len(self.faults)} faults over {self.s.duration:.0f} s")
        threads = [
            threading.Thread(target=self._apply, args=(f, t0), daemon=True) for f in self.faults
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if self._errors:
            raise self._errors[0]
        c.heal()
        last_heal = max([time.time(), *(s.end for s in self.spans)])
        reconverged = None
        deadline = time.monotonic() + 20 * self.s.node_timeout_ms / 1000 + 30
        while time.monotonic() < deadline:
            if self.converged():
                reconverged = time.time()
                break
            time.sleep(0.1)
        self._say(
            "reconverged "
            + ("never" if reconverged is None else f"after {reconverged - last_heal:.1f} s")
        )
        time.sleep(self.s.settle)
        end = time.time()
        for _, pub in self.publishers:
            pub.stop()
        self._drain()
        record = self._record(end, last_heal, reconverged)
        if self.s.record_path is not None:
            import pickle

            self.s.record_path.write_bytes(pickle.dumps(record))
        verdict = check(record)
        return ChaosResult(record, verdict, self.faults, self.log)

    def _drain(self, timeout: float = 20.0) -> None:
        last = {pub.name: pub.published for _, pub in self.publishers}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [s for _, _, s in self.subs if not s.closed]
            if all(all(n in set(s.numbers(p)) for p, n in last.items()) for s in live):
                return
            time.sleep(0.1)

    def _record(self, end: float, last_heal: float, reconverged: float | None) -> ChaosRecord:
        pubs = [PublisherRecord(pub.name, k, dict(pub.times)) for k, pub in self.publishers]
        subs = [
            SubscriberRecord(s.name, i, life, s.confirmed_at, s.closed_at, list(s.received))
            for i, life, s in self.subs
        ]
        notes = [
            loss_note(i, life, data)
            for i, life, watcher in self.watchers
            for _, data in list(watcher.other)
        ]
        lost_to_peers: dict[str, int] = {}
        for i in range(self.nodes):
            info: dict[str, Any] = self.cluster.cluster_info(i)
            lost_to_peers[self.lives[i][-1].node_id] = int(
                info.get("cluster_stats_publish_lost_to_peers", 0)
            )
        return ChaosRecord(
            lives=self.lives,
            publishers=pubs,
            subscribers=subs,
            notes=notes,
            faults=self.spans,
            end=end,
            settle=self.s.settle,
            last_heal=last_heal,
            reconverged=reconverged,
            lost_to_peers=lost_to_peers,
        )


def run_chaos(settings: ChaosSettings) -> ChaosResult:
    """One chaos run (needs root and ``ip``: :func:`faults.netns_unavailable`)."""
    return ChaosRun(settings).run()
