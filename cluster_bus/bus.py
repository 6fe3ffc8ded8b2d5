"""ClusterBus: the node-to-node bus of one node (asyncio), the node's :class:`ClusterLink`.

This module is the orchestration: it owns the listener and the timer, and a
``{message type: handler}`` table sends each frame to the part whose job it
is: link, mesh (dialling), handshake, heartbeat (MEET/PING/PONG, FAIL, LEAVE,
FORGET, MEET, the tick) over membership, filter_sync, visibility, routing,
codec and info (CLUSTER INFO / NODES / SLOTS). The map is docs/architecture.md.

A received PUBLISH is handed to the node (:meth:`LocalDelivery.deliver_forwarded`)
and never forwarded again. Any malformed frame closes that link and is
counted; the node keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from cluster_bus import dataplane
from cluster_bus.announce import Announcer
from cluster_bus.api import (
    FILTER_NAMES,
    HANDSHAKES_FLOOR,
    HANDSHAKES_PER_IP_FLOOR,
    BusConfig,
    FilterChange,
    LinkInfo,
    LocalDelivery,
    SlotRange,
)
from cluster_bus.clock import Address, now_ms
from cluster_bus.codec import ack_frame, short_id
from cluster_bus.filter_sync import KIND_OF, NAME_OF, FilterSync
from cluster_bus.frames import (
    MSG_TYPE,
    Ack,
    Fail,
    FilterDelta,
    FilterFull,
    FilterRequest,
    Hello,
    HelloAuth,
    Leave,
    Meet,
    Message,
    MsgType,
    Ping,
    Pong,
    ProbeAck,
    ProbeReq,
    Resend,
    Session,
    StatsReply,
    StatsRequest,
)
from cluster_bus.handshake import Handshake
from cluster_bus.heartbeat import Heartbeats, tick_failed
from cluster_bus.info import BusStats, cluster_info, cluster_nodes, slot_map, sync_state
from cluster_bus.membership import Membership
from cluster_bus.mesh import Dialer, Mesh
from cluster_bus.nodes import LostNode
from cluster_bus.stats_query import StatsQueries
from cluster_bus.visibility import Visibility
from netutil.acceptor import Listener
from netutil.addresses import (
    announced,
    learns_own_ip,
    listen,
    own_host,
    parse_bind,
    parse_seed,
)
from netutil.rate_limited_log import RateLimitedLog, resp_hint
from netutil.tls import bus_contexts

if TYPE_CHECKING:  # --cluster-config-file only: pathlib and fcntl stay off the start path
    from cluster_bus.link import Link
    from cluster_bus.nodes_file import NodesConfig, NodesFile

log = logging.getLogger("bloomcast.bus")
_ACK = MsgType.ACK


class ClusterBus:
    """The cluster bus of one node. Start with :meth:`start`, stop with :meth:`stop`.

    ``node`` receives forwarded PUBLISH frames and gives filter snapshots;
    ``config`` is the bus's part of the node's settings.
    """

    def __init__(
        self,
        node: LocalDelivery,
        config: BusConfig,
        nodes_file: NodesFile | None = None,
        saved: NodesConfig | None = None,
        plane: dataplane.BusPlane | None = None,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        """``plane``: the classes to build from, the bus's half of the node's
        plane (``bloomcast node`` passes it; when None, a test's bus, the
        plane of the node's one choice: :func:`cluster_bus.dataplane.load`)."""
        self.node = node
        #: ms since the Unix epoch (cluster_bus.link.now_ms); a test injects its own
        self.clock = clock
        self.config = config
        #: --cluster-config-file (locked by the caller, which read ``saved`` from it)
        self.nodes_file = nodes_file
        self._saved = saved
        self.node_id = node.node_id
        self._short = short_id(node.node_id)
        self.client_port = config.client_port
        self.port = config.port  # the actual port after start() when 0
        self.sendbuf_limit = config.sendbuf_limit
        self.forward_linger = config.forward_linger_us / 1e6  # seconds (LinkOwner)
        self.node_timeout_ms = config.node_timeout_ms
        self.ping_interval_ms = config.heartbeat_ms
        self._secret = config.cluster_secret.encode() if config.cluster_secret else None
        tls = (config.tls_cert_file, config.tls_key_file, config.tls_ca_cert_file)
        self._tls = bus_contexts(*tls) if config.tls_cluster else None  # (accepted, dialled)
        self.bind = parse_bind(config.bind.split())
        #: random per process: peers learn that a node keeping its id restarted
        self.boot = int.from_bytes(os.urandom(8), "big") or 1
        self.membership = self._own_membership(config)
        if plane is None:
            plane = dataplane.load()  # (netutil.dataplane.choose: not the bus's own)
        self.plane = plane
        self.routing = plane.PeerTable()
        self.sync = FilterSync(self.routing, max_retry_ms=config.node_timeout_ms // 2)
        self.stats = BusStats()
        self.warnings = RateLimitedLog()
        self.visibility = Visibility(config.visibility_timeout_ms, self.stats)
        self.mesh = Mesh(self._short, self.stats)
        self._links = self.mesh.links
        self.dialer = Dialer(self._protocol, self.node_timeout_ms, clock=clock)
        self.link_class = plane.Link
        self.forwarding = plane.Forwarding(
            node,
            self.routing,
            self.mesh,
            self.stats,
            sender=self._short,
            replay_bytes=config.replay_bytes,
            replay_ms=config.replay_ms,
        )
        self.heartbeats = self._heartbeats(config, clock)
        self._seeds = self.heartbeats.seeds
        self.announcer = Announcer(
            node,
            self.sync,
            self.mesh,
            self.membership,
            self.heartbeats,
            self.visibility,
            self.stats,
            self._short,
        )
        #: BLOOMCAST.HOTCHANNELS CLUSTER: STATS_REQUEST / STATS_REPLY (issue 51)
        self.queries = StatsQueries(self.mesh, self.membership, self.stats)
        self._servers: list[Listener] = []
        self._cron: asyncio.TimerHandle | None = None
        self._cron_due: float | None = None  # the loop time the tick is due at
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._backoff_swept = 0  # when the dialer's stale backoffs were last dropped
        # each takes (link, peer, msg) for the one frame type it is registered for
        self._handlers = self._frame_handlers()

    def _own_membership(self, config: BusConfig) -> Membership:
        """This node's view of the cluster, starting with itself: the ports and
        hostname it announces (``--cluster-announce-*``) and its address."""
        ports = announced(
            config.client_port,
            config.tls_port,
            config.port,
            announce_port=config.announce_port,
            announce_tls_port=config.announce_tls_port,
            announce_bus_port=config.announce_bus_port,
            announce_hostname=config.announce_hostname,
        )
        membership = Membership(
            self.node_id,
            own_host(self.bind, config.announce_ip),
            ports.client_port,
            ports.bus_port,
            config.node_timeout_ms,
            period_ms=config.heartbeat_ms,
            fail_forget_ms=config.fail_forget_after_ms,
        )
        me = membership.myself
        me.tls_port, me.hostname = ports.tls_port, ports.hostname
        return membership

    def _heartbeats(self, config: BusConfig, clock: Callable[[], int]) -> Heartbeats:
        """PING/PONG, failure detection and gossip over this bus's mesh."""
        return Heartbeats(
            self.membership,
            self.mesh,
            self.dialer,
            self.routing,
            self.sync,
            self.stats,
            learn_own_ip=learns_own_ip(config.announce_ip),
            node_timeout_ms=self.node_timeout_ms,
            unreachable=self.visibility.peer_gone,
            forgotten=self._forget_peer,
            known=self.forwarding.known_again,
            clock=clock,
        )

    def _frame_handlers(self) -> dict[type, Callable[[Link, str, Any], None]]:
        """The handler of each frame type after the handshake."""
        return {
            Meet: self.heartbeats.on_heartbeat,
            Ping: self.heartbeats.on_heartbeat,
            Pong: self.heartbeats.on_heartbeat,
            FilterDelta: self._on_filter_delta,
            FilterFull: self._on_filter_full,
            FilterRequest: self._on_filter_request,
            Ack: self._on_ack,
            Session: self.forwarding.on_session,
            Resend: self.forwarding.on_resend,
            Fail: self.heartbeats.on_fail,
            ProbeReq: self.heartbeats.on_probe_req,
            ProbeAck: self.heartbeats.on_probe_ack,
            Leave: self.heartbeats.on_leave,
            StatsRequest: self.queries.on_request,
            StatsReply: self.queries.on_reply,
            Hello: self._on_late_handshake,
            HelloAuth: self._on_late_handshake,
        }

    def _new_link(self, dial_key: Address | None) -> Link:
        outbound = dial_key is not None
        tls = None if self._tls is None else self._tls[outbound]
        handshake = Handshake(self.node_id, self._secret, outbound, boot=self.boot)
        return self.link_class(self, handshake, dial_key, tls)

    def _protocol(self, dial_key: Address | None) -> asyncio.Protocol:
        """A new link as the event loop sees it (an asyncio protocol by its
        methods: the compiled ``Link`` is no subclass of one)."""
        return cast(asyncio.Protocol, self._new_link(dial_key))

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        """Listen on the bus port (0 = any free port, see ``port``) and dial the seeds."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._servers, port = await listen(
            lambda: self._protocol(None),
            self.config.bind,
            self.config.port,
            on_accept_error=self._accept_failed,
        )
        self.port = port
        self.membership.myself.bus_port = self.config.announce_bus_port or self.port
        if self._saved is not None:
            self._restore(self._saved)
        for name in FILTER_NAMES:
            self.sync.start(KIND_OF[name], self.node.filter_snapshot(name))
        self.heartbeats.filters_announced()
        for seed in self.config.join:  # (checked with the other settings: router/config_file.py)
            self.heartbeats.add_seed(parse_seed(seed), joined=True)
        self._tick()

    def _restore(self, saved: NodesConfig) -> None:
        """A restart with ``--cluster-config-file``: continue the filter epoch and
        the incarnation (above any suspicion of the old life), and make every
        node the file knows a lost node: redialled until it answers."""
        ms = self.membership
        self.sync.epoch = saved.epoch
        ms.myself.incarnation = (saved.incarnation + 1) & 0xFFFFFFFF
        now = self.clock()
        for n in saved.nodes:
            if n.node_id != ms.my_id and (n.host, n.bus_port) != (
                ms.myself.host,
                ms.myself.bus_port,
            ):
                ms.lost[n.node_id] = LostNode(n.node_id, n.host, n.client_port, n.bus_port, now)
        self.heartbeats.sync_routing()

    def _save_nodes(self) -> None:
        if self.nodes_file is not None:
            try:
                self.nodes_file.save(self.membership, self.sync.epoch)
            except OSError as exc:  # counted in the log; the node keeps running (as Redis)
                log.warning("could not save %s: %s", self.nodes_file.path, exc)

    async def stop(self) -> None:
        """Send LEAVE to every peer, close every link and the listener. The
        nodes file is saved a last time (what changed since the last tick;
        its owner's ``close()`` waits for the write)."""
        self._stopping = self.dialer.stopping = self.heartbeats.stopping = True
        if self._cron is not None:
            self._cron.cancel()
        self._save_nodes()
        for link in list(self._links):
            if link.authenticated:
                self.mesh.send(link, Leave())
        self.visibility.stop()
        self.queries.close()
        await asyncio.sleep(0)  # let the transports flush the LEAVE frames
        for link in list(self._links):
            link.close()
        for server in self._servers:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)

    # -- ClusterLink ---------------------------------------------------------------

    def forward_publish(self, channel: bytes, message: bytes, shard: bool, origin_seq: int) -> int:
        return self.forwarding.forward(channel, message, shard, origin_seq)

    def stats_query(self, query: bytes) -> asyncio.Future[list[bytes]]:
        return self.queries.ask(query)

    def serve_stats(self, source: Callable[[bytes], bytes]) -> None:
        self.queries.serve(source)

    def forwarder(self) -> Callable[[bytes, bytes, bool, int], int]:
        # the compiled Forwarding's method: the node's PUBLISH path calls it
        # with no Python frame of the bus in between
        return self.forwarding.forward

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        return self.announcer.changed(changes, self._loop, self.config.visibility_timeout_ms > 0)

    def peer_count(self) -> int:
        return len(self.membership.peers)

    def info_fields(self) -> dict[str, int | str]:
        now = self.clock()
        self.forwarding.count_forwards()  # (forward's counts, kept apart: Forwarding)
        fields = cluster_info(
            self.stats,
            self.membership,
            sync_state(self.membership, self.routing, self.mesh.linked_out, now),
            epoch=self.sync.epoch,
            bus_port=self.port,
            links_connected=self.mesh.connected(),
            replay_buffer_bytes=self.forwarding.replay_buffer_bytes(),
            verify_failures=self.sync.verify_failures,
            now_ms=now,
        )
        fields["cluster_subscribe_visibility_lagging"] = len(self.visibility.lagging)
        fields["cluster_stats_dial_errors"] = self.dialer.dial_errors
        if self.nodes_file is not None:  # --cluster-config-file
            fields["cluster_nodes_file_saves"] = self.nodes_file.saves
            fields["cluster_nodes_file_failures"] = self.nodes_file.failures
            rejected = self._saved.rejected if self._saved is not None else 0
            fields["cluster_nodes_file_lines_refused"] = rejected
        return fields

    def nodes_lines(self, tls: bool = False) -> list[str]:
        return cluster_nodes(
            self.membership, self.sync.epoch, self.mesh.linked_out, self.clock(), tls
        )

    def topology_version(self) -> int:
        return self.membership.version + self.mesh.version

    def slot_map(self) -> list[SlotRange]:
        return slot_map(self.membership)

    def forget_node(self, node_id: str) -> str | None:
        return self.heartbeats.forget_node(node_id, self.clock())

    def meet(self, host: str, bus_port: int, client_port: int = 0) -> None:
        self.heartbeats.meet((host, bus_port), client_port)

    def links(self) -> list[LinkInfo]:
        return self.mesh.infos()

    # -- LinkOwner: what links report --------------------------------------------------

    def link_made(self, link: Link) -> None:
        if self._stopping:
            link.close()
            return
        if not link.outbound and self._over_accept_cap(link):
            return
        self.mesh.add(link)
        if link.outbound:
            self.mesh.send(link, link.handshake.hello())

    def handshake_caps(self, host: str) -> tuple[int, int]:
        """(total, from ``host``): the accepted links that may be in their
        handshake at once (``cluster-max-handshakes`` and
        ``cluster-max-handshakes-per-ip``; 0 = automatic: a small multiple of
        the nodes this node knows, with a floor, and at least one more than the
        nodes it knows at ``host``, so every peer of a one-host cluster can
        dial it at once)."""
        config, ms = self.config, self.membership
        total = config.max_handshakes or max(
            HANDSHAKES_FLOOR, 2 * (len(ms.peers) + len(ms.lost) + 1)
        )
        per_ip = config.max_handshakes_per_ip
        if not per_ip:
            per_ip = HANDSHAKES_PER_IP_FLOOR
            if self.mesh.accepting.get(host, 0) >= per_ip:  # count only when it matters
                there = sum(1 for r in ms.peers.values() if r.host == host)
                there += sum(1 for n in ms.lost.values() if n.host == host)
                per_ip = max(per_ip, there + 1)
        return total, per_ip

    def _accept_failed(self, exc: OSError) -> None:
        """accept() on the bus port failed (EMFILE, ENFILE: the connection
        waits in the backlog): counted, logged once a minute (Redis logs
        "Error accepting cluster node: accept: %s")."""
        self.stats.accept_errors += 1
        why = exc.strerror or str(exc)
        self.warnings.warn("accept", "bus", f"Error accepting cluster node: accept: {why}")

    def _over_accept_cap(self, link: Link) -> bool:
        """Refuse (close at once, count, log rate-limited) an accepted link over
        the handshake caps: a stranger holding connections open cannot take
        the descriptors the node's clients and peers need (issue 49)."""
        host = link.peer_host
        total, per_ip = self.handshake_caps(host)
        mesh = self.mesh
        if mesh.accepting_total >= total:
            why = (
                f"{mesh.accepting_total} accepted links in their handshake "
                f"(cluster-max-handshakes {total})"
            )
        elif mesh.accepting.get(host, 0) >= per_ip:
            why = (
                f"{mesh.accepting[host]} accepted links from that address in their "
                f"handshake (cluster-max-handshakes-per-ip {per_ip})"
            )
        else:
            return False
        self.stats.links_rejected += 1
        self.warnings.warn("accept_cap", host, f"bus link from {host} refused: {why}")
        link.close(abort=True)
        return True

    def message_received(self, link: Link, msg: Message) -> None:
        self.stats.received[MSG_TYPE[type(msg)]] += 1
        if not link.authenticated:
            self._on_handshake(link, msg)
            return
        assert link.peer_id is not None
        self._handlers[type(msg)](link, link.peer_id, msg)

    def bad_frame(self, link: Link, reason: str, sealed: bool = False) -> None:
        self.stats.bad_frames += 1
        self.stats.seal_failures += sealed
        way = "to" if link.outbound else "from"
        if not link.authenticated:
            reason = resp_hint(reason, link.first_bytes)
        who = link.peer_id or _where(link)
        self.warnings.warn("bad_frame", who, f"bus link {way} {who}: {reason}; closing it")
        link.close(abort=True)

    def tls_failed(self, link: Link, exc: Exception) -> None:
        self.stats.tls_handshake_failures += 1
        way = "to" if link.outbound else "from"
        who = _where(link)
        self.warnings.warn("tls", who, f"bus link {way} {who}: TLS handshake failed: {exc!r}")
        link.close(abort=True)

    def buffer_exceeded(self, link: Link) -> None:
        self.stats.buffer_limit_exceeded += 1
        self.stats.links_dropped += 1
        log.warning("bus link to %s over its send buffer limit; dropped", link.peer_id)
        link.close(abort=True)

    def link_closed(self, link: Link) -> None:
        self.mesh.drop(link)
        if link.dial_key is not None and not link.authenticated:
            self.dialer.failed(link.dial_key)  # (a no-op for our own address)
        if not link.authenticated and link.closed_by_peer and (link.outbound or link.first_bytes):
            # the other side of a refusal: a handshake the peer ended (an inbound
            # connection counts once it sent something: a bare connect is a probe)
            self.stats.handshakes_refused += 1
            who = _where(link)
            way = "to" if link.outbound else "from"
            self.warnings.warn(
                "refused",
                who,
                f"bus handshake {way} {who} closed by the peer before it completed (a "
                "different --cluster-secret, --tls-cluster on one side only, or not a bus port?)",
            )
        peer = link.peer_id
        if peer is None:
            return
        reachable = self.mesh.link_to(peer) is not None
        rec = self.membership.peers.get(peer)
        if rec is not None:
            rec.connected = reachable
        if peer not in self.mesh.out:
            self.heartbeats.link_lost(peer)
        if not reachable:
            self.visibility.peer_gone(peer)
            self.membership.probes.probe_next(peer)

    # -- handshake -------------------------------------------------------------------

    def _on_handshake(self, link: Link, msg: Message) -> None:
        step = link.handshake.receive(msg)
        if step.error is not None:
            self._auth_failed(link, step.error)
            return
        if step.myself:
            if link.dial_key is not None:
                self.dialer.myself.add(link.dial_key)
                self.dialer.dialing.discard(link.dial_key)
                self._seeds.pop(link.dial_key, None)
                self.membership.handshakes.pop(link.dial_key, None)
            link.close()
            return
        if step.send is not None:
            self.mesh.send(link, step.send)
        if step.done:
            peer = link.handshake.peer_id
            assert peer is not None
            self._authenticated(link, peer)

    def _authenticated(self, link: Link, peer: str) -> None:
        keys = None if self._tls is not None else link.handshake.frame_keys()
        link.authenticate(peer, self.config.max_body, keys)
        if link.outbound and link.dial_key is not None:
            # our own dial reached ``peer`` at this address: it is verified
            # there, and a seed dialled there has met it
            self.dialer.connected(link.dial_key)
            self.membership.dial_reached(peer, link.dial_key)
            self.heartbeats.seed_reached(link.dial_key, peer)
        if not self.mesh.adopt(link):
            return
        self.forwarding.link_up(link, peer)
        if link.outbound:
            for heartbeat in self.heartbeats.opening(link, peer):
                self.mesh.send(link, heartbeat)
            self.heartbeats.ping_sent(peer, self.clock())
        rec = self.membership.peers.get(peer)
        if rec is not None:
            rec.connected = True

    def _auth_failed(self, link: Link, reason: str) -> None:
        self.stats.auth_failures += 1
        who = _where(link)
        self.warnings.warn("auth", who, f"bus handshake with {who} failed: {reason}")
        link.close(abort=True)

    def _on_late_handshake(self, link: Link, peer: str, msg: Message) -> None:
        self.bad_frame(link, "handshake frame on an established link")

    # -- message handlers (authenticated links) ------------------------------------------

    def _on_filter_delta(self, link: Link, peer: str, msg: Message) -> None:
        # (FilterSync.on_delta's request and ACK, the ACK written as its frame: no
        # Ack built and encoded per remote subscribe change, issue 48)
        request, ack = self.sync.on_delta(peer, cast(FilterDelta, msg), self.clock())
        if request is not None:
            self.mesh.send_to(peer, request, link)
        if ack is not None:
            out = self.mesh.link_to(peer) or link
            if not out.closed:
                out.write(ack_frame(self._short, ack))
                self.stats.sent[_ACK] += 1

    def _on_filter_full(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, FilterFull)
        for request in self.sync.on_full(peer, msg, self.clock()):
            self.mesh.send_to(peer, request, link)

    def _on_filter_request(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, FilterRequest)
        self.announcer.release()  # the whole filter is then the one announced
        snap = self.node.filter_snapshot(NAME_OF[msg.kind])
        self.mesh.send_to(peer, self.sync.full(msg.kind, snap, announce=False), link)

    def _forget_peer(self, peer: str, ended: bool) -> None:
        """``peer`` left membership and the lost list (LEAVE, CLUSTER FORGET, a
        new id at its address): its filter copies go, and its forwarding
        sessions when its life has ended (cluster_bus.forwarding)."""
        self.forwarding.forget(peer, ended, self.clock())
        self.sync.forget(peer)

    def _on_ack(self, link: Link, peer: str, msg: Message) -> None:
        assert isinstance(msg, Ack)
        self.visibility.acked(peer, msg.delta_id)

    # -- the periodic tick -------------------------------------------------------------------

    def _tick(self) -> None:
        loop = self._loop
        if self._stopping or loop is None:
            return
        # how late this timer fired: the event loop's lag, which Lifeguard's
        # local health awareness reads as our own slowness (cluster_bus.awareness)
        lag_ms = 0 if self._cron_due is None else int((loop.time() - self._cron_due) * 1000)
        try:
            self._cron_step(self.clock(), max(0, lag_ms))
        except Exception:  # never let the timer die: counted, logged once a minute
            tick_failed(self.stats, self.warnings, "bus cron step")
        try:  # apart: a step that keeps failing above never keeps handshakes forever
            self._expire_handshakes(self.clock())
        except Exception:
            tick_failed(self.stats, self.warnings, "bus handshake timeouts")
        period = self.ping_interval_ms / 1000
        self._cron_due = loop.time() + period
        self._cron = loop.call_later(period, self._tick)

    def _cron_step(self, now: int, lag_ms: int = 0) -> None:
        if self.membership.loop_lag(lag_ms, now):
            log.debug("bus timer %d ms late: this node doubts itself", lag_ms)
        self.heartbeats.tick(now)
        self.forwarding.tick(now)
        self._save_nodes()
        if self.dialer.backoff and now >= self._backoff_swept + 1000:  # once a second
            self._backoff_swept = now
            self.dialer.expire(now)

    def _expire_handshakes(self, now: int) -> None:
        # Redis's handshake timeout, stretched while we doubt ourselves (Lifeguard)
        timeout = self.membership.awareness.scale(max(2000, self.node_timeout_ms // 2))
        for link in list(self.mesh.handshaking):
            if now - link.created_ms > timeout:
                self._auth_failed(link, "handshake timeout")


def _where(link: Link) -> str:
    """The peer's address as this node knows it: the one dialled, or the one seen."""
    if link.dial_key is not None:
        return f"{link.dial_key[0]}:{link.dial_key[1]}"
    return link.peer_host
