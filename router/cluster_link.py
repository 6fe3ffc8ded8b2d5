"""The seam between the node (router/) and the cluster bus (cluster_bus/).

The node calls a :class:`ClusterLink` on every client PUBLISH and after every
local filter change; the cluster bus calls the node's :class:`LocalDelivery`
when a forwarded PUBLISH arrives. A single node runs with :class:`NoPeers`,
so PUBLISH always goes through the same routing step, whether or not there
are peers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from spark.tap import TrafficTap

FilterName = Literal["channels", "patterns"]


@dataclass(frozen=True, slots=True)
class FilterChange:
    """Bits of a local filter's exported bit vector that flipped in one operation.

    ``set_positions`` went 0 -> 1, ``cleared_positions`` went 1 -> 0; positions
    are already reduced mod the filter's m. ``fingerprint`` is the filter's
    CRC64 after the change (the base the next delta applies to).
    """

    filter: FilterName
    set_positions: tuple[int, ...]
    cleared_positions: tuple[int, ...]
    fingerprint: int


def merge_changes(changes: list[FilterChange]) -> list[FilterChange]:
    """Fold a sequence of changes into at most one per filter: each position
    ends set or cleared as its last change left it, and the fingerprint is the
    last one. (One command's changes become one delta round on the bus.)"""
    if len(changes) <= 1:
        return changes
    merged: list[FilterChange] = []
    for name in ("channels", "patterns"):
        last: dict[int, bool] = {}
        fingerprint = None
        for change in changes:
            if change.filter != name:
                continue
            last.update(dict.fromkeys(change.set_positions, True))
            last.update(dict.fromkeys(change.cleared_positions, False))
            fingerprint = change.fingerprint
        if fingerprint is not None:
            merged.append(
                FilterChange(
                    name,
                    tuple(p for p, on in last.items() if on),
                    tuple(p for p, on in last.items() if not on),
                    fingerprint,
                )
            )
    return merged


class LocalDelivery(Protocol):
    """What the node offers the cluster bus."""

    node_id: str  # 40 lowercase hex characters, as a Redis Cluster node id
    tap: TrafficTap | None  # the traffic tap, when --traffic-dir is given

    def deliver(self, channel: bytes, message: bytes, shard: bool) -> int:
        """Deliver a PUBLISH to local subscribers (channels, patterns, or shard
        channels when ``shard``); return the number of local receivers."""
        ...


class ClusterLink(Protocol):
    """What the cluster bus offers the node."""

    def forward_publish(self, channel: bytes, message: bytes, shard: bool, origin_seq: int) -> int:
        """Send a client's PUBLISH to every peer whose filters may match; return
        how many peers it was sent to. Never blocks; never re-forwards.

        ``origin_seq`` is the node's own PUBLISH counter; it travels with the
        forward so receivers' traffic events carry the same event id
        ``"<origin node id>-<origin_seq>"`` as the origin's."""
        ...

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        """Announce local filter changes (a delta to every peer). Returns a future
        the node awaits before sending the (P)SUBSCRIBE confirmation when
        subscribe visibility is on, else None."""
        ...

    def info_fields(self) -> dict[str, int | str]:
        """CLUSTER INFO fields, Redis's names where the concept is the same."""
        ...

    def nodes_lines(self) -> list[str]:
        """CLUSTER NODES lines in Redis's format, this node first."""
        ...

    def peer_count(self) -> int:
        """Other nodes known (what a broadcast would send each PUBLISH to)."""
        ...


class NoPeers:
    """The ClusterLink of a node with no cluster bus: nothing to forward to."""

    def __init__(self, node_id: str, host: str, port: int) -> None:
        self._node_id = node_id
        self._host = host
        self._port = port

    def forward_publish(self, channel: bytes, message: bytes, shard: bool, origin_seq: int) -> int:
        return 0

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        return None

    def info_fields(self) -> dict[str, int | str]:
        return {
            "cluster_state": "ok",
            "cluster_slots_assigned": 0,
            "cluster_known_nodes": 1,
            "cluster_size": 0,
            "cluster_current_epoch": 0,
            "cluster_my_epoch": 0,
            "cluster_stats_messages_sent": 0,
            "cluster_stats_messages_received": 0,
        }

    def nodes_lines(self) -> list[str]:
        return [
            f"{self._node_id} {self._host}:{self._port}@{self._port + 10000} "
            "myself,master - 0 0 0 connected"
        ]

    def peer_count(self) -> int:
        return 0
