"""router/collector.py: what survives a full collection is frozen, so a
later full collection walks only what came since; a connection's objects,
in each state opened here, leave the frozen generation when it closes
(freed by their reference counts: freezing them leaks nothing), read from
a real node's INFO ``# Collector``; and a cycle that became garbage while
frozen is freed by the periodic reclaim, in this process, walked only when
a forked child found such a cycle (the child touches none of the process's
descriptors), and a child that outlives its timeout is killed."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import resource
import socket
import time
import weakref

import pytest
import redis

from router.collector import Pauses, Reclaimer, reclaim
from tests.procs import bloomcast_node, connect

N = 4000


def frozen(r: redis.Redis) -> tuple[int, int]:
    """(gc_frozen_objects, connected_clients) from INFO."""
    collector, clients = r.info("collector"), r.info("clients")
    return int(collector["gc_frozen_objects"]), int(clients["connected_clients"])


# (request bytes, bytes of reply to wait for): a client in each state a
# connection can rest in
STATES = [
    (b"*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$2\r\nb%d\r\n", b":2\r\n"),
    (b"*3\r\n$10\r\nPSUBSCRIBE\r\n$2\r\na*\r\n$3\r\np%d*\r\n", b":2\r\n"),
    (b"*1\r\n$5\r\nMULTI\r\n*3\r\n$7\r\nPUBLISH\r\n$1\r\na\r\n$2\r\nm%d\r\n", b"QUEUED\r\n"),
    (b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*2\r\n$10\r\nSSUBSCRIBE\r\n$2\r\ns%d\r\n", b":1\r\n"),
    (b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$3\r\nOFF\r\n*2\r\n$4\r\nPING\r\n$1\r\n%d\r\n", b""),
    (b"*2\r\n$4\r\nECHO\r\n$1\r\n%d\r\n*3\r\n$7\r\nPUBLISH\r\n$5\r\nhalf", b"\r\n"),
]


@pytest.fixture
def descriptors():
    """Room for N sockets here and N in the node (which inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * N + 1000
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}: raise it to run this")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_freezing_survivors_keeps_no_closed_connection(descriptors):
    with bloomcast_node() as port, redis.Redis(port=port) as info:
        # (a loaded machine makes some batches pass the slow log's 10 ms: its
        # entries, up to 128, would stay; they are not the connections')
        info.config_set("slowlog-log-slower-than", -1)
        time.sleep(0.2)
        base, _ = frozen(info)
        socks = []
        for i in range(N):
            s = connect(port)
            request, ends = STATES[i % len(STATES)]
            s.sendall(request.replace(b"%d", b"%d" % (i % 10)))
            data = b""
            while ends and not data.endswith(ends):
                chunk = s.recv(1 << 16)
                assert chunk, (i, data)  # closed by the node
                data += chunk
            socks.append(s)
        grown, clients = frozen(info)
        assert clients == N + 1
        assert grown > base + 3 * N  # full collections froze the connections' objects
        for s in socks:
            s.close()
        # a gone client's subscriptions are dropped under the loop turn's
        # budget (router/pubsub.py), so its last objects go a few turns later
        deadline = time.monotonic() + 30
        after, clients = frozen(info)
        while (clients > 1 or after >= base + 200) and time.monotonic() < deadline:
            time.sleep(0.05)
            after, clients = frozen(info)
        assert clients == 1
        # what stays: one-time objects (a CommandStat per command first run, ...)
        assert after < base + 200, (base, grown, after)


class Held:
    """A stand-in for a long-lived object in a cycle (weak-referenceable)."""

    def __init__(self) -> None:
        self.other: Held | None = None


def test_reclaim_frees_a_cycle_that_became_garbage_while_frozen():
    a, b = Held(), Held()
    a.other, b.other = b, a  # alive when frozen: a task in flight, say
    gone = weakref.ref(a)
    gc.freeze()
    try:
        del a, b  # now garbage, but frozen: no collection sees it
        gc.collect()
        assert gone() is not None
        pauses = Pauses()
        assert reclaim(pauses) >= 2
        assert gone() is None
        assert (pauses.reclaims, pauses.reclaimed >= 2) == (1, True)
    finally:
        gc.unfreeze()


class Telling:
    """In a cycle, frozen: when finalized, writes its process id to a socket
    (a finalizer that would touch the node's descriptors)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.other: Telling | None = None

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.send(b"%d\n" % os.getpid())


def run_reclaimer(reclaimer: Reclaimer, pauses: Pauses, checks: int = 1) -> None:
    """Run ``reclaimer`` on a fresh loop until ``checks`` looks are done."""

    async def main() -> None:
        reclaimer.start(asyncio.get_running_loop())
        deadline = time.monotonic() + 60
        while pauses.checks < checks and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        reclaimer.stop()

    asyncio.run(main())


def test_reclaimer_walks_only_when_a_frozen_object_died_and_the_child_touches_no_descriptor():
    ours, theirs = socket.socketpair()
    pauses = Pauses()
    a, b = Telling(ours), Telling(ours)
    a.other, b.other = b, a
    gone = weakref.ref(a)
    gc.collect()
    gc.freeze()
    try:
        # nothing frozen died: the child looks, the node does not walk
        run_reclaimer(Reclaimer(pauses, period=0.01), pauses)
        assert (pauses.checks, pauses.frozen_garbage, pauses.reclaims) == (1, 0, 0)
        assert gone() is not None
        del a, b  # now frozen garbage, with finalizers
        run_reclaimer(Reclaimer(pauses, period=0.01), pauses, checks=2)
        assert pauses.checks == 2 and pauses.check_failures == 0
        assert pauses.frozen_garbage >= 2 and pauses.reclaims == 1
        assert gone() is None
        theirs.settimeout(5)
        told = b""
        while told.count(b"\n") < 2:
            told += theirs.recv(100)
        # the finalizers ran in this process only: the child's copy of the
        # socket was closed before it collected
        assert told == b"%d\n%d\n" % (os.getpid(), os.getpid())
    finally:
        gc.unfreeze()
        ours.close()
        theirs.close()


def test_a_check_that_outlives_its_timeout_is_killed_and_the_node_walks():
    pauses = Pauses()
    gc.collect()
    gc.freeze()
    try:
        before = set(os.listdir("/proc/self/fd"))
        run_reclaimer(Reclaimer(pauses, period=0.01, check_timeout=0), pauses)
        assert (pauses.checks, pauses.check_failures, pauses.reclaims) == (1, 1, 1)
        assert set(os.listdir("/proc/self/fd")) <= before  # its pipe closed
    finally:
        gc.unfreeze()


def test_a_fork_that_fails_is_a_failed_check_and_the_node_walks(monkeypatch):
    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    pauses = Pauses()
    before = set(os.listdir("/proc/self/fd"))
    gc.collect()
    gc.freeze()
    try:
        # two rounds: the failed check is rescheduled like any other
        run_reclaimer(Reclaimer(pauses, period=0.01), pauses, checks=2)
        assert (pauses.checks, pauses.check_failures, pauses.reclaims) == (2, 2, 2)
        assert set(os.listdir("/proc/self/fd")) <= before  # the pipe's two ends closed
    finally:
        gc.unfreeze()
