"""The bus's counters and how an operator reads them: CLUSTER INFO and CLUSTER NODES.

Field names are Redis Cluster's where the concept is the same
(``cluster_state``, ``cluster_known_nodes``,
``cluster_stats_messages_<type>_sent``/``_received`` as in redis
``src/cluster.c`` ``clusterGenNodesDescription`` / ``CLUSTER INFO``), then
bloomcast's own (``cluster_stats_publish_suppressed``, filter sync, links).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cluster_bus.api import SlotRange
from cluster_bus.frames import MsgType, NodeFlags
from cluster_bus.membership import Membership
from cluster_bus.nodes import NodeRecord
from cluster_bus.slots import CLUSTER_SLOTS, slot_ranges
from netutil.addresses import client_port

if TYPE_CHECKING:
    from cluster_bus.routing import PeerTable

#: Redis's per-type counter names (cluster_stats_messages_<name>_sent/received)
REDIS_MSG_NAMES: dict[MsgType, str] = {
    MsgType.PING: "ping",
    MsgType.PONG: "pong",
    MsgType.MEET: "meet",
    MsgType.FAIL: "fail",
    MsgType.PUBLISH: "publish",
    MsgType.FILTER_REQUEST: "filter_request",
    MsgType.FILTER_FULL: "filter_full",
    MsgType.FILTER_DELTA: "filter_delta",
    MsgType.ACK: "ack",
    MsgType.LEAVE: "leave",
    MsgType.SESSION: "session",
    MsgType.RESEND: "resend",
    MsgType.PROBE_REQ: "probe_req",
    MsgType.PROBE_ACK: "probe_ack",
    MsgType.SEALED: "sealed",
    MsgType.STATS_REQUEST: "stats_request",
    MsgType.STATS_REPLY: "stats_reply",
}


@dataclass(slots=True)
class BusStats:
    """Every counter of one bus (frames by type, and what went wrong); slots:
    a misspelt counter is an AttributeError, not a new field."""

    sent: dict[MsgType, int] = field(default_factory=lambda: dict.fromkeys(MsgType, 0))
    received: dict[MsgType, int] = field(default_factory=lambda: dict.fromkeys(MsgType, 0))
    publish_suppressed: int = 0  # peers a broadcast would have sent to, but the filters said no
    publish_held_no_link: int = 0  # routed to a peer with no link up: replay buffer only
    publish_replayed: int = 0  # frames sent again on a RESEND
    publish_duplicates: int = 0  # frames received twice (dropped)
    publish_lost: int = 0  # frames a peer could no longer replay to us (exact)
    publish_lost_to_peers: int = 0  # frames a peer asked for that had left our replay buffer
    sessions_restarted: int = 0  # peers back with the same id and a new boot: new sessions
    sequence_gaps: int = 0  # gaps found in a peer's session, by a later frame or a SESSION
    bad_frames: int = 0
    auth_failures: int = 0
    handshakes_refused: int = 0  # handshakes the peer ended: its refusal, seen from here
    #: accepted links closed at once: over cluster-max-handshakes[-per-ip]
    links_rejected: int = 0
    accept_errors: int = 0  # accept() failed on the bus port (EMFILE, ENFILE, ...)
    seal_failures: int = 0  # sealed frames refused: bad MAC, replayed, or not sealed
    tls_handshake_failures: int = 0  # tls-cluster: no CA-signed certificate, not TLS
    buffer_limit_exceeded: int = 0
    links_dropped: int = 0
    visibility_waits: int = 0
    visibility_timeouts: int = 0
    #: waits that left out a peer lagging since a timeout (cluster_bus.visibility)
    visibility_skipped: int = 0
    #: batches of filter clears alone held for the next batch that sets bits
    #: (cluster_bus.announce: UNSUBSCRIBEs)
    clear_batches_held: int = 0
    #: cluster-forward-linger-us: batches of forwards that waited for their
    #: linger (sent when it ended), and those another frame, the send-buffer
    #: limit or a close sent first
    forward_linger_batches: int = 0
    forward_linger_cut: int = 0
    #: STATS_REQUESTs (BLOOMCAST.HOTCHANNELS CLUSTER) a peer did not answer in
    #: time, or answered with nothing (cluster_bus.stats_query)
    stats_unanswered: int = 0
    #: bytes of STATS_REQUEST and STATS_REPLY frames (headers included) this
    #: node sent and received: what BLOOMCAST.HOTCHANNELS CLUSTER moves
    stats_bytes_sent: int = 0
    stats_bytes_received: int = 0
    #: addresses and hostnames refused where they entered from the bus: a
    #: gossip entry dropped, a heartbeat's own host or hostname ignored
    addresses_refused: int = 0
    #: timer steps (the bus's cron, a gossip round) that raised: counted, logged
    #: once a minute, the timer goes on (issue 49)
    tick_errors: int = 0


@dataclass(frozen=True, slots=True)
class SyncState:
    """Peers whose both filters we hold verified; and whether every live peer is
    synced and linked (CLUSTER INFO ``cluster_filters_converged``)."""

    known: int
    converged: bool


def sync_state(
    ms: Membership, routing: PeerTable, linked: Callable[[str], bool], now_ms: int
) -> SyncState:
    """Converged: no lost node, no node still in its handshake, and every live
    peer's filters held and our link up. A node in its handshake (an address
    being met, shown in CLUSTER NODES and counted in ``cluster_known_nodes``
    for Redis's handshake timeout) is one whose filters we do not hold."""
    known = 0
    converged = not ms.lost and not ms.pending_handshakes(now_ms)
    for rec in ms.peers.values():
        ok = routing.holds_filters(rec.node_id)
        known += ok
        if rec.flags & NodeFlags.FAIL:
            continue
        if not ok or not linked(rec.node_id):
            converged = False
    return SyncState(known, converged)


