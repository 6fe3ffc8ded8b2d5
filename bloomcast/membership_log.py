"""Notice lines for nodes that join or are forgotten, read off CLUSTER NODES.

The bus logs failures and recoveries itself (logger ``bloomcast.bus``); a
node that joins, or that membership forgets or that left, shows only in its
view of the cluster. This reads that view through the node's ClusterLink
seam (``nodes_lines()``, Redis's CLUSTER NODES lines) on the node's loop and
logs the differences at notice, as Redis logs ``Node ... added`` /
``... forgotten``. It looks once a second, and rebuilds the lines only when
the seam's ``topology_version()`` moved: building them costs O(N), and an
idle node's cost must not grow with the cluster.
"""

from __future__ import annotations

import asyncio
import logging

from cluster_bus.api import ClusterLink

log = logging.getLogger("bloomcast.node")

PERIOD_S = 1.0


def peers(lines: list[str]) -> dict[str, tuple[str, str]]:
    """node id -> (``host:port@busport``, link state) of every node but this one
    (an address still in its handshake is no node yet: its id is a stand-in)."""
    out = {}
    for line in lines:
        parts = line.split()
        if len(parts) >= 8 and not {"myself", "handshake"} & set(parts[2].split(",")):
            out[parts[0]] = (parts[1], parts[7])
    return out


class MembershipLog:
    def __init__(self, link: ClusterLink) -> None:
        self.link = link
        self.known: dict[str, tuple[str, str]] = {}
        self.version: int | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.check()
        self._timer = loop.call_later(PERIOD_S, self._tick, loop)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self.check()
        finally:
            self._timer = loop.call_later(PERIOD_S, self._tick, loop)

    def check(self) -> None:
        version = self.link.topology_version()
        if version == self.version:
            return
        self.version = version
        now = peers(self.link.nodes_lines())
        for node_id, (addr, state) in now.items():
            before = self.known.get(node_id)
            if before is None:
                log.info("Node %s (%s) joined the cluster", node_id, addr)
            elif before[1] != state:
                up = "up" if state == "connected" else "down"
                log.info("Bus link to node %s (%s) is %s", node_id, addr, up)
        for node_id, (addr, _) in self.known.items():
            if node_id not in now:
                log.info("Node %s (%s) is no longer known (left or forgotten)", node_id, addr)
        self.known = now
