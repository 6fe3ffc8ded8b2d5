"""Node: one node agent's client side — the RESP server, its subscriptions and
the routing step every PUBLISH goes through.

PUBLISH = deliver to local subscribers (channels first, then patterns, as
Redis's ``pubsubPublishMessage``), then hand the message to the ClusterLink,
which forwards it to the peers whose filters may match (``NoPeers`` on a lone
node). The node is the cluster bus's :class:`router.cluster_link.LocalDelivery`.

Running a node in-process (tests)::

    node = Node(NodeConfig(port=0))
    await node.start()          # node.port is the bound port
    ...
    await node.stop()
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from itertools import count

from router import resp
from router.client import Client
from router.cluster_link import ClusterLink, FilterChange, NoPeers, merge_changes
from router.config import NodeConfig
from router.registry import Registry, Subscriber
from spark.events import TrafficEvent, channel_text
from spark.tap import TrafficTap

# pub/sub frames in RESP2, % (len, bytes) per bulk that follows the kind
_MESSAGE_HEAD = b"*3\r\n$7\r\nmessage\r\n"
_BULK = tuple(b"$%d\r\n" % n for n in range(1024))  # bulk headers of short strings
_CRLF = b"\r\n"
_MESSAGE = b"*3\r\n$7\r\nmessage\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"
_SMESSAGE = b"*3\r\n$8\r\nsmessage\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"
_PMESSAGE = b"*4\r\n$8\r\npmessage\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"


@dataclass
class NodeStats:
    """Counters shown in INFO (Redis's names)."""

    connections_received: int = 0
    commands_processed: int = 0
    output_buffer_limit_disconnections: int = 0
    rejected_connections: int = 0
    publish_received: int = 0  # client PUBLISH/SPUBLISH handled here
    messages_delivered: int = 0  # messages written to local subscribers


class Node:
    """One node agent (client side). Not thread-safe: one asyncio loop."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.node_id = os.urandom(20).hex()
        self.registry = Registry(config.filter_capacity, config.filter_fp_rate)
        self.link: ClusterLink = NoPeers(self.node_id, config.bind, config.port)
        self.tap: TrafficTap | None = None
        self.clients: dict[int, Client] = {}
        self.stats = NodeStats()
        self.port = config.port
        self.publish_seq = 0
        self.started = time.time()
        self._ids = count(1)
        self._dirty: list[Client] = []  # clients with queued pub/sub output
        self._server: asyncio.base_events.Server | None = None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Listen on ``config.bind:config.port`` (port 0: any free port, see ``port``)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Client(self), self.config.bind, self.config.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if isinstance(self.link, NoPeers):
            self.link = NoPeers(self.node_id, self.config.bind, self.port)
        if self.config.traffic_dir:
            self.tap = TrafficTap(
                self.config.traffic_dir, self.config.traffic_sample, node=self.node_id
            )
            self.tap.start(loop)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for client in list(self.clients.values()):
                if client.transport is not None:
                    client.flush()
                    client.transport.close()
            await self._server.wait_closed()
            self._server = None
        if self.tap is not None:
            self.tap.close()

    def schedule_flush(self, client: Client) -> None:
        """Flush ``client``'s queued messages at the end of this loop turn."""
        if not self._dirty:
            asyncio.get_running_loop().call_soon(self._flush_all)
        self._dirty.append(client)

    def _flush_all(self) -> None:
        dirty, self._dirty = self._dirty, []
        for client in dirty:
            client.flush()

    def next_client_id(self) -> int:
        return next(self._ids)

    def client_connected(self, client: Client) -> None:
        self.stats.connections_received += 1
        if len(self.clients) >= self.config.maxclients:
            self.stats.rejected_connections += 1
            client.write(resp.error("ERR max number of clients reached"))
            client.close_after_reply()
            if client.transport is not None:
                client.flush()
                client.transport.close()
            return
        self.clients[client.id] = client

    def client_disconnected(self, client: Client) -> None:
        self.clients.pop(client.id, None)
        self.filters_changed(self.registry.drop_client(client))

    # ------------------------------------------------------------ pub/sub

    def publish(self, channel: bytes, message: bytes, shard: bool) -> int:
        """A client's PUBLISH/SPUBLISH: local delivery + forwarding; returns the
        local receivers (Redis Cluster's reply)."""
        self.stats.publish_received += 1
        receivers = self.deliver(channel, message, shard)
        self.publish_seq += 1
        seq = self.publish_seq
        forwarded = self.link.forward_publish(channel, message, shard, seq)
        tap = self.tap
        if tap is not None:
            event_id = f"{self.node_id}-{seq}"
            if tap.keeps(event_id):
                tap.record(
                    TrafficEvent(
                        event_id=event_id,
                        time=time.time(),
                        node=self.node_id,
                        role="origin",
                        channel=channel_text(channel),
                        bytes=len(message),
                        receivers=receivers,
                        forwarded=forwarded,
                        peers=self.link.peer_count(),
                        false_positive=False,
                        shard=shard,
                    )
                )
        return receivers

    def deliver(self, channel: bytes, message: bytes, shard: bool) -> int:
        """Write a message to this node's subscribers; returns how many got it.

        Each frame is encoded once (RESP2; RESP3 swaps the ``*`` for ``>``)
        and the same bytes go to every receiver; nothing is encoded without one.
        """
        registry = self.registry
        if shard:
            subs = registry.shard_channels.get(channel)
            if not subs:
                return 0
            delivered = _write_all(subs, _SMESSAGE % (len(channel), channel, len(message), message))
        else:
            subs = registry.channels.get(channel)
            patterns = registry.patterns
            if not subs and not patterns.lengths:
                return 0
            delivered = 0
            if subs:
                size_c, size_m = len(channel), len(message)
                if size_c < 1024 and size_m < 1024:  # the common case, without %-formatting
                    frame = b"".join(
                        (
                            _MESSAGE_HEAD,
                            _BULK[size_c],
                            channel,
                            _CRLF,
                            _BULK[size_m],
                            message,
                            _CRLF,
                        )
                    )
                else:
                    frame = _MESSAGE % (size_c, channel, size_m, message)
                delivered = _write_all(subs, frame)
            if patterns.lengths:
                for pattern, psubs in patterns.matches(channel):
                    frame = _PMESSAGE % (
                        len(pattern),
                        pattern,
                        len(channel),
                        channel,
                        len(message),
                        message,
                    )
                    delivered += _write_all(psubs, frame)
        self.stats.messages_delivered += delivered
        return delivered

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        """Tell the ClusterLink what one command (or a disconnect) changed, folded
        into at most one change per filter, so it is one delta round on the bus;
        returns the link's visibility future, if any."""
        if not changes:
            return None
        return self.link.filters_changed(merge_changes(changes))

    def after(self, future: asyncio.Future[None], reply: bytes) -> asyncio.Future[bytes]:
        """A future of ``reply`` that resolves once ``future`` has, however it ends."""
        done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def finish(ended: asyncio.Future[None]) -> None:
            if not ended.cancelled():
                ended.exception()  # retrieved: a failed wait still confirms
            if not done.done():
                done.set_result(reply)

        future.add_done_callback(finish)
        return done

    # ------------------------------------------------------------ INFO

    def info_sections(self) -> dict[str, dict[str, int | str]]:
        c = self.config
        registry = self.registry
        pubsub_clients = sum(
            1 for cl in self.clients.values() if cl.channels or cl.patterns or cl.shard_channels
        )
        sections: dict[str, dict[str, int | str]] = {
            "server": {
                "redis_version": "7.2.0",
                "bloomcast_version": "0.1.0",
                "redis_mode": "cluster",
                "process_id": os.getpid(),
                "run_id": self.node_id,
                "node_id": self.node_id,
                "tcp_port": self.port,
                "uptime_in_seconds": int(time.time() - self.started),
            },
            "clients": {
                "connected_clients": len(self.clients),
                "maxclients": c.maxclients,
                "pubsub_clients": pubsub_clients,
                "blocked_clients": 0,
            },
            "stats": {
                "total_connections_received": self.stats.connections_received,
                "total_commands_processed": self.stats.commands_processed,
                "rejected_connections": self.stats.rejected_connections,
                "pubsub_channels": len(registry.channels),
                "pubsub_patterns": len(registry.patterns),
                "pubsubshard_channels": len(registry.shard_channels),
                "client_output_buffer_limit_disconnections": (
                    self.stats.output_buffer_limit_disconnections
                ),
                "total_publish_received": self.stats.publish_received,
                "total_messages_delivered": self.stats.messages_delivered,
            },
            "filters": dict(registry.filter_info()),
            "cluster": {"cluster_enabled": 1, **self.link.info_fields()},
        }
        if self.tap is not None:
            sections["traffic"] = dict(self.tap.info_fields())
        return sections


def _write_all(subs: set[Subscriber], frame2: bytes) -> int:
    """Write one pub/sub frame (RESP2 bytes) to every client in ``subs``."""
    frame3: bytes | None = None
    for client in subs:
        if client.resp == 2:
            client.write(frame2)
        else:
            if frame3 is None:
                frame3 = b">" + frame2[1:]  # same count, push type
            client.write(frame3)
    return len(subs)