def live_slot_ranges(ms: Membership) -> list[tuple[int, int, str]]:
    """The slot map over this node and every verified peer not in FAIL
    (cluster_bus.slots; verified: cluster_bus.membership)."""
    live = [ms.my_id] + [
        r.node_id for r in ms.peers.values() if not r.flags & NodeFlags.FAIL and ms.verified(r)
    ]
    return slot_ranges(live)


def slot_map(ms: Membership) -> list[SlotRange]:
    """CLUSTER SLOTS / SHARDS: the live slot ranges with each node's client address."""
    nodes = {ms.my_id: ms.myself, **ms.peers}
    out = []
    for start, end, node_id in live_slot_ranges(ms):
        n = nodes[node_id]
        out.append(SlotRange(start, end, node_id, n.host, n.client_port, n.tls_port, n.hostname))
    return out


def _state_fields(ms: Membership, epoch: int, now_ms: int) -> dict[str, int | str]:
    """CLUSTER INFO's first fields, in Redis's order: the state, the slots
    (a PFAIL owner's slots counted as ``pfail``), the known nodes, the epochs."""
    ranges = live_slot_ranges(ms)
    pfail = sum(
        end - start + 1
        for start, end, node_id in ranges
        if node_id in ms.peers and ms.peers[node_id].flags & NodeFlags.PFAIL
    )
    return {
        "cluster_state": ms.cluster_state(),
        "cluster_slots_assigned": CLUSTER_SLOTS,
        "cluster_slots_ok": CLUSTER_SLOTS - pfail,
        "cluster_slots_pfail": pfail,
        "cluster_slots_fail": 0,
        "cluster_known_nodes": 1 + len(ms.peers) + len(ms.pending_handshakes(now_ms)),
        "cluster_size": len(ranges),
        "cluster_current_epoch": epoch,
        "cluster_my_epoch": epoch,
    }


