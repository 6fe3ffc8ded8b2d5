"""Heartbeats and membership on the wire: MEET / PING / PONG, PROBE_REQ /
PROBE_ACK, gossip, FAIL, LEAVE, and the periodic tick that sends them.

The rules live in the sans-IO :class:`cluster_bus.membership.Membership`
(SWIM: one probe per period, indirect probes, suspicion, refutation,
piggybacked dissemination); this class puts them on the wire. Per period a
node sends one PING and answers the PINGs it gets (about one), whatever the
cluster size: its idle cost is flat in N, where Redis Cluster's ``clusterCron``
pings every peer at least once per half node timeout.

Links are TCP, so more rules come from Redis's ``clusterCron``: a peer with
no link is redialled with backoff, and a link with a PING outstanding and
nothing at all heard for half the node timeout may be half-open: it is
dropped and redialled. Healing is unconditional: the seeds (``--join``,
CLUSTER MEET) and the addresses of lost nodes (forgotten after FAIL) are
redialled with backoff for as long as they are missed, so a partition of any
length heals once the network does, whichever side forgot whom (NATS redials
its seed routes the same way; Redis keeps its FAIL nodes and redials them).
A peer known only from gossip or its own inbound link is dialled at the
address it announces, which verifies it (slots go to verified nodes only).
A heartbeat carries the sender's announced filter fingerprints and
incarnation; its gossip section carries other nodes' (how peers notice a
missed delta: :mod:`cluster_bus.filter_sync`).

CLUSTER FORGET and CLUSTER MEET land here too (Redis 7.0 semantics): a
forgotten node is dropped from membership and routing, its links closed, and
banned for ``FORGET_TTL_MS`` (its PINGs are still answered, as Redis answers
any PING); a met address is dialled like a ``--join`` seed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from cluster_bus.clock import Address, now_ms
from cluster_bus.codec import MAX_GOSSIP
from cluster_bus.filter_sync import FilterSync
from cluster_bus.frames import (
    Fail,
    GossipEntry,
    Heartbeat,
    Meet,
    Message,
    NodeFlags,
    Ping,
    Pong,
    ProbeAck,
    ProbeReq,
)
from cluster_bus.info import BusStats
from cluster_bus.membership import Membership
from cluster_bus.mesh import Dialer, Mesh
from netutil.addresses import address_error, hostname_error
from netutil.rate_limited_log import RateLimitedLog

if TYPE_CHECKING:
    from cluster_bus.link import Link
    from cluster_bus.routing import PeerTable

_HB = TypeVar("_HB", Meet, Ping, Pong)

log = logging.getLogger("bloomcast.bus")

#: (host, hostname) pairs of gossip entries remembered as checked: emptied when full
ACCEPTED_CACHE = 4096


def tick_failed(stats: BusStats, warnings: RateLimitedLog, what: str) -> None:
    """(In an ``except``.) A timer step raised: counted (CLUSTER INFO
    ``cluster_stats_tick_errors``), logged with its traceback at most once a
    minute per step, with how many were not logged since."""
    stats.tick_errors += 1
    warnings.warn("tick", what, f"{what} failed: {traceback.format_exc().rstrip()}")


#: CLUSTER MEET addresses kept at most (``--join`` seeds are not counted:
#: they are configuration); a MEET past it drops the oldest MEET address
MAX_MET = 1024


class Heartbeats:
    """Membership on the wire for one bus. ``unreachable(peer)`` is called when
    a peer can no longer be counted on (FAIL, LEAVE), ``forgotten(peer,
    ended)`` when it leaves membership and the lost list (its per-peer state
    goes: filter copies; its sessions too when ``ended``, its life over),
    ``known(peer)`` when a node joins the routing table (new, or back)."""

    def __init__(
        self,
        membership: Membership,
        mesh: Mesh,
        dialer: Dialer,
        routing: PeerTable,
        sync: FilterSync,
        stats: BusStats,
        *,
        learn_own_ip: bool,
        node_timeout_ms: int,
        unreachable: Callable[[str], None],
        forgotten: Callable[[str, bool], None],
        known: Callable[[str], None],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.membership = membership
        self.clock = clock  # ms since the Unix epoch
        self.mesh = mesh
        self.dialer = dialer
        self.routing = routing
        self.sync = sync
        self.stats = stats
        self._learn_own_ip = learn_own_ip
        self.node_timeout_ms = node_timeout_ms
        self._unreachable = unreachable
        self._forgotten = forgotten
        self._known = known
        #: addresses to meet and keep meeting (``--join``, CLUSTER MEET) -> the
        #: node id last reached there (None: never reached)
        self.seeds: dict[Address, str | None] = {}
        #: the seeds that came from ``--join`` (kept for good; a CLUSTER MEET
        #: address that never answers is forgotten with its handshake node)
        self.joined: set[Address] = set()
        self.stopping = False
        self._warnings = RateLimitedLog()
        # the peers the tick must look at, so that it costs O(those), not O(N):
        # a direct PING outstanding (half-open links), no outbound link (redials)
        self._pinged: set[str] = set()
        self._unlinked: set[str] = set()
        self._peers_version = -1  # membership.version when _unlinked was rebuilt
        #: refused addresses, logged at most once a minute per peer
        self._peer_warnings = RateLimitedLog(logger=log)
        #: (host, hostname) pairs that passed the checks (at most ACCEPTED_CACHE)
        self._accepted: set[tuple[str, str]] = set()

    def on_heartbeat(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, Heartbeat)
        if msg.node_id != peer:
            link.owner.bad_frame(link, "heartbeat node id is not the link's peer")
            return
        now = self.clock()
        ms = self.membership
        if self._learn_own_ip and (isinstance(msg, Meet) or not ms.myself.host):
            self._learn_my_ip(link)
        announced, hostname = self._own_address(peer, msg.host, msg.hostname)
        host = announced or link.peer_host
        before = ms.version
        rec = ms.peers.get(peer)
        if rec is None:
            rec = ms.learn(
                peer, host, msg.client_port, msg.bus_port, now, direct=True, inferred=not announced
            )
            if rec is None:  # banned (CLUSTER FORGET, replaced): answered, not learned
                if isinstance(msg, (Ping, Meet)):
                    self.mesh.send_to(peer, self.make(Pong, peer), link)
                return
        else:
            rec.host, rec.client_port, rec.bus_port = host, msg.client_port, msg.bus_port
            if rec.inferred and announced:
                ms.announced(rec, now)  # may replace a node there: version moves
            elif not announced:
                rec.inferred = True
        if (rec.tls_port, rec.hostname) != (msg.tls_port, hostname):
            rec.tls_port, rec.hostname = msg.tls_port, hostname
            ms.broadcasts.queue(peer)
        rec.connected = True
        if isinstance(msg, Meet) and rec.bus_port > 0 and not self.mesh.linked_out(peer):
            # a node that started after us (our dials there refused, backing
            # off) reached us first: our own link to it now, not at the
            # backoff's next dial (up to 2 s at start-up, converged meanwhile 0)
            self.dialer.listening((rec.host, rec.bus_port), now)
        if ms.heard_from(msg, now, pong=isinstance(msg, Pong)):
            log.info("node %s is reachable again", peer)
        for requester in ms.probes.relays_answered(peer):
            self.mesh.send_to(requester, ProbeAck(peer))
        result = ms.gossip_received(peer, self._checked(peer, msg.gossip), now)
        for failed_id in result.failed:
            log.info("node %s marked failed (gossip from %s)", failed_id, peer)
            self._unreachable(failed_id)
        for node_id in result.recovered:
            log.info("node %s is reachable again (it refuted)", node_id)
        if ms.version != before:
            self.sync_routing()
            now_dial = self.clock()
            for new in result.learned:  # meet it now, not at the next tick
                key = (new.host, new.bus_port)
                if new.bus_port > 0 and self.dialer.due(key, now_dial):
                    self.dialer.dial(key)
        if isinstance(msg, Meet) and msg.flags & NodeFlags.MEETING:
            for pong in self.full(Pong, peer):  # it joins through us: every node we know
                self.mesh.send_to(peer, pong, link)
        elif isinstance(msg, (Ping, Meet)):
            self.mesh.send_to(peer, self.make(Pong, peer), link)
        for request in self.sync.on_heartbeat(peer, msg, now):
            self.mesh.send_to(peer, request, link)
        for node in result.filters:
            for request in self.sync.on_gossip(node, now):
                self.mesh.send_to(node.node_id, request)

    def _own_address(self, peer: str, host: str, hostname: str) -> tuple[str, str]:
        """The address and hostname a heartbeat's sender announces, checked
        where they enter (:mod:`netutil.addresses`): the address "" when
        it announces none or one that cannot be dialled (then it is known at
        the address its link came from, as a node that announced none), the
        hostname "" when it is no valid one. Each refused value is counted
        (``cluster_stats_addresses_refused``) and logged at most once a
        minute per peer."""
        host_error = address_error(host) if host else None
        name_error = hostname_error(hostname)
        if host_error is None and name_error is None:
            return host, hostname
        checked = (("host", host, host_error), ("hostname", hostname, name_error))
        problems = [f"{what} {value[:64]!r} ({error})" for what, value, error in checked if error]
        self.stats.addresses_refused += len(problems)
        self._peer_warnings.warn(
            "address", peer, f"node {peer} announces {' and '.join(problems)}: ignored"
        )
        return ("" if host_error else host), ("" if name_error else hostname)

    def _checked(self, reporter: str, entries: tuple[GossipEntry, ...]) -> list[GossipEntry]:
        """A heartbeat's gossip entries whose host and hostname pass the
        checks of :meth:`_own_address` (an entry with no host is one about a
        node that has not learned its IP: kept); the others are dropped,
        counted in ``cluster_stats_addresses_refused`` and logged at most
        once a minute per reporter."""
        kept = []
        accepted = self._accepted
        for g in entries:
            if (g.host, g.hostname) in accepted:  # gossip repeats the same nodes
                kept.append(g)
                continue
            error = (address_error(g.host) if g.host else None) or hostname_error(g.hostname)
            if error is None:
                if len(accepted) >= ACCEPTED_CACHE:
                    accepted.clear()
                accepted.add((g.host, g.hostname))
                kept.append(g)
                continue
            self.stats.addresses_refused += 1
            self._peer_warnings.warn(
                "gossip",
                reporter,
                f"gossip from {reporter} about {g.node_id} at {g.host[:64]!r} "
                f"(hostname {g.hostname[:64]!r}): {error}; entry dropped",
            )
        return kept

    def _learn_my_ip(self, link: Link) -> None:
        """Redis's rule without ``cluster-announce-ip``: a MEET (or any heartbeat
        while we know no IP of ours) arrived on a connection whose local
        address is how that peer reaches us: it is our IP."""
        me = self.membership.myself
        ip = link.local_host
        if ip and ip != me.host:
            me.host = ip
            self.membership.broadcasts.queue(me.node_id)
            log.warning("IP address for this node updated to %s", ip)

    def on_fail(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, Fail)
        ms = self.membership
        if msg.node_id == ms.my_id:
            if ms.refute(msg.incarnation):
                log.info("node %s declared us failed; refuting", peer)
            return
        if ms.fail_received(msg.node_id, msg.incarnation, self.clock()):
            log.info("node %s marked failed (FAIL from %s)", msg.node_id, peer)
            self._unreachable(msg.node_id)

    def on_probe_req(self, link: Link, peer: str, msg: Message) -> None:
        """SWIM's ping-req: PING the node for ``peer``; its answer is relayed."""
        assert isinstance(msg, ProbeReq)
        ms = self.membership
        target = msg.node_id
        out = self.mesh.out.get(target)
        if target == ms.my_id or out is None or not out.authenticated:
            return  # we cannot reach it either: no answer (SWIM sends no NACK)
        now = self.clock()
        ms.probes.relay_requested(target, peer, now)
        self.mesh.send(out, self.make(Ping, target))
        self.ping_sent(target, now)

    def on_probe_ack(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, ProbeAck)
        self.membership.probe_acked(msg.node_id, self.clock())

    def on_leave(self, link: Link, peer: str, msg: Message) -> None:
        log.info("node %s left the cluster", peer)
        self.membership.forget(peer, self.clock(), ended=True)
        self.sync_routing()
        self._unreachable(peer)

    def forget_node(self, node_id: str, now: int) -> str | None:
        """CLUSTER FORGET (Redis 7.0 ``clusterCommand``): drop the node (known,
        lost, or an address in its handshake), close its links, ban it for
        ``FORGET_TTL_MS``, stop redialling it; Redis's error text, or None."""
        ms = self.membership
        if node_id == ms.my_id:
            return "I tried hard but I can't forget myself..."
        for key, (pending, _, _) in list(ms.handshakes.items()):
            if pending == node_id:  # a MEET / seed that never answered
                del ms.handshakes[key]
                self.seeds.pop(key, None)
                return None
        if node_id not in ms.peers and node_id not in ms.lost:
            return f"Unknown node {node_id}"
        log.info("node %s forgotten (CLUSTER FORGET)", node_id)
        ms.forget(node_id, now, banned=True)
        for key, reached in list(self.seeds.items()):
            if reached == node_id:  # the seed was that node: no more redials
                del self.seeds[key]
        self.sync_routing()
        self._unreachable(node_id)
        return None

    def add_seed(self, key: Address, client_port: int = 0, *, joined: bool = False) -> None:
        """An address to meet (``--join`` when ``joined``, CLUSTER MEET): shown
        in its handshake until it answers (for Redis's handshake timeout), and
        redialled whenever it is missed. At most ``MAX_MET`` MEET addresses:
        past it the oldest one goes (:meth:`expire_handshakes` forgets those
        that never answered)."""
        if key in self.dialer.myself:
            return
        if joined:
            self.joined.add(key)
        elif key not in self.seeds and len(self.seeds) - len(self.joined) >= MAX_MET:
            oldest = next(k for k in self.seeds if k not in self.joined)
            del self.seeds[oldest]
            self.membership.handshakes.pop(oldest, None)
            log.warning("CLUSTER MEET: over %d addresses met; forgetting %s:%d", MAX_MET, *oldest)
        if self.seeds.get(key) is None:  # not met yet: (again) in its handshake
            self.seeds[key] = None
            port = client_port or max(0, key[1] - 10000)  # Redis's rule when not given
            self.membership.handshakes[key] = (os.urandom(20).hex(), self.clock(), port)

    def expire_handshakes(self, now: int) -> None:
        """Redis's handshake timeout (max(node timeout, 1 s)): an address being
        met that has not answered by then is no longer a handshake node, and a
        CLUSTER MEET address that never answered is forgotten (Redis deletes
        the handshake node); a ``--join`` seed stays and is redialled."""
        ms = self.membership
        timeout = max(self.node_timeout_ms, 1000)
        for key, (_, since, _) in list(ms.handshakes.items()):
            if now - since < timeout:
                continue
            del ms.handshakes[key]
            if key not in self.joined and self.seeds.get(key, "") is None:
                del self.seeds[key]
                log.info("CLUSTER MEET %s:%d: no answer within the handshake timeout", *key)

    def seed_reached(self, key: Address, node_id: str) -> None:
        """Our dial to ``key`` completed a handshake with ``node_id``."""
        if key in self.seeds:
            self.seeds[key] = node_id

    def meet(self, key: Address, client_port: int = 0) -> None:
        """CLUSTER MEET: a seed like ``--join``'s, dialled now and until it answers."""
        if key in self.dialer.myself:
            return  # our own address
        self.add_seed(key, client_port)
        if self.dialer.due(key, self.clock()):
            self.dialer.dial(key)

    def sync_routing(self) -> None:
        """Make the routing table's peers the membership's known and lost
        nodes, and hand every node that left both to ``forgotten``."""
        ms = self.membership
        current = set(ms.peers) | set(ms.lost)
        for node_id in self.routing.node_ids() - current:
            self.routing.remove_peer(node_id)
            self.mesh.close_peer(node_id)
        removed, ms.removed = ms.removed, []
        for node_id, ended in removed:
            if node_id not in current:
                self.mesh.close_peer(node_id)
                self._forgotten(node_id, ended)
        for node_id in current - self.routing.node_ids():
            self.routing.add_peer(node_id)
            self._known(node_id)

    def broadcast_fail(self, node_id: str) -> None:
        """Our suspicion of ``node_id`` timed out: tell every live peer at once
        (it is gossiped as well, for those we cannot reach)."""
        log.info(
            "node %s marked failed (suspected for %d ms)",
            node_id,
            self.membership.suspicion_timeout_ms,
        )
        rec = self.membership.peers.get(node_id)
        msg = Fail(node_id, rec.incarnation if rec is not None else 0)
        for peer, link in self.mesh.live(self.membership):
            if peer != node_id:
                self.mesh.send(link, msg)
        self._unreachable(node_id)

    def filters_announced(self) -> None:
        """Our announced filters are set or changed: gossip them (peers that
        missed a delta heal from the fingerprints)."""
        cfp, pfp, epoch, _, _ = self.sync.heartbeat_fields()
        self.membership.announce_filters(epoch, cfp, pfp)

    def make(
        self,
        cls: type[_HB],
        to: str,
        gossip: tuple[GossipEntry, ...] | None = None,
        flags: int = 0,
    ) -> _HB:
        """A heartbeat to ``to``: our identity, incarnation and announced filters,
        and a gossip section (by default a PING's: :meth:`Membership.gossip_for`)."""
        ms = self.membership
        me = ms.myself
        cfp, pfp, epoch, pmask, match_all = self.sync.heartbeat_fields()
        return cls(
            me.node_id,
            me.host,
            me.client_port,
            me.bus_port,
            cfp,
            pfp,
            epoch,
            pmask,
            match_all,
            flags,
            ms.gossip_for(to) if gossip is None else gossip,
            me.incarnation,
            me.tls_port,
            me.hostname,
        )

    def full(self, cls: type[Meet] | type[Pong], to: str) -> list[Meet | Pong]:
        """A heartbeat carrying every node we know, as a joining MEET (flagged
        ``MEETING``) or the PONG answering one: the first frame ``cls``, and
        unsolicited PONGs after it while entries remain (a frame holds at most
        ``MAX_GOSSIP``, 255)."""
        entries = self.membership.gossip_for(to, full=True)
        first = entries[:MAX_GOSSIP]
        head: Meet | Pong = (
            self.make(Meet, to, first, NodeFlags.MEETING)
            if cls is Meet
            else self.make(Pong, to, first)
        )
        out = [head]
        for at in range(MAX_GOSSIP, len(entries), MAX_GOSSIP):
            out.append(self.make(Pong, to, entries[at : at + MAX_GOSSIP]))
        return out

    def opening(self, link: Link, peer: str) -> list[Meet | Pong]:
        """The MEET that opens our authenticated link to ``peer``. Dialled to
        a seed (``--join``, CLUSTER MEET) or to a lost node's address, we
        join through it (or heal a partition): every node we know, and it
        answers with every node it knows (:meth:`full`). Otherwise (a node
        learned from gossip, verified by our dial; a redial) we know the
        cluster already: the MEET carries what a PING would, so a node's
        links cost O(N) gossip entries in all, not O(N) per link (issue 40)."""
        key = link.dial_key
        ms = self.membership
        joining = (
            key in self.seeds
            or peer in ms.lost
            or any((gone.host, gone.bus_port) == key for gone in ms.lost.values())
        )
        if joining:
            return self.full(Meet, peer)
        return [self.make(Meet, peer)]

    def gossip_round(self) -> None:
        """Queued changes to a few random peers in an unsolicited PONG (no
        answer is asked for; Redis broadcasts PONGs the same way); nothing
        when nothing changed."""
        if self.stopping:
            return
        try:
            for peer in self.membership.gossip_targets():
                link = self.mesh.link_to(peer)
                if link is not None:
                    self.mesh.send(link, self.make(Pong, peer))
        except Exception:  # never let a timer die: counted, logged once a minute
            tick_failed(self.stats, self._warnings, "bus gossip round")

    def _schedule_gossip(self) -> None:
        """Changes are queued: gossip rounds through this period (memberlist's
        GossipInterval); an idle period arms no timer at all."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # driven without a loop (tests)
            return
        rounds = self.membership.gossip_rounds  # fewer while we doubt ourselves
        step = self.membership.period_ms / 1000 / rounds
        self.gossip_round()
        for i in range(1, rounds):
            loop.call_later(step * i, self.gossip_round)

    def ping_sent(self, peer: str, now: int) -> None:
        """A PING (or MEET) to ``peer`` awaits its PONG."""
        self.membership.ping_sent(peer, now)
        self._pinged.add(peer)

    def link_lost(self, peer: str) -> None:
        """Our outbound link to ``peer`` closed: the tick redials it."""
        self._unlinked.add(peer)

    def _upkeep(self, now: int) -> None:
        """Drop links that look half-open; redial peers with no outbound link,
        lost nodes, and seeds whose node is missed; dial a peer whose
        announced address our own dial has not reached yet (verification)."""
        ms, mesh, dialer = self.membership, self.mesh, self.dialer
        if ms.version != self._peers_version:  # a node learned or forgotten
            self._peers_version = ms.version
            self._unlinked = {
                node_id
                for node_id, rec in ms.peers.items()
                if node_id not in mesh.out or not ms.verified(rec)
            }
        # half the node timeout, stretched while we doubt ourselves, and counted
        # from when our loop last ran again after a stall (Lifeguard)
        half = ms.awareness.scale(self.node_timeout_ms // 2)
        since = ms.resumed_ms
        for node_id in list(self._pinged):
            rec = ms.peers.get(node_id)
            if rec is None or not rec.ping_sent_ms:
                self._pinged.discard(node_id)
                continue
            link = mesh.out.get(node_id)
            if (
                link is not None
                and now - max(rec.ping_sent_ms, since) > half
                and now - link.created_ms > half
                and now - mesh.last_heard(node_id, link) > half
            ):
                # a PING unanswered and nothing at all from the peer for half
                # the timeout: the link may be half-open; redial (as Redis does)
                self.stats.links_dropped += 1
                link.close(abort=True)
        for node_id in list(self._unlinked):
            rec = ms.peers.get(node_id)
            if rec is None or (node_id in mesh.out and ms.verified(rec)):
                self._unlinked.discard(node_id)
            elif rec.bus_port > 0:
                key = (rec.host, rec.bus_port)
                if dialer.due(key, now):
                    dialer.dial(key)
        for gone in ms.lost.values():
            key = (gone.host, gone.bus_port)
            if gone.bus_port > 0 and dialer.due(key, now):
                dialer.dial(key)
        for key, reached in self.seeds.items():
            if reached is not None and mesh.linked_out(reached):
                continue  # the node met there is linked: nothing missed
            if dialer.due(key, now):
                dialer.dial(key)

    def tick(self, now: int) -> None:
        """One protocol period: the probe, indirect probes, suspicion timeouts,
        redials and half-open links."""
        ms = self.membership
        mesh = self.mesh
        step = ms.probe_tick(now)
        if step.ping is not None:
            link = mesh.out.get(step.ping)
            if link is not None and link.authenticated:
                mesh.send(link, self.make(Ping, step.ping))
            self.ping_sent(step.ping, now)  # unreachable counts as a PING outstanding
        for via, target in step.indirect:
            mesh.send_to(via, ProbeReq(target))
        for node_id in step.suspected:
            log.debug("node %s suspected: no answer to a direct or indirect probe", node_id)
            self._unreachable(node_id)  # a SUBSCRIBE's visibility wait stops waiting for it
        for node_id in step.failed:
            self.broadcast_fail(node_id)
        for node_id in step.forgotten:
            gone = ms.lost.get(node_id)
            where = f" {gone.host}:{gone.bus_port}" if gone is not None else ""
            log.warning(
                "node %s forgotten (in FAIL for %d ms); its address%s is redialled "
                "until it is back or CLUSTER FORGET drops it",
                node_id,
                ms.fail_forget_ms,
                where,
            )
        if step.forgotten:
            self.sync_routing()
        if ms.handshakes:
            self.expire_handshakes(now)
        self._upkeep(now)
        for request_to, request in self.sync.retry(now):
            mesh.send_to(request_to, request)
        if ms.broadcasts:
            self._schedule_gossip()
