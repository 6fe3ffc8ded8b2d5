"""One known node as this node sees it: address, SWIM state, announced filters.

The rules that change these records are in :mod:`cluster_bus.membership`.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster_bus.frames import GossipEntry, NodeFlags

#: the flags that mean "not answering": suspected (PFAIL) or failed (FAIL)
SUSPECT_FLAGS = NodeFlags.PFAIL | NodeFlags.FAIL


@dataclass
class NodeRecord:
    """One known node as this node sees it."""

    node_id: str
    host: str
    client_port: int
    bus_port: int
    flags: int = NodeFlags.NONE  # NodeFlags bits
    incarnation: int = 0
    ping_sent_ms: int = 0  # a direct PING outstanding since (0 = none): CLUSTER NODES
    pong_received_ms: int = 0  # last heartbeat heard from the node itself
    acked_ms: int = 0  # last sign the node answers (its heartbeat or a PROBE_ACK)
    suspect_since_ms: int = 0
    fail_time_ms: int = 0
    connected: bool = False  # a live, authenticated link
    #: its own heartbeat (or a probe's ack) reached us at least once: it was
    #: met, so probes judge it (one known only from gossip is not probed)
    heard: bool = False
    #: the node's filters as last announced (its own heartbeat, or newer gossip)
    filter_epoch: int = 0
    channel_fp: int = 0
    pattern_fp: int = 0
    tls_port: int = 0  # its client TLS port, as announced (0: none)
    hostname: str = ""  # its cluster-announce-hostname, as announced
    #: ``host`` is the address its link came from, not one it announced (it
    #: has not learned its own IP yet): behind a NAT or a forwarder, several
    #: nodes come from one address, so until it announces one it replaces no
    #: other node's record, none replaces it, and it is not gossiped
    inferred: bool = False

    @property
    def failing(self) -> bool:
        return bool(self.flags & SUSPECT_FLAGS)

    def rank(self) -> int:
        """0 alive, 1 suspected, 2 failed: with the incarnation, SWIM's order."""
        return 2 if self.flags & NodeFlags.FAIL else 1 if self.flags & NodeFlags.PFAIL else 0

    def entry(self) -> GossipEntry:
        return GossipEntry(
            self.node_id,
            self.host,
            self.client_port,
            self.bus_port,
            self.flags & SUSPECT_FLAGS,
            self.incarnation,
            self.filter_epoch,
            self.channel_fp,
            self.pattern_fp,
            self.tls_port,
            self.hostname,
        )

    def flag_names(self) -> str:
        """Flags as CLUSTER NODES writes them (``myself,master,fail?`` ...)."""
        names = ["myself"] if self.flags & NodeFlags.MYSELF else []
        names.append("master")
        if self.flags & NodeFlags.FAIL:
            names.append("fail")
        elif self.flags & NodeFlags.PFAIL:
            names.append("fail?")
        if self.flags & NodeFlags.HANDSHAKE:
            names.append("handshake")
        if self.flags & NodeFlags.NOADDR:
            names.append("noaddr")
        return ",".join(names)


@dataclass(slots=True)
class LostNode:
    """A peer forgotten after standing in FAIL (``fail_forget_ms``): gone from
    CLUSTER NODES and the slot map, but it may be cut off rather than dead, so
    its address is redialled until it is back, a new node id takes the
    address, or CLUSTER FORGET drops it; until then it counts in
    ``cluster_state`` (cluster_bus.membership)."""

    node_id: str
    host: str
    client_port: int
    bus_port: int
    since_ms: int  # when it was forgotten


def rank_of(flags: int) -> int:
    return 2 if flags & NodeFlags.FAIL else 1 if flags & NodeFlags.PFAIL else 0
