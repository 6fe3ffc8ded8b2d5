"""Cluster membership as pure state: known nodes, failure detection, gossip.

No sockets and no clock of its own: every method takes ``now_ms`` (milliseconds
since the Unix epoch), so the rules are tested with a fake time.

Rules (after Redis Cluster, ``cluster_legacy.c`` and the cluster spec):
- A node with a PING outstanding for more than ``node_timeout_ms`` is flagged
  PFAIL ("suspected") by this node.
- Gossip sections carry each sender's flags about other nodes; a PFAIL or FAIL
  flag there is a *failure report* by the sender, kept for 2 x node_timeout_ms.
- A PFAIL node becomes FAIL when failure reports (this node's own suspicion
  included) come from a majority of the known nodes (N // 2 + 1, N counting
  this node and the failed one, as Redis counts masters); this node then
  broadcasts FAIL, and a FAIL received from a peer is accepted as is.
- A PONG from a PFAIL or FAIL node clears the flag (our nodes own no slots,
  so Redis's "master without slots" rule applies: clear at once).
- A node that left (LEAVE) or was replaced by a new node id at the same bus
  address is forgotten and ignored in gossip for ``FORGET_TTL_MS`` (Redis's
  CLUSTER FORGET blacklist is 60 s).
- ``cluster_state`` is ``ok`` while this node reaches a majority of the known
  nodes (itself included), ``fail`` in a minority partition.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cluster_bus.frames import GossipEntry, NodeFlags

FORGET_TTL_MS = 60_000


@dataclass
class NodeRecord:
    """One known node as this node sees it."""

    node_id: str
    host: str
    client_port: int
    bus_port: int
    flags: NodeFlags = NodeFlags.NONE
    ping_sent_ms: int = 0  # 0 = no PING outstanding
    pong_received_ms: int = 0
    fail_time_ms: int = 0
    connected: bool = False  # a live, authenticated link
    fail_reports: dict[str, int] = field(default_factory=dict)  # reporter -> ms

    @property
    def failing(self) -> bool:
        return bool(self.flags & (NodeFlags.PFAIL | NodeFlags.FAIL))

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
    ) -> None:
        self.my_id = my_id
        self.node_timeout_ms = node_timeout_ms
        self.myself = NodeRecord(my_id, host, client_port, bus_port, NodeFlags.MYSELF)
        self.peers: dict[str, NodeRecord] = {}
        self._forgotten: dict[str, int] = {}  # node id -> until ms
        self._rng = rng or random.Random()

    # -- learning nodes ----------------------------------------------------------

    def learn(
        self,
        node_id: str,
        host: str,
        client_port: int,
        bus_port: int,
        now_ms: int,
        direct: bool = False,
    ) -> NodeRecord | None:
        """Add or update a node; return the record when it is new, else None.

        A node with a new id at the bus address of a known one replaces it (the
        node restarted with a new id); the old id is forgotten. ``direct``: the
        node itself spoke to us (authenticated link), which overrides a forget."""
        if node_id == self.my_id:
            return None
        if direct:
            self._forgotten.pop(node_id, None)
        elif self._is_forgotten(node_id, now_ms):
            return None
        rec = self.peers.get(node_id)
        if rec is not None:
            rec.host, rec.client_port, rec.bus_port = host, client_port, bus_port
            return None
        for old in list(self.peers.values()):
            if old.host == host and old.bus_port == bus_port:
                self.forget(old.node_id, now_ms)
        rec = NodeRecord(node_id, host, client_port, bus_port)
        self.peers[node_id] = rec
        return rec

    def forget(self, node_id: str, now_ms: int) -> NodeRecord | None:
        """Drop a node (LEAVE, or replaced) and ignore gossip about it for a while."""
        self._forgotten[node_id] = now_ms + FORGET_TTL_MS
        for rec in self.peers.values():
            rec.fail_reports.pop(node_id, None)
        return self.peers.pop(node_id, None)

    def _is_forgotten(self, node_id: str, now_ms: int) -> bool:
        until = self._forgotten.get(node_id)
        if until is None:
            return False
        if now_ms >= until:
            del self._forgotten[node_id]
            return False
        return True

    # -- heartbeats --------------------------------------------------------------

    def ping_sent(self, node_id: str, now_ms: int) -> None:
        rec = self.peers.get(node_id)
        if rec is not None and rec.ping_sent_ms == 0:
            rec.ping_sent_ms = now_ms

    def pong_received(self, node_id: str, now_ms: int) -> bool:
        """Record a PONG (or any sign of life with the peer's identity).

        Returns True when it cleared a PFAIL/FAIL flag."""
        rec = self.peers.get(node_id)
        if rec is None:
            return False
        rec.ping_sent_ms = 0
        rec.pong_received_ms = now_ms
        if rec.failing:
            rec.flags &= ~(NodeFlags.PFAIL | NodeFlags.FAIL)
            rec.fail_time_ms = 0
            rec.fail_reports.clear()
            return True
        return False

    def check_timeouts(self, now_ms: int) -> list[str]:
        """Flag PFAIL on PING timeouts, expire old reports, and return the ids this
        node has just marked FAIL (to be broadcast)."""
        newly_failed = []
        for rec in self.peers.values():
            if (
                rec.ping_sent_ms
                and now_ms - rec.ping_sent_ms > self.node_timeout_ms
                and not rec.failing
            ):
                rec.flags |= NodeFlags.PFAIL
            horizon = now_ms - 2 * self.node_timeout_ms
            for reporter, at in list(rec.fail_reports.items()):
                if at < horizon:
                    del rec.fail_reports[reporter]
            if self._agreed_failed(rec, now_ms):
                newly_failed.append(rec.node_id)
        return newly_failed

    # -- gossip ------------------------------------------------------------------

    def gossip_received(
        self, reporter: str, entries: tuple[GossipEntry, ...], now_ms: int
    ) -> tuple[list[NodeRecord], list[str]]:
        """Apply a heartbeat's gossip section from ``reporter``.

        Returns (nodes learned, to be met; ids this node has just marked FAIL)."""
        learned: list[NodeRecord] = []
        failed: list[str] = []
        if reporter not in self.peers:
            return learned, failed
        for g in entries:
            if g.node_id == self.my_id:
                continue
            rec = self.peers.get(g.node_id)
            suspect = bool(g.flags & (NodeFlags.PFAIL | NodeFlags.FAIL))
            if rec is None:
                if suspect or g.flags & NodeFlags.LEAVING:
                    continue  # do not start meeting a node others think is down
                new = self.learn(g.node_id, g.host, g.client_port, g.bus_port, now_ms)
                if new is not None:
                    learned.append(new)
                continue
            if suspect:
                rec.fail_reports[reporter] = now_ms
                if self._agreed_failed(rec, now_ms):
                    failed.append(rec.node_id)
            else:
                rec.fail_reports.pop(reporter, None)
        return learned, failed

    def fail_received(self, node_id: str, now_ms: int) -> bool:
        """A peer broadcast FAIL about ``node_id``: accept it. True if it changed."""
        rec = self.peers.get(node_id)
        if rec is None or rec.flags & NodeFlags.FAIL:
            return False
        if (
            rec.connected
            and rec.pong_received_ms
            and now_ms - rec.pong_received_ms < (self.node_timeout_ms)
        ):
            return False  # we hear from it ourselves: it is not failed for us
        rec.flags = (rec.flags & ~NodeFlags.PFAIL) | NodeFlags.FAIL
        rec.fail_time_ms = now_ms
        return True

    def quorum(self) -> int:
        """Failure reports needed to mark a node FAIL: N // 2 + 1, N all known nodes."""
        return (len(self.peers) + 1) // 2 + 1

    def _agreed_failed(self, rec: NodeRecord, now_ms: int) -> bool:
        if not rec.flags & NodeFlags.PFAIL or rec.flags & NodeFlags.FAIL:
            return False
        reporters = sum(
            1
            for reporter in rec.fail_reports
            if reporter in self.peers and not self.peers[reporter].failing
        )
        if reporters + 1 < self.quorum():  # +1: our own PFAIL
            return False
        rec.flags = (rec.flags & ~NodeFlags.PFAIL) | NodeFlags.FAIL
        rec.fail_time_ms = now_ms
        return True

    def gossip_sample(self, about_to: str, count: int) -> tuple[GossipEntry, ...]:
        """Up to ``count`` entries for a heartbeat to ``about_to``: every failing
        node first (failure reports must spread), then a random sample."""
        others = [r for r in self.peers.values() if r.node_id != about_to]
        failing = [r for r in others if r.failing]
        healthy = [r for r in others if not r.failing]
        self._rng.shuffle(healthy)
        chosen = (failing + healthy)[:count]
        return tuple(
            GossipEntry(
                r.node_id,
                r.host,
                r.client_port,
                r.bus_port,
                int(r.flags & (NodeFlags.PFAIL | NodeFlags.FAIL)),
                r.pong_received_ms,
            )
            for r in chosen
        )

    # -- views -------------------------------------------------------------------

    def cluster_state(self) -> str:
        """``ok`` while this node reaches a majority of the known nodes, else ``fail``."""
        reachable = 1 + sum(1 for r in self.peers.values() if not r.failing)
        return "ok" if reachable * 2 > len(self.peers) + 1 else "fail"

    def count(self, flag: NodeFlags) -> int:
        return sum(1 for r in self.peers.values() if r.flags & flag)
