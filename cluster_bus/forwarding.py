"""PUBLISH forwarding over sessions: the routing decision on the way out, the
session rules on the way in (:mod:`cluster_bus.session`).

Out: route the channel (:class:`cluster_bus.routing.PeerTable`), number one
frame per matching peer in that peer's :class:`OutSession`, keep it for
replay, and write it on the peer's link, or hold it (replay buffer only) when
no link is up: a reconnect replays it. A peer in FAIL, or forgotten after it
(``lost``: it may be cut off, not dead), is still routed and numbered, so
whatever it misses while away is counted when it is back.

In: deliver exactly the next sequence number of the sender's session, never
forward it again; a duplicate is dropped and counted, a gap asks for a RESEND.
Frames the sender could no longer replay are counted on both sides (the
receiver per origin, logged and reported to the node with the publish-time
bounds the sender gave: ``LocalDelivery.forwards_lost``; the sender in
``publish_lost_to_peers``).

Sessions outlive a membership forget: they go only when the peer's life has
ended (it left, or a new node id took its address), or, for a peer no longer
known, when more than ``MAX_RETAINED`` such peers are kept (the oldest first,
logged): a receiver that still holds a session never counts frames it got.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import cython

from cluster_bus.api import LocalDelivery
from cluster_bus.clock import now_ms
from cluster_bus.frames import MsgType, Publish, Resend, Session
from cluster_bus.info import BusStats
from cluster_bus.mesh import Mesh

if cython.compiled:  # the compiled session module's (its classes cimported by the .pxd)
    from cluster_bus._session import Period, seq_diff  # type: ignore[import-not-found,unused-ignore]
else:
    from cluster_bus.session import InSession, OutSession, Period, seq_diff
if not cython.compiled:  # (compiled: cluster_bus/_forwarding.pxd cimports it)
    from cluster_bus.link import Link
if not cython.compiled and TYPE_CHECKING:
    from cluster_bus.routing import PeerTable
if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("bloomcast.bus")

_PUBLISH = MsgType.PUBLISH
#: sessions kept for peers that are no longer known (forgotten, banned)
MAX_RETAINED = 1024


@cython.final
@cython.cclass
class Forwarding:
    """The forwarding sessions of one bus, with every peer, both ways
    (compiled on the compiled data plane: ``cluster_bus._forwarding``)."""

    def __init__(
        self,
        node: LocalDelivery,
        routing: PeerTable,
        mesh: Mesh,
        stats: BusStats,
        *,
        sender: int,
        replay_bytes: int,
        replay_ms: int,
    ) -> None:
        self.node = node
        #: the node's deliver_forwarded_run, looked up at the first run (every
        #: read of PUBLISH frames calls it)
        self._deliver_run: Callable[[str, list[Publish], int], None] | None = None
        self.routing = routing
        self.mesh = mesh
        # the mesh's link tables (filled and emptied, never replaced), read per forward
        self._links_out = mesh.out
        self._links_in = mesh.inbound
        self.stats = stats
        self._sender = sender
        self.replay_bytes = replay_bytes
        self.replay_ms = replay_ms
        self.out_sessions: dict[str, OutSession] = {}
        self.in_sessions: dict[str, InSession] = {}
        #: peers no longer known whose sessions are kept -> since when (ms)
        self._retained: dict[str, int] = {}
        self._period = Period(now_ms())  # the out sessions the tick looks at
        self._gaps: set[str] = set()  # peers whose in session has a gap open
        # PUBLISH frames forward wrote, peers it did not route to, and PUBLISH
        # frames read, not yet added to ``stats`` (C counters on the compiled
        # plane, added by count_forwards when the counters are read: BusStats
        # is a Python object, whose dict and attributes cost more than the
        # rest of a forward)
        self._forwards_sent = 0
        self._forwards_suppressed = 0
        self._forwards_received = 0

    def _out(self, peer: str) -> OutSession:
        session = self.out_sessions.get(peer)
        if session is None:
            session = OutSession(self.replay_bytes, self.replay_ms, period=self._period, peer=peer)
            self.out_sessions[peer] = session
        return session

    def _in(self, peer: str) -> InSession:
        session = self.in_sessions.get(peer)
        if session is None:
            session = self.in_sessions[peer] = InSession()
        return session

    # -- out ---------------------------------------------------------------------------

    def forward(self, channel: bytes, message: bytes, shard: bool, origin_seq: int) -> int:
        """ClusterLink.forward_publish: the number of peers it was routed to
        (written now, or held for replay when the peer has no link). Its
        counts go to ``stats`` when they are read (:meth:`count_forwards`)."""
        routing = self.routing
        peers = routing.peer_count
        if not peers:  # a lone node: nothing to route to
            return 0
        mask = routing.route(channel, shard)
        if not mask:
            self._forwards_suppressed += peers
            return 0
        nodes = routing.nodes_of(mask)
        out, sessions, sender = self._links_out, self.out_sessions, self._sender
        sent = 0
        for node_id in nodes:
            session = sessions.get(node_id) or self._out(node_id)
            frame = session.publish(sender, origin_seq, shard, channel, message)
            link = out.get(node_id)
            if type(link) is Link:  # compiled: C reads and a C call, no method lookup
                if cython.cast(Link, link).authenticated:
                    cython.cast(Link, link).write(frame, True)  # a forward: may linger
                    sent += 1
                    continue
            elif link is not None and link.authenticated:
                link.write(frame, True)
                sent += 1
                continue
            link = self._links_in.get(node_id)
            if link is None or not link.authenticated:
                self.stats.publish_held_no_link += 1
                continue
            link.write(frame, True)
            sent += 1
        self._forwards_sent += sent
        self._forwards_suppressed += peers - len(nodes)
        return len(nodes)

    def count_forwards(self) -> None:
        """Add what :meth:`forward` and :meth:`publishes_received` counted to
        ``stats`` (PUBLISH frames sent and received, ``publish_suppressed``):
        the bus calls it before its counters are read."""
        stats = self.stats
        stats.sent[_PUBLISH] += self._forwards_sent
        stats.received[_PUBLISH] += self._forwards_received
        stats.publish_suppressed += self._forwards_suppressed
        self._forwards_sent = 0
        self._forwards_suppressed = 0
        self._forwards_received = 0

    def link_up(self, link: Link, peer: str) -> None:
        """A new authenticated link: first of all, where our session with the peer
        stands. A session is for one life of the peer (its handshake's ``boot``):
        a peer that restarted keeping its node id gets a new session (counted),
        and the old one's replay buffer is discarded (its subscribers are gone)."""
        session = self._out(peer)
        boot = link.handshake.peer_boot
        if session.boot and boot and session.boot != boot:
            self.stats.sessions_restarted += 1
            log.warning(
                "node %s restarted with the same id: a new forwarding session; the %d "
                "frames of the old one's replay buffer are discarded (its subscribers "
                "went with it)",
                peer,
                session.held,
            )
            self._period.active.discard(session)
            del self.out_sessions[peer]
            session = self._out(peer)
        session.boot = boot
        self.mesh.send(link, self._announce(session))

    @staticmethod
    def _announce(session: OutSession) -> Session:
        session.announced = session.next_seq
        return Session(
            session.session_id,
            session.first_seq,
            session.next_seq,
            peer_lost=session.peer_lost,
        )

    def on_resend(self, link: Link, peer: str, msg: Resend) -> None:
        session = self._out(peer)
        if msg.session_id != session.session_id:
            # not this session: say which one it is (the receiver adopts it)
            self.mesh.send_to(peer, self._announce(session), link)
            return
        missed = session.peer_counted(msg.lost)  # the receiver's count: ours too
        if missed:
            self.stats.publish_lost_to_peers += missed
            log.warning(
                "%d forwarded PUBLISH to node %s no longer in its replay buffer",
                missed,
                peer,
            )
        target = self.mesh.link_to(peer) or link
        from_seq = msg.from_seq
        first = session.first_seq
        if seq_diff(from_seq, first) < 0:
            # gone from the buffer: the answer names the question and bounds
            # when the missing frames were published; the receiver counts them
            low, high = session.gone_bounds(from_seq, now_ms())
            answer = Session(
                session.session_id, first, session.next_seq, from_seq, low, high, session.peer_lost
            )
            self.mesh.send(target, answer)
            from_seq = first
        frames = session.replay(from_seq)
        for frame in frames:
            target.write(frame)
        self.stats.publish_replayed += len(frames)
        self.stats.sent[MsgType.PUBLISH] += len(frames)

    # -- in ----------------------------------------------------------------------------

    def publishes_received(self, link: Link, msgs: list[Publish]) -> None:
        """A run of PUBLISH frames read from ``link``: the in-order prefix is
        delivered in one pass (the common case: the session's rules once per
        run, not per frame); what follows a gap or a duplicate is judged
        frame by frame (delivered when it is the next, else dropped: counted
        as a duplicate, or a RESEND asked for the gap)."""
        self._forwards_received += len(msgs)  # (count_forwards)
        peer = link.peer_id
        assert peer is not None
        session = self.in_sessions.get(peer) or self._in(peer)
        n = session.in_order(msgs)
        if n:
            deliver = self._deliver_run
            if deliver is None:
                deliver = self._deliver_run = self.node.deliver_forwarded_run
            deliver(peer, msgs, n)
        for i in range(n, len(msgs)):
            self._one_received(link, peer, session, msgs[i])

    def _one_received(self, link: Link, peer: str, session: InSession, msg: Publish) -> None:
        if session.accept(msg.seq):
            self.node.deliver_forwarded(peer, msg.origin_seq, msg.channel, msg.payload, msg.shard)
            return
        verdict = session.out_of_order(msg.seq, now_ms())
        if not verdict.duplicate:
            self._gaps.add(peer)
        if verdict.resend is not None:
            self.stats.sequence_gaps += 1
            self.mesh.send_to(
                peer, Resend(session.session_id, verdict.resend, session.session_lost), link
            )
        elif verdict.duplicate:
            self.stats.publish_duplicates += 1

    def on_session(self, link: Link, peer: str, msg: Session) -> None:
        session = self._in(peer)
        lost, resend = session.start(
            msg.session_id, msg.first_seq, msg.next_seq, now_ms(), msg.asked, msg.peer_lost
        )
        if session.gap_open:
            self._gaps.add(peer)
        if lost:
            self.stats.publish_lost += lost
            log.warning(
                "%d forwarded PUBLISH from node %s lost: no longer in its replay buffer",
                lost,
                peer,
            )
            self.node.forwards_lost(peer, lost, msg.gone_from_ms, msg.gone_to_ms)
        if resend is not None:
            if not lost and session.gap_open:  # frames are missing: a gap, found by the SESSION
                self.stats.sequence_gaps += 1
            # (else: our count of what was lost, for the sender, with the replay from there)
            self.mesh.send_to(peer, Resend(msg.session_id, resend, session.session_lost), link)

    # -- upkeep ------------------------------------------------------------------------

    def tick(self, now: int) -> None:
        """Each heartbeat period: age out idle replay buffers, tell every peer we
        sent to since the last tick where our session stands (a receiver that
        missed the tail of a burst has no later frame to reveal the gap), and
        ask again for any gap still open (its replay may have been lost too).
        Only sessions with something to do are visited: idle, it costs O(1)."""
        period = self._period
        period.now = now
        for session in list(period.active):
            session.expire(now)
            if session.announced != session.next_seq:
                link = self.mesh.link_to(session.peer)
                if link is not None:
                    self.mesh.send(link, self._announce(session))
            if session.idle:
                period.active.discard(session)
        for peer in list(self._gaps):
            incoming = self.in_sessions.get(peer)
            if incoming is None:
                self._gaps.discard(peer)
                continue
            resend = incoming.retry(now)
            if resend is not None:
                self.mesh.send_to(peer, Resend(incoming.session_id, resend, incoming.session_lost))
            if not incoming.gap_open:
                self._gaps.discard(peer)

    def forget(self, peer: str, ended: bool, now: int) -> None:
        """The peer left membership. ``ended``: its life is over (it left, or a
        new node id took its address): its sessions, both ways, go. Otherwise
        (forgotten in FAIL, CLUSTER FORGET) they are kept, so the peer resumes
        them if it comes back, up to ``MAX_RETAINED`` such peers."""
        if not ended:
            self._retained[peer] = now
            while len(self._retained) > MAX_RETAINED:
                oldest = min(self._retained, key=self._retained.__getitem__)
                log.warning(
                    "forwarding sessions of node %s dropped: more than %d forgotten nodes kept",
                    oldest,
                    MAX_RETAINED,
                )
                self._drop(oldest)
            return
        self._drop(peer)

    def known_again(self, peer: str) -> None:
        """A forgotten peer is known again: its kept sessions are live ones."""
        self._retained.pop(peer, None)

    def _drop(self, peer: str) -> None:
        self._retained.pop(peer, None)
        session = self.out_sessions.pop(peer, None)
        if session is not None:
            self._period.active.discard(session)
        self.in_sessions.pop(peer, None)
        self._gaps.discard(peer)

    def replay_buffer_bytes(self) -> int:
        buffered = 0
        for session in self.out_sessions.values():
            buffered += session.buffered_bytes
        return buffered
