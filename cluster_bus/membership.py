"""Cluster membership as pure state: known nodes, SWIM failure detection, gossip.

No sockets and no clock of its own: every method takes ``now_ms`` (milliseconds
since the Unix epoch), so the rules run in tests and in the virtual-time
simulation (``bench/membership_sim.py``) exactly as on the wire.

Failure detection is SWIM's (Das, Gupta, Motivala 2002) with its suspicion
mechanism (section 4.2), as hashicorp/memberlist does it. Each node's idle cost
is a constant number of messages per period whatever the cluster size N,
where Redis Cluster pings every peer at least once per half node timeout:

- Every protocol period (``period_ms``) this node probes ONE peer, the next in
  a shuffled round-robin order of its peers (SWIM section 4.3: a new order
  each round, so every peer is probed within 2N-1 periods). Any heartbeat
  from the peer after the PING acks the probe. FAIL peers stay in the order
  (SWIM drops them): the PING tells a node that comes back that it must
  refute, which is how the two sides of a healed partition find each other.
  A peer never heard from (known only from gossip, its link not up yet) is
  not probed: it is being met, not failing (Redis does not PFAIL a node in
  its handshake either); the nodes that met it probe it.
- Not acked one period later: ``INDIRECT_PROBES`` other peers are asked to
  probe it (PROBE_REQ); a PROBE_ACK from one of them acks it. A broken link
  between two nodes does not make them suspect each other.
- Still not acked one more period later: the peer is *suspected* (PFAIL) at
  its current incarnation, and the suspicion is gossiped; every node that
  learns it flags the peer PFAIL and starts its own suspicion timer.
- A suspicion that stands ``node_timeout_ms - 2 * period_ms`` (the two probe
  periods count toward the timeout, so a node silent for about node_timeout
  is failed, which is what Redis's cluster-node-timeout means) becomes FAIL;
  the node whose timer ran out broadcasts FAIL, and FAIL is gossiped too.
- Lifeguard's local health awareness (:mod:`cluster_bus.awareness`): a node
  that doubts itself (its probes went unanswered, it had to refute, its
  event loop ran late) multiplies by ``score + 1`` the periods between its
  probes and each stage of a probe, so its own slowness does not become its
  peers' failure. A protocol period whose timer fired late
  (:meth:`Membership.loop_lag`, fed by the bus) counts toward no probe, and
  the stall is added to every running suspicion (and FAIL-forget time): the
  process did not run, its peers may well have answered. The suspicion
  timeout itself is not multiplied (as in memberlist: a node whose only
  peer died would else take 8 node timeouts to fail it); Lifeguard's
  dynamic suspicion timeout needs the accuser's id in each suspicion, which
  our gossip entries do not carry.
- A node that hears it is suspected or failed *refutes*: it raises its
  incarnation and gossips itself alive. States order as SWIM's: alive(i) <
  suspect(i) < fail(i) < alive(i + 1). Unlike SWIM, FAIL is not final: a node
  that comes back (SIGCONT, healed partition) refutes it, as Redis clears
  FAIL on a master without slots that answers again.

Dissemination (:mod:`cluster_bus.dissemination`): every change of a node's
state or announced filters (filter epoch, CRC64s) rides on the next
heartbeats, fewest transmissions first, reaching every node in O(log N)
periods; every heartbeat also carries a few random entries (anti-entropy).
A newer filter epoch with a fingerprint unlike our copy asks for the filter
(:meth:`cluster_bus.filter_sync.FilterSync.on_gossip`).

Other rules (after Redis Cluster): a node that left (LEAVE) or was replaced
by a new node id at the same bus address is forgotten, its life over; one
that stood in FAIL for ``fail_forget_ms`` (0: never) is forgotten from the
cluster's view (CLUSTER NODES, the slot map) but kept as *lost*: it may be
cut off, not dead, so its address is redialled for as long as it is missed
(as Redis redials FAIL nodes it keeps in nodes.conf, and NATS its routes),
its forwarding session and routing row stay, and it counts in
``cluster_state``. Gossip about a forgotten node is ignored for
``FORGET_TTL_MS`` (Redis's CLUSTER FORGET blacklist is 60 s), but it may
speak for itself again at once; CLUSTER FORGET (``forget(..., banned=True)``)
ignores even the node's own heartbeats for that long and stops the redials.
A node replaced by a new id at its address is ignored the same way, for
``REPLACED_TTL_MS``: its life is over, but frames it queued before it died
can still arrive, late, on a link that was stalled or cut (TCP delivers an
orphaned socket's queued bytes when the path heals); read as its own
heartbeat, such a frame would bring the dead id back and, by the same
address rule, end the life of the node that replaced it, sessions and all.
``cluster_state`` is ``ok`` while this node reaches a majority of the nodes
it knows or has lost (itself included), so a node cut off from the rest for
good never says ``ok``.

A node is *verified* once this node dialled the bus address it announces
and completed a handshake there with its node id (``dialled``); only
verified nodes serve slots (CLUSTER SLOTS / SHARDS), so an unauthenticated
bus peer announcing any address takes none (Redis gives a joining node
none). Addresses being met (``--join`` seeds, CLUSTER MEET) that never
answered show as ``handshake`` nodes, as in Redis.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from cluster_bus.awareness import Awareness
from cluster_bus.dissemination import Broadcasts
from cluster_bus.frames import GossipEntry, Heartbeat, NodeFlags
from cluster_bus.nodes import SUSPECT_FLAGS, LostNode, NodeRecord, rank_of
from cluster_bus.probes import Probe, ProbeSchedule, ProbeStep

FORGET_TTL_MS = 60_000
#: how long a node id replaced by a new id at its address is refused, even
#: from its own (late) frames: longer than a kernel retransmits an orphaned
#: socket's queued bytes (``tcp_orphan_retries``: about 100 s at most)
REPLACED_TTL_MS = 600_000
#: forgotten ids kept before the expired ones are swept out
MAX_FORGOTTEN = 1024
#: peers asked to probe a node that did not answer (SWIM's k)
INDIRECT_PROBES = 3
#: state changes piggybacked per heartbeat, then random entries. Idle, nothing
#: is queued and a heartbeat carries only the random ones. memberlist stops at
#: a 1400-byte UDP datagram (~20 entries); on TCP the bound is ours: 128
#: entries (~8 kB) let a mass change (a healed partition, where every node
#: refutes) converge in tens of periods at N = 1000 instead of hundreds
#: (bench/membership_sim.py)
UPDATES_PER_MESSAGE = 128
RANDOM_ENTRIES = 2
#: memberlist's GossipNodes / GossipInterval: while changes are queued, this
#: many random peers get an unsolicited PONG carrying them, this many times per period
GOSSIP_FANOUT = 3
GOSSIP_ROUNDS_PER_PERIOD = 5
#: lost nodes kept (and redialled) at most: the oldest is dropped first
MAX_LOST = 1024

Address = tuple[str, int]


@dataclass
class GossipResult:
    """What a gossip section changed (:meth:`Membership.gossip_received`)."""

    learned: list[NodeRecord] = field(default_factory=list)  # new nodes, to be met
    failed: list[str] = field(default_factory=list)  # newly FAIL here
    recovered: list[str] = field(default_factory=list)  # a refutation cleared PFAIL/FAIL
    filters: list[NodeRecord] = field(default_factory=list)  # newer announced filters


class Membership:
    """Known nodes and their states, from this node's point of view."""

    def __init__(
        self,
        my_id: str,
        host: str,
        client_port: int,
        bus_port: int,
        node_timeout_ms: int,
        rng: random.Random | None = None,
        period_ms: int | None = None,
        fail_forget_ms: int = 0,
    ) -> None:
        self.my_id = my_id
        self.node_timeout_ms = node_timeout_ms
        self.fail_forget_ms = fail_forget_ms  # forget a node in FAIL this long; 0 = never
        self.period_ms = period_ms or max(20, min(1000, node_timeout_ms // 10))
        self.suspicion_timeout_ms = max(self.period_ms, node_timeout_ms - 2 * self.period_ms)
        self.myself = NodeRecord(my_id, host, client_port, bus_port, NodeFlags.MYSELF)
        self.peers: dict[str, NodeRecord] = {}
        #: ids of peers flagged PFAIL or FAIL (what each period must look at:
        #: a tick costs O(those), not O(N))
        self._failing: set[str] = set()
        self.version = 0  # bumped whenever a node is added or forgotten
        self._ids: list[str] = []  # list(peers) as of _ids_version (random gossip entries)
        self._ids_version = -1
        self.broadcasts = Broadcasts()
        self.suspicions = 0  # peers this node started suspecting
        self.refutations = 0  # times this node refuted a suspicion about itself
        self.indirect_probes = 0  # PROBE_REQs sent
        self._forgotten: dict[str, tuple[int, bool]] = {}  # node id -> (until ms, banned)
        #: forgotten after FAIL, redialled until back (see the module docstring)
        self.lost: dict[str, LostNode] = {}
        #: (node id, life ended) of every node that left both ``peers`` and
        #: ``lost``, for the bus to drop its per-peer state (drained by it)
        self.removed: list[tuple[str, bool]] = []
        #: node id -> the bus address our own dial reached it at (verification)
        self.dialled: dict[str, Address] = {}
        #: addresses being met that never answered -> (the id they show under,
        #: since when (ms), client port): shown for the handshake timeout,
        #: redialled after
        self.handshakes: dict[Address, tuple[str, int, int]] = {}
        self._rng = rng or random.Random()
        self.probes = ProbeSchedule(self._rng)
        #: Lifeguard's local health (cluster_bus.awareness)
        self.awareness = Awareness()
        #: a protocol period's timer later than this is our own stall (ms)
        self.lag_limit_ms = max(50, self.period_ms // 2)
        self.loop_lag_ms = 0  # how late the last period's timer fired
        self.late_ticks = 0  # periods whose timer fired later than lag_limit_ms
        self.resumed_ms = 0  # when the last late timer fired (we ran again)
        self._lagging = False  # the coming probe_tick is a late one
        self._probe_wait = 0  # periods before the next probe starts

    # -- learning nodes ----------------------------------------------------------

    def learn(
        self,
        node_id: str,
        host: str,
        client_port: int,
        bus_port: int,
        now_ms: int,
        direct: bool = False,
        inferred: bool = False,
    ) -> NodeRecord | None:
        """Add or update a node; return the record when it is new, else None.

        A node with a new id at the bus address of a known or lost one replaces
        it (the node restarted with a new id): the old id is forgotten, its
        life over. ``direct``: the node itself spoke to us (authenticated
        link), which overrides a forget. ``inferred``: ``host`` is the
        address its link came from, as it announced none
        (:attr:`NodeRecord.inferred`): such an address replaces no node and
        no known node is replaced at it (behind a NAT or a forwarder,
        several nodes come from one address) until the node announces it
        (:meth:`announced`). A lost node learned again is known again (a new
        record: its state starts alive)."""
        me = self.myself
        if node_id == self.my_id or (not direct and (host, bus_port) == (me.host, me.bus_port)):
            return None  # gossip about a former node at our own address
        if self._is_forgotten(node_id, now_ms, direct):
            return None
        if direct:
            self._forgotten.pop(node_id, None)
        rec = self.peers.get(node_id)
        if rec is not None:
            rec.host, rec.client_port, rec.bus_port = host, client_port, bus_port
            return None
        if not inferred:
            self._replace_at(node_id, host, bus_port, now_ms)
        self.lost.pop(node_id, None)
        rec = NodeRecord(node_id, host, client_port, bus_port, inferred=inferred)
        self.peers[node_id] = rec
        self.version += 1
        self.broadcasts.queue(node_id)
        return rec

    def announced(self, rec: NodeRecord, now_ms: int) -> None:
        """``rec``, known at the address its link came from, now announces
        ``rec.host`` (it learned its own IP): the address rule of
        :meth:`learn` applies now (a node restarted with a new id, bound to
        0.0.0.0, first speaks without a host), and gossip may carry it."""
        rec.inferred = False
        self._replace_at(rec.node_id, rec.host, rec.bus_port, now_ms)
        self.broadcasts.queue(rec.node_id)

    def _replace_at(self, node_id: str, host: str, bus_port: int, now_ms: int) -> None:
        """Forget every other known or lost node at ``host``:``bus_port``
        whose address was announced: ``node_id`` replaces it there."""
        for old in list(self.peers.values()):
            if (
                old.node_id != node_id
                and old.host == host
                and old.bus_port == bus_port
                and not old.inferred
            ):
                self.forget(old.node_id, now_ms, replaced=True)
        for gone in list(self.lost.values()):
            if gone.node_id != node_id and (gone.host, gone.bus_port) == (host, bus_port):
                self.forget(gone.node_id, now_ms, replaced=True)

    def forget(
        self,
        node_id: str,
        now_ms: int,
        banned: bool = False,
        *,
        lost: bool = False,
        ended: bool = False,
        replaced: bool = False,
    ) -> NodeRecord | None:
        """Drop a node and ignore gossip about it for ``FORGET_TTL_MS``.

        ``banned`` (CLUSTER FORGET): its own heartbeats too, as Redis's
        blacklist, and no redials. ``lost`` (FAIL expiry): kept in
        :attr:`lost` and redialled. ``ended``: its life is over (LEAVE, a
        new id at its address): the bus drops its forwarding sessions too.
        ``replaced`` (a new id at its address): its life ended, and it is
        banned, as ``banned``, for ``REPLACED_TTL_MS``.
        Every node that leaves both ``peers`` and ``lost`` is appended to
        :attr:`removed`."""
        forgotten = self._forgotten
        if len(forgotten) >= MAX_FORGOTTEN:  # ids seen once, never looked up again
            for stale in [k for k, (until, _) in forgotten.items() if until <= now_ms]:
                del forgotten[stale]
        if replaced:
            ended = True
            forgotten[node_id] = (now_ms + REPLACED_TTL_MS, True)
        else:
            forgotten[node_id] = (now_ms + FORGET_TTL_MS, banned)
        self.broadcasts.drop(node_id)
        self.probes.forget(node_id)
        self.version += 1
        self._failing.discard(node_id)
        rec = self.peers.pop(node_id, None)
        if lost and rec is not None:
            self.lost[node_id] = LostNode(node_id, rec.host, rec.client_port, rec.bus_port, now_ms)
            while len(self.lost) > MAX_LOST:
                oldest = min(self.lost.values(), key=lambda g: g.since_ms)
                del self.lost[oldest.node_id]
                self.removed.append((oldest.node_id, True))
            return rec
        was_lost = self.lost.pop(node_id, None) is not None
        if rec is not None or was_lost:
            self.removed.append((node_id, ended))
            self.dialled.pop(node_id, None)
        return rec

    def _is_forgotten(self, node_id: str, now_ms: int, direct: bool = False) -> bool:
        until, banned = self._forgotten.get(node_id, (0, False))
        if now_ms >= until:
            self._forgotten.pop(node_id, None)
            return False
        return banned or not direct

    # -- our own state -------------------------------------------------------------

    def announce_filters(self, epoch: int, channel_fp: int, pattern_fp: int) -> None:
        """Our announced filters changed: gossip them (peers heal missed deltas)."""
        me = self.myself
        if (me.filter_epoch, me.channel_fp, me.pattern_fp) != (epoch, channel_fp, pattern_fp):
            me.filter_epoch, me.channel_fp, me.pattern_fp = epoch, channel_fp, pattern_fp
            self.broadcasts.queue(self.my_id)

    def refute(self, incarnation: int) -> bool:
        """Someone suspects or failed us at ``incarnation``: outbid it. True if we did."""
        if incarnation < self.myself.incarnation:
            return False  # already refuted
        self.myself.incarnation = (incarnation + 1) & 0xFFFFFFFF
        self.refutations += 1
        self.awareness.apply(1)  # Lifeguard: suspected, maybe for our own slowness
        self.broadcasts.queue(self.my_id)
        return True

    # -- our own health (Lifeguard) -----------------------------------------------------

    def loop_lag(self, lag_ms: int, now_ms: int) -> bool:
        """The bus's periodic timer fired ``lag_ms`` late (fed in before
        :meth:`probe_tick`). Above ``lag_limit_ms`` (half a period, at least
        50 ms) the process was starved or stopped: the health score rises,
        the coming period counts toward no probe, and the stall is added to
        every running suspicion and FAIL-forget time, so that our own
        silence does not age them. True when the period is a late one."""
        self.loop_lag_ms = lag_ms
        if lag_ms <= self.lag_limit_ms:
            return False
        self._lagging = True
        self.late_ticks += 1
        self.resumed_ms = now_ms
        self.awareness.apply(1)
        for node_id in self._failing:
            rec = self.peers.get(node_id)
            if rec is None:
                continue
            if rec.flags & NodeFlags.PFAIL:
                rec.suspect_since_ms = min(now_ms, rec.suspect_since_ms + lag_ms)
            elif rec.flags & NodeFlags.FAIL:
                rec.fail_time_ms = min(now_ms, rec.fail_time_ms + lag_ms)
        return True

    @property
    def gossip_rounds(self) -> int:
        """Gossip rounds per period while changes are queued: memberlist's
        rate when healthy, divided by the health multiplier (at least one): a
        node that doubts itself adds less to a loaded machine (ours, not
        memberlist's)."""
        return max(1, GOSSIP_ROUNDS_PER_PERIOD // self.awareness.multiplier)

    # -- probing (SWIM) ------------------------------------------------------------

    def probe_tick(self, now_ms: int) -> ProbeStep:
        """One protocol period: resolve outstanding probes (unacked: indirect
        probes, then suspicion), time out suspicions, choose this period's target."""
        step = ProbeStep()
        lagging, self._lagging = self._lagging, False
        health = self.awareness
        probes = self.probes.outstanding
        for target, probe in list(probes.items()):
            rec = self.peers.get(target)
            if rec is None or rec.flags & NodeFlags.FAIL:
                del probes[target]
            elif rec.acked_ms >= probe.sent_ms:
                del probes[target]
                health.apply(-1)  # Lifeguard: a probe answered
            elif lagging:
                continue  # a period we did not run counts toward no probe
            elif probe.ticks > 1:
                probe.ticks -= 1
            elif not probe.indirect:
                helpers = [
                    r.node_id
                    for r in self.peers.values()
                    if r.node_id != target and r.connected and not r.failing
                ]
                vias = self._rng.sample(helpers, min(INDIRECT_PROBES, len(helpers)))
                step.indirect.extend((via, target) for via in vias)
                self.indirect_probes += len(vias)
                probe.indirect = True
                probe.ticks = health.multiplier
            else:
                del probes[target]
                health.apply(1)  # Lifeguard: no ack at all (we have no NACK)
                if not rec.failing:
                    self._suspect(rec, now_ms)
                    step.suspected.append(target)
        forget_ms = self.fail_forget_ms
        suspicion_ms = self.suspicion_timeout_ms
        for node_id in list(self._failing):
            rec = self.peers.get(node_id)
            if rec is None or not rec.failing:
                self._failing.discard(node_id)
            elif rec.flags & NodeFlags.PFAIL and now_ms - rec.suspect_since_ms >= suspicion_ms:
                self._fail(rec, now_ms)
                step.failed.append(rec.node_id)
            elif rec.flags & NodeFlags.FAIL and 0 < forget_ms <= now_ms - rec.fail_time_ms:
                step.forgotten.append(rec.node_id)
        for node_id in step.forgotten:
            self.forget(node_id, now_ms, lost=True)
        self.probes.expire_relays(now_ms - 2 * self.period_ms)
        if lagging:
            return step  # no new probe in a period we did not run
        if self._probe_wait > 0:  # Lifeguard: a probe every (score + 1) periods
            self._probe_wait -= 1
            return step
        peers = self.peers
        # FAIL nodes stay in the rotation (SWIM drops them): a probe tells one
        # that comes back, or a healed partition, that it must refute; a node
        # never heard from is being met, not probed
        chosen = self.probes.choose(peers, lambda i: i in peers and peers[i].heard)
        if chosen is not None:
            probes[chosen] = Probe(now_ms, ticks=health.multiplier)
            self._probe_wait = health.multiplier - 1
            step.ping = chosen
        return step

    def gossip_targets(self) -> list[str]:
        """Peers for one gossip round (memberlist's gossip, Redis's unsolicited
        PONG broadcast): ``GOSSIP_FANOUT`` random connected peers (failed ones
        too, so the two sides of a healed partition hear each other's
        refutations) while changes are queued; none when idle."""
        if not self.broadcasts:
            return []
        live = [r.node_id for r in self.peers.values() if r.connected]
        return self._rng.sample(live, min(GOSSIP_FANOUT, len(live)))

    def _suspect(self, rec: NodeRecord, now_ms: int) -> None:
        rec.flags |= NodeFlags.PFAIL
        self._failing.add(rec.node_id)
        rec.suspect_since_ms = now_ms
        self.suspicions += 1
        self.broadcasts.queue(rec.node_id)

    def _fail(self, rec: NodeRecord, now_ms: int) -> None:
        rec.flags = (rec.flags & ~NodeFlags.PFAIL) | NodeFlags.FAIL
        self._failing.add(rec.node_id)
        rec.fail_time_ms = now_ms
        self.broadcasts.queue(rec.node_id)

    def _alive(self, rec: NodeRecord, incarnation: int) -> bool:
        """Alive at ``incarnation``: only a higher incarnation than we hold is news
        (it outbids a suspicion or a FAIL). True if it cleared PFAIL/FAIL."""
        if incarnation <= rec.incarnation:
            return False
        rec.incarnation = incarnation
        cleared = rec.failing
        rec.flags &= ~SUSPECT_FLAGS
        self._failing.discard(rec.node_id)
        rec.suspect_since_ms = rec.fail_time_ms = 0
        self.broadcasts.queue(rec.node_id)
        return cleared

    def ping_sent(self, node_id: str, now_ms: int) -> None:
        rec = self.peers.get(node_id)
        if rec is not None and rec.ping_sent_ms == 0:
            rec.ping_sent_ms = now_ms

    def heard_from(self, hb: Heartbeat, now_ms: int, pong: bool) -> bool:
        """A heartbeat from the node itself: it acks any probe of it, carries its
        incarnation and its announced filters (authoritative). True when it
        cleared a PFAIL/FAIL flag (the node refuted)."""
        rec = self.peers.get(hb.node_id)
        if rec is None:
            return False
        rec.acked_ms = rec.pong_received_ms = now_ms
        rec.heard = True
        if pong:
            rec.ping_sent_ms = 0
        filters = (hb.filter_epoch, hb.channel_fp, hb.pattern_fp)
        if (rec.filter_epoch, rec.channel_fp, rec.pattern_fp) != filters:
            rec.filter_epoch, rec.channel_fp, rec.pattern_fp = filters
            self.broadcasts.queue(rec.node_id)
        return self._alive(rec, hb.incarnation)

    def probe_acked(self, node_id: str, now_ms: int) -> None:
        """A PROBE_ACK: a peer reached ``node_id`` for us."""
        rec = self.peers.get(node_id)
        if rec is not None:
            rec.acked_ms = now_ms
            rec.heard = True

    # -- gossip ------------------------------------------------------------------

    def gossip_received(
        self, reporter: str, entries: Iterable[GossipEntry], now_ms: int
    ) -> GossipResult:
        """Apply a heartbeat's gossip section from ``reporter`` (SWIM's order for
        liveness, the filter epoch for filters)."""
        result = GossipResult()
        if reporter not in self.peers:
            return result
        for g in entries:
            if g.node_id == self.my_id:
                if g.flags & SUSPECT_FLAGS:
                    self.refute(g.incarnation)
                continue
            rec = self.peers.get(g.node_id)
            if rec is None:
                if g.flags & (SUSPECT_FLAGS | NodeFlags.LEAVING):
                    continue  # do not start meeting a node others think is down
                rec = self.learn(g.node_id, g.host, g.client_port, g.bus_port, now_ms)
                if rec is None:
                    continue
                rec.incarnation = g.incarnation
                rec.tls_port, rec.hostname = g.tls_port, g.hostname
                result.learned.append(rec)
            else:
                self._apply_liveness(rec, g, now_ms, result)
            if g.filter_epoch > rec.filter_epoch:
                rec.filter_epoch, rec.channel_fp, rec.pattern_fp = (
                    g.filter_epoch,
                    g.channel_fp,
                    g.pattern_fp,
                )
                self.broadcasts.queue(rec.node_id)
                result.filters.append(rec)
        return result

    def _apply_liveness(
        self, rec: NodeRecord, g: GossipEntry, now_ms: int, result: GossipResult
    ) -> None:
        rank = rank_of(g.flags)
        if (g.incarnation, rank) <= (rec.incarnation, rec.rank()):
            return
        if rank == 0:
            if self._alive(rec, g.incarnation):
                result.recovered.append(rec.node_id)
            return
        rec.incarnation = g.incarnation
        if rank == 2:
            self._fail(rec, now_ms)
            result.failed.append(rec.node_id)
        elif not rec.flags & NodeFlags.PFAIL:
            rec.flags |= NodeFlags.PFAIL
            self._failing.add(rec.node_id)
            rec.suspect_since_ms = now_ms
            self.broadcasts.queue(rec.node_id)

    def fail_received(self, node_id: str, incarnation: int, now_ms: int) -> bool:
        """A peer broadcast FAIL about ``node_id``: accept it unless the node
        already refuted that incarnation. True if it changed."""
        rec = self.peers.get(node_id)
        if rec is None or rec.flags & NodeFlags.FAIL or incarnation < rec.incarnation:
            return False
        rec.incarnation = incarnation
        self._fail(rec, now_ms)
        return True

    def gossip_for(self, to: str, full: bool = False) -> tuple[GossipEntry, ...]:
        """The gossip section of a heartbeat to ``to``: its own entry when we
        suspect it (so it can refute), queued changes (fewest transmissions
        first), then random entries; ``full``: every node (a joining MEET and
        its PONG; more than a frame holds: :meth:`Heartbeats.full`)."""
        peers = self.peers
        # a node known only at the address its link came from is not
        # gossiped until it announces one (NodeRecord.inferred)
        if full:
            chosen = [r for r in peers.values() if r.node_id != to and not r.inferred]
            self._rng.shuffle(chosen)
            return tuple(r.entry() for r in chosen)
        entries: list[GossipEntry] = []
        seen = {to}
        target = peers.get(to)
        if target is not None and target.failing:
            entries.append(target.entry())
        for node_id in self.broadcasts.take(UPDATES_PER_MESSAGE, len(peers) + 1, skip=to):
            rec = self.myself if node_id == self.my_id else peers.get(node_id)
            if rec is not None and not rec.inferred:
                entries.append(rec.entry())
                seen.add(node_id)
        if self._ids_version != self.version:
            self._ids, self._ids_version = list(peers), self.version
        ids = self._ids
        sample = self._rng.sample(ids, min(len(ids), RANDOM_ENTRIES + len(seen)))
        for node_id in [i for i in sample if i not in seen and not peers[i].inferred][
            :RANDOM_ENTRIES
        ]:
            entries.append(peers[node_id].entry())
        return tuple(entries)

    # -- views -------------------------------------------------------------------

    def cluster_state(self) -> str:
        """``ok`` while this node reaches a majority of the nodes it knows or has
        lost (itself included), else ``fail``."""
        reachable = 1 + sum(1 for r in self.peers.values() if not r.failing)
        return "ok" if reachable * 2 > len(self.peers) + len(self.lost) + 1 else "fail"

    def verified(self, rec: NodeRecord) -> bool:
        """Our own dial reached ``rec`` at the bus address it announces."""
        return self.dialled.get(rec.node_id) == (rec.host, rec.bus_port)

    def pending_handshakes(self, now_ms: int) -> list[tuple[Address, str, int]]:
        """Addresses being met that never answered, shown as ``handshake`` nodes
        for Redis's handshake timeout (max(node timeout, 1 s), after which
        Redis deletes the node; we keep dialling the address, unshown). An
        address a known node already holds (it reached us first, or gossip
        named it) is not shown twice: our dial there only verifies it."""
        if not self.handshakes:
            return []
        timeout = max(self.node_timeout_ms, 1000)
        held = {(r.host, r.bus_port) for r in self.peers.values()}
        return [
            (key, node_id, port)
            for key, (node_id, since, port) in self.handshakes.items()
            if now_ms - since < timeout and key not in held
        ]

    def dial_reached(self, node_id: str, address: Address) -> None:
        """An outbound link we dialled to ``address`` completed its handshake
        with ``node_id``: the node is verified there, and the address is no
        longer a pending handshake."""
        self.dialled[node_id] = address
        self.handshakes.pop(address, None)

    def count(self, flag: int) -> int:
        return sum(1 for r in self.peers.values() if r.flags & flag)