def cluster_info(
    stats: BusStats,
    ms: Membership,
    sync: SyncState,
    *,
    epoch: int,
    bus_port: int,
    links_connected: int,
    replay_buffer_bytes: int,
    verify_failures: int,
    now_ms: int,
) -> dict[str, int | str]:
    """CLUSTER INFO fields (the node adds its own receive-side counters).
    ``cluster_known_nodes`` counts the addresses still in their handshake, as
    Redis's does; ``cluster_nodes_lost`` the nodes forgotten after FAIL and
    still redialled (cluster_bus.membership)."""
    fields = _state_fields(ms, epoch, now_ms)
    for direction, counts in (("sent", stats.sent), ("received", stats.received)):
        for mtype, name in REDIS_MSG_NAMES.items():
            fields[f"cluster_stats_messages_{name}_{direction}"] = counts[mtype]
        fields[f"cluster_stats_messages_{direction}"] = sum(counts.values())
    fields["total_cluster_links_buffer_limit_exceeded"] = stats.buffer_limit_exceeded
    sent, received = stats.sent, stats.received
    fields.update(
        {
            "cluster_bus_port": bus_port,
            "cluster_links_connected": links_connected,
            "cluster_nodes_pfail": ms.count(NodeFlags.PFAIL),
            "cluster_nodes_fail": ms.count(NodeFlags.FAIL),
            "cluster_nodes_lost": len(ms.lost),
            "cluster_my_incarnation": ms.myself.incarnation,
            "cluster_stats_suspicions": ms.suspicions,
            "cluster_stats_refutations": ms.refutations,
            "cluster_stats_indirect_probes": ms.indirect_probes,
            "cluster_health_score": ms.awareness.score,
            "cluster_loop_lag_ms": ms.loop_lag_ms,
            "cluster_stats_late_ticks": ms.late_ticks,
            "cluster_stats_tick_errors": stats.tick_errors,
            "cluster_peer_filters_known": sync.known,
            "cluster_filters_converged": int(sync.converged),
            "cluster_filter_epoch": epoch,
            "cluster_stats_publish_suppressed": stats.publish_suppressed,
            "cluster_stats_publish_held_no_link": stats.publish_held_no_link,
            "cluster_stats_publish_replayed": stats.publish_replayed,
            "cluster_stats_publish_duplicates": stats.publish_duplicates,
            "cluster_stats_publish_lost": stats.publish_lost,
            "cluster_stats_publish_lost_to_peers": stats.publish_lost_to_peers,
            "cluster_stats_sessions_restarted": stats.sessions_restarted,
            "cluster_replay_buffer_bytes": replay_buffer_bytes,
            "cluster_stats_filter_deltas_sent": sent[MsgType.FILTER_DELTA],
            "cluster_stats_filter_deltas_received": received[MsgType.FILTER_DELTA],
            "cluster_stats_filter_requests_sent": sent[MsgType.FILTER_REQUEST],
            "cluster_stats_filter_requests_received": received[MsgType.FILTER_REQUEST],
            "cluster_stats_filter_syncs_sent": sent[MsgType.FILTER_FULL],
            "cluster_stats_filter_syncs_received": received[MsgType.FILTER_FULL],
            "cluster_stats_filter_verify_failures": verify_failures,
            "cluster_stats_sequence_gaps": stats.sequence_gaps,
            "cluster_stats_stats_unanswered": stats.stats_unanswered,
            "cluster_stats_stats_bytes_sent": stats.stats_bytes_sent,
            "cluster_stats_stats_bytes_received": stats.stats_bytes_received,
            "cluster_stats_bad_frames": stats.bad_frames,
            "cluster_stats_auth_failures": stats.auth_failures,
            "cluster_stats_handshakes_refused": stats.handshakes_refused,
            "cluster_stats_links_rejected": stats.links_rejected,
            "cluster_stats_accept_errors": stats.accept_errors,
            "cluster_stats_seal_failures": stats.seal_failures,
            "cluster_stats_tls_handshake_failures": stats.tls_handshake_failures,
            "cluster_stats_links_dropped": stats.links_dropped,
            "cluster_subscribe_visibility_waits": stats.visibility_waits,
            "cluster_subscribe_visibility_timeouts": stats.visibility_timeouts,
            "cluster_subscribe_visibility_skipped": stats.visibility_skipped,
            "cluster_stats_filter_clears_held": stats.clear_batches_held,
            "cluster_stats_forward_linger_batches": stats.forward_linger_batches,
            "cluster_stats_forward_linger_cut": stats.forward_linger_cut,
            "cluster_stats_addresses_refused": stats.addresses_refused,
        }
    )
    return fields


def cluster_nodes(
    ms: Membership,
    epoch: int,
    linked: Callable[[str], bool],
    now_ms: int,
    tls: bool = False,
) -> list[str]:
    """CLUSTER NODES: ``<id> <ip:port@cport[,hostname]> <flags> <master>
    <ping-sent> <pong-recv> <config-epoch> <link-state> <slot range>``, this
    node first (Redis 7.0's ``clusterGenNodeDescription``; ports as announced;
    ``tls``: the asking client came over TLS, so each node's TLS port where it
    has one, as Redis 7.0 reports TLS ports to TLS clients).
    ``linked(node_id)``: our outbound link to it is up (Redis shows its own
    link to the node). A node in FAIL, or not verified, serves no slots. An
    address being met that never answered is a ``handshake`` node with a
    random id, as Redis shows one (its client port as CLUSTER MEET gave it, or
    bus port - 10000 for a --join seed)."""
    me = ms.myself
    slots = {node_id: f" {start}-{end}" for start, end, node_id in live_slot_ranges(ms)}
    lines = [
        f"{me.node_id} {_address(me, tls)} myself,master - 0 0 {epoch} connected{slots[me.node_id]}"
    ]
    for rec in sorted(ms.peers.values(), key=lambda r: r.node_id):
        state = "connected" if linked(rec.node_id) else "disconnected"
        lines.append(
            f"{rec.node_id} {_address(rec, tls)} "
            f"{rec.flag_names()} - {rec.ping_sent_ms} {rec.pong_received_ms} 0 {state}"
            f"{slots.get(rec.node_id, '')}"
        )
    for (host, port), node_id, client in ms.pending_handshakes(now_ms):
        lines.append(f"{node_id} {host}:{client}@{port} handshake - 0 0 0 disconnected")
    return lines


def _address(rec: NodeRecord, tls: bool) -> str:
    """``ip:port@cport[,hostname]`` (Redis 7.0 adds the hostname after a comma)."""
    text = f"{rec.host}:{client_port(rec.client_port, rec.tls_port, tls)}@{rec.bus_port}"
    return f"{text},{rec.hostname}" if rec.hostname else text
