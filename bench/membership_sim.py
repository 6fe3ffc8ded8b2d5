"""Membership past one machine: N nodes' real sans-IO :class:`Membership` in
virtual time, no sockets.

    uv run python -m bench.membership_sim [--nodes 10 50 100 1000] [--write]

Each simulated node runs the real ``cluster_bus.membership.Membership`` (SWIM
probes, indirect probes, suspicion, refutation, piggybacked dissemination).
The glue below does what ``cluster_bus.heartbeat.Heartbeats`` does on the
wire: PING the period's target, PROBE_REQ the helpers, answer PING with PONG,
relay PROBE_ACK, broadcast FAIL, refute a FAIL about oneself, and while changes
are queued, gossip rounds (unsolicited PONGs to a few random peers). Every message is
encoded with the real codec (``cluster_bus.codec.encode``) to count its bytes.
Messages arrive after a random delay (``latency_ms`` 0.2..2 ms); a killed or
partitioned node's messages are dropped. Node ticks have random phases.

Measured per N (the cluster starts converged: everyone knows everyone):
- idle: messages and bytes sent per node per second (the wire's TCP payload),
  and suspicions raised (a quiet cluster must raise none);
- detection: kill one node, time until every live node marks it FAIL;
- missed delta: one node announces new filters and a chosen peer does not get
  the delta; periods until that peer learns the new epoch (from gossip or the
  node's own heartbeat), which is when ``FilterSync.on_gossip`` asks for the
  filter. The bound the issue asks for is O(log N) periods;
- partition and heal: two halves cut for longer than the node timeout, then
  healed; time until every node sees every other alive again.

Today's all-pairs design (before this change: every node PINGs every peer
each period and answers every PING, 8 gossip entries of 44 bytes per
heartbeat) is deterministic, so it is computed from its rules rather than
simulated: 2 (N - 1) messages per node per period; detection node_timeout
plus about one period (failure reports ride on every heartbeat); a missed
delta is seen at the node's next heartbeat, one period.

Nothing here asserts a speed; ``--write`` replaces the ``## membership
simulation`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.results import update_markdown
from cluster_bus.awareness import Awareness
from cluster_bus.codec import encode
from cluster_bus.dissemination import Broadcasts
from cluster_bus.frames import Fail, Message, NodeFlags, Ping, Pong, ProbeAck, ProbeReq
from cluster_bus.membership import Membership
from cluster_bus.nodes import NodeRecord

HOST = "10.0.0.1"
GOSSIP = -1  # the destination of a gossip-round event
SIM_PLOT = "membership_sim_vs_n.png"


def node_id(i: int) -> str:
    return f"{i + 1:040x}"


@dataclass
class SimNode:
    index: int
    ms: Membership
    phase_ms: int
    sent_msgs: int = 0
    sent_bytes: int = 0
    sent_heartbeats: int = 0  # CpuSim: what encoding them costs
    sent_entries: int = 0  # gossip entries sent, likewise
    fails: int = 0  # suspicions whose timer ran out here (FAIL broadcast)


@dataclass
class Sim:
    """N nodes in virtual time. ``down``: nodes that neither send nor receive;
    ``side``: partition label per node (messages cross only equal labels)."""

    n: int
    node_timeout_ms: int = 15000
    period_ms: int = 1000
    seed: int = 1
    latency_ms: tuple[float, float] = (0.2, 2.0)
    now: float = 0.0
    nodes: list[SimNode] = field(default_factory=list)
    down: set[int] = field(default_factory=set)
    side: dict[int, int] = field(default_factory=dict)
    _queue: list[tuple[float, int, int, int, Message | None]] = field(default_factory=list)
    _seq: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.index = {node_id(i): i for i in range(self.n)}
        for i in range(self.n):
            ms = Membership(
                node_id(i),
                HOST,
                7000,
                17000 + i,
                self.node_timeout_ms,
                random.Random(self.seed * 100_003 + i),
                period_ms=self.period_ms,
            )
            ms.announce_filters(1, 1000 + i, 2000 + i)
            for j in range(self.n):
                if j != i:
                    rec = ms.learn(node_id(j), HOST, 7000, 17000 + j, 0)
                    assert rec is not None
                    rec.connected = rec.heard = True
                    rec.filter_epoch, rec.channel_fp, rec.pattern_fp = 1, 1000 + j, 2000 + j
            ms.broadcasts = Broadcasts()  # converged: nothing left to spread
            self.nodes.append(SimNode(i, ms, self.rng.randrange(self.period_ms)))
        for node in self.nodes:
            self._seq += 1
            heapq.heappush(
                self._queue, (float(node.phase_ms), self._seq, node.index, node.index, None)
            )

    # -- the wire ------------------------------------------------------------------

    def reachable(self, a: int, b: int) -> bool:
        return a not in self.down and b not in self.down and self.side.get(a) == self.side.get(b)

    def send(self, src: int, dst_id: str, msg: Message) -> None:
        node = self.nodes[src]
        frame = encode(msg, src)
        node.sent_msgs += 1
        node.sent_bytes += len(frame)
        dst = self.index[dst_id]
        if not self.reachable(src, dst):
            return
        self._seq += 1
        at = self.now + self.rng.uniform(*self.latency_ms)
        heapq.heappush(self._queue, (at, self._seq, src, dst, msg))

    def heartbeat(self, cls: type[Ping] | type[Pong], src: int, to: str) -> Ping | Pong:
        ms = self.nodes[src].ms
        me = ms.myself
        return cls(
            me.node_id,
            HOST,
            7000,
            me.bus_port,
            me.channel_fp,
            me.pattern_fp,
            me.filter_epoch,
            0,
            False,
            0,
            ms.gossip_for(to),
            me.incarnation,
        )

    # -- what cluster_bus.heartbeat does ------------------------------------------------

    def tick(self, i: int) -> None:
        ms = self.nodes[i].ms
        now = int(self.now)
        step = ms.probe_tick(now)
        if step.ping is not None:
            self.send(i, step.ping, self.heartbeat(Ping, i, step.ping))
            ms.ping_sent(step.ping, now)
        for via, target in step.indirect:
            self.send(i, via, ProbeReq(target))
        for failed in step.failed:
            self.nodes[i].fails += 1
            inc = ms.peers[failed].incarnation
            for peer, rec in ms.peers.items():
                if peer != failed and not rec.flags & NodeFlags.FAIL:
                    self.send(i, peer, Fail(failed, inc))
        if ms.broadcasts:  # gossip rounds through the period, as Heartbeats does
            rounds = ms.gossip_rounds
            step_ms = self.period_ms / rounds
            for r in range(rounds):
                self._seq += 1
                heapq.heappush(self._queue, (self.now + r * step_ms, self._seq, i, GOSSIP, None))

    def gossip_round(self, i: int) -> None:
        ms = self.nodes[i].ms
        for peer in ms.gossip_targets():
            self.send(i, peer, self.heartbeat(Pong, i, peer))

    def deliver(self, src: int, dst: int, msg: Message) -> None:
        ms = self.nodes[dst].ms
        now = int(self.now)
        peer = node_id(src)
        if isinstance(msg, (Ping, Pong)):
            ms.heard_from(msg, now, pong=isinstance(msg, Pong))
            for requester in ms.probes.relays_answered(peer):
                self.send(dst, requester, ProbeAck(peer))
            ms.gossip_received(peer, msg.gossip, now)
            if isinstance(msg, Ping):
                self.send(dst, peer, self.heartbeat(Pong, dst, peer))
        elif isinstance(msg, ProbeReq):
            ms.probes.relay_requested(msg.node_id, peer, now)
            self.send(dst, msg.node_id, self.heartbeat(Ping, dst, msg.node_id))
            ms.ping_sent(msg.node_id, now)
        elif isinstance(msg, ProbeAck):
            ms.probe_acked(msg.node_id, now)
        elif isinstance(msg, Fail):
            if msg.node_id == ms.my_id:
                ms.refute(msg.incarnation)
            else:
                ms.fail_received(msg.node_id, msg.incarnation, now)

    def run_until(
        self, t_end: float, stop: Callable[[], bool] | None = None, check_ms: float = 10
    ) -> bool:
        """Advance virtual time to ``t_end`` ms; True if ``stop`` became true first
        (evaluated every ``check_ms`` of virtual time: results are that precise).
        One heap holds message arrivals, node ticks (``msg`` None) and gossip
        rounds (``msg`` None, destination ``GOSSIP``)."""
        queue = self._queue
        next_check = self.now
        while queue and queue[0][0] <= t_end:
            at, _, src, dst, msg = heapq.heappop(queue)
            self.now = at
            self._event(at, src, dst, msg)
            if stop is not None and self.now >= next_check:
                if stop():
                    return True
                next_check = self.now + check_ms
        self.now = t_end
        return False

    def _event(self, at: float, src: int, dst: int, msg: Message | None) -> None:
        """One event of the heap, run at once (no CPU: :class:`CpuSim` queues it)."""
        if msg is None and dst == GOSSIP:
            if src not in self.down:
                self.gossip_round(src)
        elif msg is None:
            self._seq += 1
            heapq.heappush(self._queue, (at + self.period_ms, self._seq, src, src, None))
            if src not in self.down:
                self.tick(src)
        elif self.reachable(src, dst):
            self.deliver(src, dst, msg)

    # -- views ----------------------------------------------------------------------

    def live(self) -> list[SimNode]:
        return [n for n in self.nodes if n.index not in self.down]

    def all_see(self, target: int, pred: Callable[[int], bool]) -> bool:
        tid = node_id(target)
        return all(pred(int(n.ms.peers[tid].flags)) for n in self.live() if n.index != target)


@dataclass
class SimResult:
    n: int
    period_ms: int
    node_timeout_ms: int
    idle_msgs_per_node_s: float
    idle_bytes_per_node_s: float
    idle_suspicions: int
    detect_s: float
    first_suspicion_s: float
    missed_delta_periods: list[float]
    heal_s: float
    allpairs_msgs_per_node_s: float
    allpairs_bytes_per_node_s: float
    allpairs_detect_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def allpairs_heartbeat_bytes(n: int, host: str = HOST) -> int:
    """A heartbeat frame of the all-pairs design: 14-byte header, 61-byte fixed
    body + host, min(8, N - 2) gossip entries of 35 bytes + host."""
    return 14 + 61 + len(host) + min(8, max(0, n - 2)) * (35 + len(host))


def simulate(
    n: int, node_timeout_ms: int = 15000, period_ms: int = 1000, seed: int = 1
) -> SimResult:
    sim = Sim(n, node_timeout_ms, period_ms, seed)
    # idle: warm up one round, then measure
    sim.run_until(2 * period_ms)
    for node in sim.nodes:
        node.sent_msgs = node.sent_bytes = 0
    window_ms = 30 * period_ms
    t0 = sim.now
    suspicions0 = sum(nd.ms.suspicions for nd in sim.nodes)
    sim.run_until(t0 + window_ms)
    secs = window_ms / 1000
    msgs = sum(nd.sent_msgs for nd in sim.nodes) / n / secs
    nbytes = sum(nd.sent_bytes for nd in sim.nodes) / n / secs
    suspicions = sum(nd.ms.suspicions for nd in sim.nodes) - suspicions0
    # missed delta: node c announces a new epoch and no delta is delivered at
    # all (the simulation has none); observer o must learn it from gossip or
    # from c's own heartbeat
    periods = []
    for trial in range(5):
        c, o = (2 * trial) % n, (2 * trial + 1) % n
        epoch = 2 + trial
        sim.nodes[c].ms.announce_filters(epoch, 5000 + trial, 2000 + c)
        t0 = sim.now
        rec = sim.nodes[o].ms.peers[node_id(c)]

        def learned(rec: NodeRecord = rec, epoch: int = epoch) -> bool:
            return rec.filter_epoch >= epoch

        sim.run_until(t0 + 200 * period_ms, learned)
        periods.append(round((sim.now - t0) / period_ms, 2))
    # detection: kill the last node
    victim = n - 1
    sim.down.add(victim)
    t0 = sim.now
    sim.run_until(
        t0 + 10 * node_timeout_ms,
        lambda: any(nd.ms.peers[node_id(victim)].failing for nd in sim.live()),
    )
    first = (sim.now - t0) / 1000
    sim.run_until(
        t0 + 10 * node_timeout_ms,
        lambda: sim.all_see(victim, lambda f: bool(f & NodeFlags.FAIL)),
    )
    detect = (sim.now - t0) / 1000
    sim.down.discard(victim)
    sim.run_until(sim.now + 10 * node_timeout_ms, lambda: sim.all_see(victim, lambda f: f == 0))
    # partition for twice the node timeout, then heal
    for i in range(n):
        sim.side[i] = i % 2
    sim.run_until(sim.now + 2 * node_timeout_ms)
    sim.side.clear()
    t0 = sim.now
    pending = list(sim.nodes)

    def healed() -> bool:  # every node sees every other alive (rechecks only the rest)
        pending[:] = [nd for nd in pending if any(r.failing for r in nd.ms.peers.values())]
        return not pending

    sim.run_until(t0 + 20 * node_timeout_ms, healed, check_ms=100)
    heal = (sim.now - t0) / 1000
    hb = allpairs_heartbeat_bytes(n)
    per_s = 1000 / period_ms
    return SimResult(
        n=n,
        period_ms=period_ms,
        node_timeout_ms=node_timeout_ms,
        idle_msgs_per_node_s=round(msgs, 2),
        idle_bytes_per_node_s=round(nbytes, 1),
        idle_suspicions=suspicions,
        detect_s=round(detect, 2),
        first_suspicion_s=round(first, 2),
        missed_delta_periods=periods,
        heal_s=round(heal, 2),
        allpairs_msgs_per_node_s=2 * (n - 1) * per_s,
        allpairs_bytes_per_node_s=2 * (n - 1) * hb * per_s,
        allpairs_detect_s=(node_timeout_ms + period_ms) / 1000,
    )


# -- a slow CPU: timers that fire late --------------------------------------------------

DONE = -2  # the destination of a CPU-completion event
WAKE = -3  # a starved node may run again


@dataclass(frozen=True)
class CpuCosts:
    """What each event costs a node's CPU (µs), before the slow factor. Set so
    that an idle node uses about what ``bench scale`` measures of its Python
    work (~0.6 ms per second at N = 100: a tick, a PING sent, a PONG and a
    PING received, a PONG sent), a heartbeat's gossip entries adding to it
    as the decoder's and encoder's per-entry work does."""

    receive: float = 40.0  # any frame read and dispatched
    heartbeat: float = 100.0  # more for a MEET / PING / PONG (decode, membership, filters)
    send: float = 30.0  # any frame encoded and written
    heartbeat_send: float = 50.0  # more for a heartbeat (its gossip section chosen)
    entry_in: float = 6.0  # per gossip entry decoded and applied
    entry_out: float = 3.0  # per gossip entry encoded
    tick: float = 60.0  # the periodic tick, plus per_peer per known node
    per_peer: float = 0.3


@dataclass
class CpuSim(Sim):
    """:class:`Sim` on a machine of ``cores`` CPUs: each node is one thread
    (one event loop) that runs one event at a time, for what the event costs
    (:class:`CpuCosts`) times ``slow`` while it is slow; a node with work
    waits for a free core, round robin among the waiting ones. So a starved
    node's timers fire late, its answers go out late, and its own work adds
    to everyone's wait: the loop in which an overload turns into suspicions,
    gossip and more overload. ``lifeguard`` False: no local health awareness
    (the score stays 0) and no loop lag fed to membership, the design before
    issue 40; True: the bus's rules (the lag of each tick fed in)."""

    cores: int = 2
    lifeguard: bool = True
    costs: CpuCosts = field(default_factory=CpuCosts)
    slow: dict[int, float] = field(default_factory=dict)  # node -> factor (1: full speed)
    #: node -> k: the node gets 1/k of the time it needs (a CPU quota, a low
    #: priority): after each event it waits (k - 1) times that event's cost
    #: before it may run again, without holding a core meanwhile
    starved: dict[int, float] = field(default_factory=dict)
    max_lag_ms: float = 0.0
    busy_ms: float = 0.0  # CPU time used, all nodes

    def __post_init__(self) -> None:
        super().__post_init__()
        from collections import deque

        self._inbox: list[deque[tuple[Any, ...]]] = [deque() for _ in range(self.n)]
        self._runq: deque[int] = deque()
        self._busy: set[int] = set()  # running, waiting for a core or starved
        self._wake: dict[int, float] = {}  # a starved node's next turn
        self._free = self.cores
        if not self.lifeguard:
            for node in self.nodes:
                node.ms.awareness = Awareness(1)  # the score can never rise

    def _arrive(self, i: int, item: tuple[Any, ...]) -> None:
        if i in self.down:
            return
        self._inbox[i].append(item)
        if i not in self._busy:
            self._busy.add(i)
            self._runq.append(i)
            self._dispatch()

    def _dispatch(self) -> None:
        while self._free and self._runq:
            i = self._runq.popleft()
            item = self._inbox[i].popleft()
            self._free -= 1
            node = self.nodes[i]
            sent = node.sent_msgs, node.sent_heartbeats, node.sent_entries
            self._run_item(i, item)  # effects at the start; the core is held for the cost
            cost = self._cost(
                item,
                node.sent_msgs - sent[0],
                node.sent_heartbeats - sent[1],
                node.sent_entries - sent[2],
            )
            cost *= self.slow.get(i, 1.0) / 1000  # µs -> ms
            self.busy_ms += cost
            self._seq += 1
            heapq.heappush(self._queue, (self.now + cost, self._seq, i, DONE, None))
            share = self.starved.get(i)
            if share:  # its next turn comes (k - 1) costs after this one ends
                self._wake[i] = self.now + cost * share

    def _done(self, i: int) -> None:
        self._free += 1
        wake = self._wake.pop(i, None)
        if wake is not None and wake > self.now and i not in self.down:
            self._seq += 1
            heapq.heappush(self._queue, (wake, self._seq, i, WAKE, None))
        elif self._inbox[i] and i not in self.down:
            self._runq.append(i)
        else:
            self._busy.discard(i)
            self._inbox[i].clear()
        self._dispatch()

    def _woken(self, i: int) -> None:
        if self._inbox[i] and i not in self.down:
            self._runq.append(i)
            self._dispatch()
        else:
            self._busy.discard(i)

    def _cost(self, item: tuple[Any, ...], sent: int, heartbeats: int, entries: int) -> float:
        c = self.costs
        kind = item[0]
        cost = sent * c.send + heartbeats * c.heartbeat_send + entries * c.entry_out
        if kind == "tick":
            cost += c.tick + c.per_peer * self.n
        elif kind == "msg":
            msg = item[2]
            cost += c.receive
            if isinstance(msg, (Ping, Pong)):
                cost += c.heartbeat + c.entry_in * len(msg.gossip)
        return cost

    def _run_item(self, i: int, item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "tick":
            lag = self.now - item[1]
            self.max_lag_ms = max(self.max_lag_ms, lag)
            if self.lifeguard:
                self.nodes[i].ms.loop_lag(int(lag), int(self.now))
            self.tick(i)
            self._seq += 1  # the next tick: a period after this one ran (call_later)
            at = self.now + self.period_ms
            heapq.heappush(self._queue, (at, self._seq, i, i, None))
        elif kind == "gossip":
            self.gossip_round(i)
        else:
            self.deliver(item[1], i, item[2])

    def send(self, src: int, dst_id: str, msg: Message) -> None:
        if isinstance(msg, (Ping, Pong)):
            node = self.nodes[src]
            node.sent_heartbeats += 1
            node.sent_entries += len(msg.gossip)
        super().send(src, dst_id, msg)

    def _event(self, at: float, src: int, dst: int, msg: Message | None) -> None:
        """Work arrives in a node's inbox; CPU completions and wake-ups free it."""
        if dst == DONE:
            self._done(src)
        elif dst == WAKE:
            self._woken(src)
        elif msg is None and dst == GOSSIP:
            self._arrive(src, ("gossip", at))
        elif msg is None:
            self._arrive(src, ("tick", at))
        elif self.reachable(src, dst):
            self._arrive(dst, ("msg", src, msg))


@dataclass
class SlowCpuResult:
    n: int
    lifeguard: bool
    slow_nodes: int  # how many nodes were slow (n: the whole machine)
    starved: bool  # slow: starved of CPU time, not a slower CPU
    slow_factor: float
    slow_s: float
    suspicions: int  # every one false: no node stopped or died
    healthy_suspected: int  # suspicions of nodes that were never slow
    fails: int  # nodes declared FAIL by a timer (false too)
    refutations: int
    msgs_per_node_s: float  # during the slow phase
    max_lag_s: float
    quiet_s: float | None  # after the slow phase: no PFAIL / FAIL anywhere, no event waiting

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def simulate_slow_cpu(
    n: int,
    *,
    lifeguard: bool,
    slow_nodes: int | None = None,
    starve: bool = False,
    slow_factor: float = 30.0,
    slow_s: float = 60.0,
    node_timeout_ms: int = 15000,
    period_ms: int = 1000,
    cores: int = 2,
    seed: int = 1,
) -> SlowCpuResult:
    """A converged cluster of ``n`` nodes on ``cores`` CPUs; for ``slow_s``
    the CPU of ``slow_nodes`` of them (default: all, the whole machine) runs
    ``slow_factor`` times slower, or with ``starve`` those nodes get only
    1/``slow_factor`` of the time they need (CPU hogs around them, a quota);
    then full speed again until quiet (at most 20 node timeouts)."""
    sim = CpuSim(n, node_timeout_ms, period_ms, seed, cores=cores, lifeguard=lifeguard)
    slow = list(range(n)) if slow_nodes is None else list(range(n - slow_nodes, n))
    sim.run_until(3 * period_ms)
    base = _counts(sim)
    msgs0 = sum(nd.sent_msgs for nd in sim.nodes)
    if starve:
        sim.starved = dict.fromkeys(slow, slow_factor - 1)
    else:
        sim.slow = dict.fromkeys(slow, slow_factor)
    t0 = sim.now
    healthy = set(range(n)) - set(slow)
    suspected: set[tuple[int, str]] = set()

    def watch() -> bool:
        for nd in sim.nodes:
            for rec in nd.ms.peers.values():
                if rec.failing:
                    suspected.add((nd.index, rec.node_id))
        return False

    sim.run_until(t0 + slow_s * 1000, watch, check_ms=100)
    msgs = (sum(nd.sent_msgs for nd in sim.nodes) - msgs0) / n / slow_s
    sim.slow, sim.starved = {}, {}
    t1 = sim.now

    def quiet() -> bool:
        watch()
        return not any(sim._inbox) and not any(
            r.failing for nd in sim.nodes for r in nd.ms.peers.values()
        )

    done = sim.run_until(t1 + 20 * node_timeout_ms, quiet, check_ms=100)
    after = _counts(sim)
    ids = {node_id(i) for i in healthy}
    return SlowCpuResult(
        n=n,
        lifeguard=lifeguard,
        slow_nodes=len(slow),
        starved=starve,
        slow_factor=slow_factor,
        slow_s=slow_s,
        suspicions=after[0] - base[0],
        healthy_suspected=len({target for _, target in suspected if target in ids}),
        fails=after[1] - base[1],
        refutations=after[2] - base[2],
        msgs_per_node_s=round(msgs, 1),
        max_lag_s=round(sim.max_lag_ms / 1000, 1),
        quiet_s=round((sim.now - t1) / 1000, 1) if done else None,
    )


def _counts(sim: Sim) -> tuple[int, int, int]:
    return (
        sum(nd.ms.suspicions for nd in sim.nodes),
        sum(nd.fails for nd in sim.nodes),
        sum(nd.ms.refutations for nd in sim.nodes),
    )


def report(results: list[SimResult]) -> str:
    lines = [
        "## membership simulation",
        "",
        "`uv run python -m bench.membership_sim --nodes "
        + " ".join(str(r.n) for r in results)
        + " --write`: the real sans-IO `Membership` of every node in virtual time "
        "(bench/membership_sim.py says what is simulated), node timeout "
        f"{results[0].node_timeout_ms} ms, period {results[0].period_ms} ms. The all-pairs "
        "columns are the design before issue 17, from its rules.",
        "",
        "| N | msgs/s per node (SWIM / all-pairs) | bytes/s per node (SWIM / all-pairs) "
        "| idle suspicions | detection s (SWIM / all-pairs) | missed delta seen after (periods) "
        "| partition healed after s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.n} | {r.idle_msgs_per_node_s:g} / {r.allpairs_msgs_per_node_s:g} "
            f"| {r.idle_bytes_per_node_s:,.0f} / {r.allpairs_bytes_per_node_s:,.0f} "
            f"| {r.idle_suspicions} | {r.detect_s:g} / {r.allpairs_detect_s:g} "
            f"| {', '.join(f'{p:g}' for p in r.missed_delta_periods)} | {r.heal_s:g} |"
        )
    lines += [
        "",
        "Reading it: a node's idle traffic is one PING and one PONG per period whatever N "
        "(the random gossip entries make the size), where the all-pairs design sends "
        "2 (N - 1) heartbeats; detection stays at about the node timeout (probe periods "
        "count toward it); a filter change that reached nobody by delta is seen through "
        "gossip within a period or two (gossip rounds while changes are queued), and "
        "after a partition of two halves for twice the node timeout every node sees "
        "every other alive again within seconds (each side refutes, and the refutations "
        "ride on gossip rounds that include failed peers). The byte counts come from the "
        "real codec; the *scale* section measures the same quantity on real processes "
        "with kernel tcp_info (before this design, the issue measured 7,848 and 42,474 "
        "B/s per node at N = 10 and 50, what the all-pairs column computes).",
        "",
        f"![idle bytes per node vs N, simulated]({SIM_PLOT})",
    ]
    return "\n".join(lines) + "\n"


SLOW_SCENARIOS = (
    ("the whole machine's CPU 60x slower", None, False, 60.0),
    ("a fifth of the nodes get 1/3000 of the CPU they need", 5, True, 3000.0),
)


def slow_cpu_runs(nodes: list[int], slow_s: float = 60.0, seed: int = 1) -> list[SlowCpuResult]:
    """Every scenario of :data:`SLOW_SCENARIOS` at each N, without and with
    Lifeguard (the same seed: the same cluster, the same schedule)."""
    out = []
    for n in nodes:
        for _, fifth, starve, factor in SLOW_SCENARIOS:
            for lifeguard in (False, True):
                out.append(
                    simulate_slow_cpu(
                        n,
                        lifeguard=lifeguard,
                        slow_nodes=None if fifth is None else n // fifth,
                        starve=starve,
                        slow_factor=factor,
                        slow_s=slow_s,
                        seed=seed,
                    )
                )
    return out


def slow_cpu_report(results: list[SlowCpuResult]) -> str:
    """The ``## membership under a slow CPU`` section."""
    nodes = sorted({r.n for r in results})
    lines = [
        "## membership under a slow CPU",
        "",
        "`uv run python -m bench.membership_sim --slow-cpu --nodes "
        + " ".join(map(str, nodes))
        + " --write`: the simulation above on a machine of 2 cores (`CpuSim`: each node one "
        "event loop that runs one event at a time for what it costs, calibrated on an idle "
        "node's measured work; a node with work waits for a core), converged, then for "
        f"{results[0].slow_s:g} s its CPU is slow, then full speed again. Nobody stops or "
        "dies: every suspicion is false. *Before* is the design before issue 40 (no local "
        "health awareness, the loop's lag not read); *Lifeguard* is the bus's rules now "
        "(cluster_bus/awareness.py). Node timeout 15 s, period 1 s.",
        "",
        "| N | slow | design | suspicions | FAIL declared | refutations | healthy nodes "
        "suspected | msgs/s per node while slow | worst timer lag s | quiet after s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = {(fifth is None, starve): text for text, fifth, starve, _ in SLOW_SCENARIOS}
    for r in results:
        what = names.get((r.slow_nodes == r.n, r.starved), f"{r.slow_nodes} x{r.slow_factor:g}")
        quiet = "not within 20 node timeouts" if r.quiet_s is None else f"{r.quiet_s:g}"
        lines.append(
            f"| {r.n} | {what} | {'Lifeguard' if r.lifeguard else 'before'} | {r.suspicions} "
            f"| {r.fails} | {r.refutations} | {r.healthy_suspected} | {r.msgs_per_node_s:g} "
            f"| {r.max_lag_s:g} | {quiet} |"
        )
    lines += [
        "",
        "Reading it: with the whole CPU slow, every node's timers fire late and, before, "
        "each node read its own lateness as its peers' silence: probes expired unanswered, "
        "suspicions spread by gossip and each one's timer declared FAIL on many nodes, and "
        "the gossip rounds and FAIL broadcasts this caused were more work for a CPU that had "
        "none to spare (the storm). With Lifeguard the nodes see their own timers run late, "
        "doubt themselves, probe and gossip up to 8 times less, and count no late period "
        "against anyone: next to no suspicion, and less traffic than when idle. Starved "
        "nodes (the others at full speed) are suspected either way: they do not answer for "
        "longer than the node timeout, and that is true; before, the FAIL broadcasts and "
        "gossip about them piled up in the starved nodes' queues, so that after the "
        "starvation they took minutes to work through them and refute (at N = 200 the model "
        "was not quiet 20 node timeouts later: the storm outlived its cause); with "
        "Lifeguard they were quiet within seconds. No healthy node was suspected in any "
        "run. A model, not a measurement: the real processes' numbers are the *overload* "
        "section's. And the cliff the issue measured at 61/62 nodes was not this loop "
        "but a framing limit (a MEET above the handshake's 4096 bytes closed every link; "
        "`tests/cluster_bus/test_bus.py::"
        "test_a_large_meet_read_with_the_handshakes_last_frame_is_accepted`).",
    ]
    return "\n".join(lines) + "\n"


def plot(results: list[SimResult], path: Path) -> Path:
    """Idle bytes/s per node vs N (log-log), SWIM and all-pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r.n for r in results]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.plot(ns, [r.idle_bytes_per_node_s for r in results], marker="o", label="SWIM (bloomcast)")
    ax.plot(ns, [r.allpairs_bytes_per_node_s for r in results], marker="s", linestyle="--",
            label="all-pairs heartbeats (before)")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ns)
    ax.set_xticklabels([str(n) for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("nodes N")
    ax.set_ylabel("idle bus bytes/s sent per node")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    ax.set_title(
        f"Simulated idle cluster, node timeout {results[0].node_timeout_ms} ms "
        f"(bench/membership_sim.py)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_section(text: str, path: Path = Path("docs/benchmarks.md")) -> None:
    """Replace the section of ``path`` headed as ``text`` is (``## ...``)."""
    heading, _, body = text.partition("\n")
    update_markdown(path, {heading.removeprefix("## "): body})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.membership_sim", description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 50, 100, 1000])
    parser.add_argument("--node-timeout-ms", type=int, default=15000)
    parser.add_argument("--period-ms", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument(
        "--slow-cpu",
        action="store_true",
        help="the slow-CPU runs (a storm before Lifeguard and none after) instead",
    )
    args = parser.parse_args(argv)
    if args.slow_cpu:
        text = slow_cpu_report(slow_cpu_runs(args.nodes, seed=args.seed))
        print(text)
        if args.write:
            write_section(text)
        return 0
    results = [simulate(n, args.node_timeout_ms, args.period_ms, args.seed) for n in args.nodes]
    text = report(results)
    print(text)
    if args.write:
        write_section(text)
        plot(results, Path("docs") / SIM_PLOT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
