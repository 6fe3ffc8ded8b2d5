"""Overload runs (issue 40): a converged cluster of node processes on loopback
starved on purpose, numbered publishers and subscribers through it, and the
chaos checker's verdict (:mod:`bloomcast.testing.chaos_check`) on what they
recorded. Shared by tests/integration/test_overload.py (a short run in CI, N
= 100 marked ``long``) and ``bloomcast bench overload``.

The starvations (each real):

- ``pause``: SIGSTOP a fifth of the nodes (``paused``), SIGCONT them after
  ``fault_s`` (a frozen VM; a node starved past the node timeout);
- ``hog``: one busy loop per core, at the nodes' own priority, for
  ``fault_s`` (the machine overloaded).

Publishers run on nodes that are never paused; subscribers (channels, and a
watcher of ``__bloomcast__:loss``) on a spread of nodes, paused ones
included. After the starvation ends the run measures how long until every
node is converged again (knows every node, none suspected, failed or lost,
every filter held), keeps publishing ``settle`` seconds, drains, and hands
the record to the checker: every message delivered once and in order, or
counted lost on both sides, and none counted falsely. It also reads every
node's log for a node forgotten after FAIL: a node that was only slow must
never be (its stop is shorter than node timeout + ``--cluster-fail-forget-ms``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
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
from bloomcast.testing.ledger import Publisher, Subscriber
from bloomcast.testing.local_cluster import LocalCluster

LOSS_CHANNEL = "__bloomcast__:loss"
#: the log line of a node forgotten after standing in FAIL (cluster_bus.heartbeat)
FORGOTTEN = "forgotten (in FAIL for"


@dataclass
class OverloadSettings:
    """One run's knobs. ``paused`` nodes (default: the last fifth) are stopped
    for ``fault_s`` in a ``pause`` run."""

    nodes: int = 10
    fault: str = "pause"  # "pause" or "hog"
    fault_s: float = 5.0
    node_timeout_ms: int = 2000
    paused: tuple[int, ...] | None = None
    publishers: tuple[int, ...] = (0, 1)
    rate: float = 40.0  # PUBLISH/s per publisher
    subscribers: int = 6  # nodes with subscribers (paused ones among them)
    ready_timeout_s: float = 120.0
    #: how long after the starvation the cluster may take to converge again
    converge_timeout_s: float = 120.0
    extra_args: tuple[str, ...] = ()
    base_port: int | None = None
    progress: Callable[[str], None] | None = None

    @property
    def settle(self) -> float:
        """Clear seconds a pair needs to heal (as :class:`ChaosSettings`)."""
        nt = self.node_timeout_ms / 1000
        return 2 * nt + min(2.0, max(0.2, nt / 2)) + 2.0

    def stopped(self) -> tuple[int, ...]:
        if self.fault != "pause":
            return ()
        if self.paused is not None:
            return self.paused
        k = max(1, self.nodes // 5)
        return tuple(range(self.nodes - k, self.nodes))


@dataclass
class OverloadResult:
    ready_s: float
    #: seconds from the end of the starvation until every node was converged
    reconverge_s: float | None
    forgotten: int  # "forgotten" log lines: a node that was only slow, forgotten
    suspicions: int  # summed over the nodes, from the start of the starvation
    fails_sent: int  # FAIL messages sent, likewise
    verdict: ChaosVerdict
    log: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ready_s": round(self.ready_s, 1),
            "reconverge_s": None if self.reconverge_s is None else round(self.reconverge_s, 1),
            "forgotten": self.forgotten,
            "suspicions": self.suspicions,
            "fails_sent": self.fails_sent,
            "ledger": self.verdict.totals(),
            "clean": self.verdict.clean,
        }


class OverloadRun:
    def __init__(self, s: OverloadSettings) -> None:
        self.s = s
        self.logs = Path(tempfile.mkdtemp(prefix="bloomcast-overload-"))
        self.cluster = LocalCluster(
            s.nodes,
            base_port=s.base_port,
            extra_args=["--node-timeout-ms", str(s.node_timeout_ms), *s.extra_args],
            log_dir=self.logs,
        )
        n = s.nodes
        stopped = s.stopped()
        others = [i for i in range(n) if i not in stopped and i not in s.publishers]
        picked = list(s.publishers) + list(stopped[:2]) + others[:: max(1, len(others) // 4)]
        self.sub_nodes = sorted(set(picked))[: max(s.subscribers, len(s.publishers) + 1)]
        self.lives: dict[int, list[Life]] = {}
        self.subs: list[tuple[int, Subscriber]] = []
        self.watchers: list[tuple[int, Subscriber]] = []
        self.publishers: list[tuple[int, Publisher]] = []
        self.spans: list[FaultSpan] = []
        self.log: list[str] = []

    def _say(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        self.log.append(line)
        if self.s.progress is not None:
            self.s.progress(line)

    def _info(self, i: int) -> dict[str, str]:
        return self.cluster.cluster_info(i)

    def converged(self) -> bool:
        for i in range(self.s.nodes):
            try:
                info = self._info(i)
            except (redis.RedisError, OSError):
                return False
            if not converged(info, self.s.nodes):
                return False
        return True

    def _sum(self, key: str) -> int:
        total = 0
        for i in range(self.s.nodes):
            with contextlib.suppress(redis.RedisError, OSError, ValueError):
                total += int(self._info(i).get(key, 0))
        return total

    def run(self) -> OverloadResult:
        t0 = time.monotonic()
        for i in range(self.s.nodes):
            self.cluster.start_node(i)
        try:
            self.cluster.wait_ready(self.s.ready_timeout_s)
            ready = time.monotonic() - t0
            self._say(f"{self.s.nodes} nodes ready in {ready:.1f} s")
            return self._run(ready)
        finally:
            for _, sub in self.subs + self.watchers:
                sub.stop()
            for _, pub in self.publishers:
                pub.stop()
            self.cluster.stop()
            shutil.rmtree(self.logs, ignore_errors=True)

    def _subscribe(self) -> None:
        channels = tuple(f"overload:p{k}" for k in self.s.publishers)
        now = time.time()
        for i in range(self.s.nodes):
            self.lives[i] = [Life(i, self._myid(i), now - 1)]
        for i in self.sub_nodes:
            addr = (self.cluster.host, self.cluster.ports[i])
            watcher = Subscriber(f"loss{i}", addr, channels=(LOSS_CHANNEL,))
            self.watchers.append((i, watcher.start()))
            self.subs.append((i, Subscriber(f"chan{i}", addr, channels=channels).start()))

    def _myid(self, i: int) -> str:
        with self.cluster.client(i) as r:
            return str(r.execute_command("CLUSTER", "MYID").decode())

    def _run(self, ready: float) -> OverloadResult:
        s = self.s
        self._subscribe()
        for k in s.publishers:
            addr = (self.cluster.host, self.cluster.ports[k])
            pub = Publisher(addr, f"overload:p{k}", name=f"p{k}", rate=s.rate)
            self.publishers.append((k, pub.start()))
        time.sleep(max(2.0, s.node_timeout_ms / 1000))  # every filter change acked
        suspicions0 = self._sum("cluster_stats_suspicions")
        fails0 = self._sum("cluster_stats_messages_fail_sent")
        self._starve()
        end = time.time()
        self._say(f"{s.fault} of {s.fault_s:g} s over")
        reconverged = None
        deadline = time.monotonic() + s.converge_timeout_s
        while time.monotonic() < deadline:
            if self.converged():
                reconverged = time.time()
                break
            time.sleep(0.5)
        again = "never" if reconverged is None else f"after {reconverged - end:.1f} s"
        self._say(f"converged again {again}")
        suspicions = self._sum("cluster_stats_suspicions") - suspicions0
        fails = self._sum("cluster_stats_messages_fail_sent") - fails0
        time.sleep(s.settle)
        stop = time.time()
        for _, pub in self.publishers:
            pub.stop()
        self._drain()
        record = self._record(stop, end, reconverged)
        forgotten = sum(
            log.read_text(errors="replace").count(FORGOTTEN) for log in self.logs.glob("node-*.log")
        )
        return OverloadResult(
            ready,
            None if reconverged is None else reconverged - end,
            forgotten,
            suspicions,
            fails,
            check(record),
            self.log,
        )

    def _starve(self) -> None:
        s = self.s
        if s.fault == "pause":
            procs = [self.cluster.processes[i] for i in s.stopped()]
            begin = time.time()
            for proc in procs:
                assert proc is not None
                os.kill(proc.pid, signal.SIGSTOP)
            self._say(f"SIGSTOP nodes {list(s.stopped())}")
            try:
                time.sleep(s.fault_s)
            finally:
                for proc in procs:
                    assert proc is not None
                    os.kill(proc.pid, signal.SIGCONT)
            finish = time.time()
            self.spans += [FaultSpan("pause", (i,), begin, finish) for i in s.stopped()]
        elif s.fault == "hog":
            hogs = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count() or 1)
            ]
            self._say(f"{len(hogs)} busy loops")
            try:
                time.sleep(s.fault_s)
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait(10)
        else:
            raise ValueError(f"unknown starvation {s.fault!r}")

    def _drain(self, timeout: float = 30.0) -> None:
        last = {pub.name: pub.published for _, pub in self.publishers}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [sub for _, sub in self.subs if not sub.closed]
            if all(all(n in set(sub.numbers(p)) for p, n in last.items()) for sub in live):
                return
            time.sleep(0.1)

    def _record(self, end: float, last_heal: float, reconverged: float | None) -> ChaosRecord:
        pubs = [PublisherRecord(pub.name, k, dict(pub.times)) for k, pub in self.publishers]
        subs = [
            SubscriberRecord(sub.name, i, 0, sub.confirmed_at, sub.closed_at, list(sub.received))
            for i, sub in self.subs
        ]
        notes = [loss_note(i, 0, data) for i, watcher in self.watchers for _, data in watcher.other]
        key = "cluster_stats_publish_lost_to_peers"
        lost_to_peers = {
            self.lives[k][0].node_id: int(self._info(k).get(key, 0)) for k, _ in self.publishers
        }
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


def run_overload(settings: OverloadSettings) -> OverloadResult:
    """One overload run: start, starve, recover, check."""
    return OverloadRun(settings).run()
