"""Node: one node agent's client side — the RESP server, its subscriptions and
the routing step every PUBLISH goes through.

PUBLISH = deliver to local subscribers (channels first, then patterns, as
Redis's ``pubsubPublishMessage``), then hand the message to the ClusterLink,
which forwards it to the peers whose filters may match (``NoPeers`` on a lone
node). The node is the cluster bus's :class:`cluster_bus.api.LocalDelivery`: a
forwarded PUBLISH is delivered the same way, judged by the registry's
false-positive policy, and never forwarded again. The node records the
traffic event of both (origin and receiver) when it has a traffic recorder.

Running a node in-process (tests)::

    node = Node(NodeConfig(port=0))
    await node.start()          # node.port is the bound port
    ...
    await node.stop()
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from itertools import count
from typing import TYPE_CHECKING, Any

from cluster_bus.addresses import first_host, listen
from cluster_bus.api import (
    ClusterLink,
    FilterChange,
    FilterName,
    FilterSnapshot,
    NoPeers,
    merge_changes,
)
from router import dataplane
from router.acl import Acl
from router.collector import Pauses
from router.config import NodeConfig
from router.connection import Connection
from router.context import CommandContext
from router.idle import IdleTimer
from router.kinds import CHANNELS, KIND_OF, Kind
from router.pause import ClientPause
from router.pubsub import PubSub
from router.registry import Registry
from router.settings import Settings
from router.stats import InstantaneousMetrics, NodeStats

if TYPE_CHECKING:
    from cluster_bus.frames import Publish
    from spark.events import Role, TrafficRecorder

log = logging.getLogger("bloomcast.node")

#: where a node tells its clients that forwarded messages were lost for good
LOSS_CHANNEL = b"__bloomcast__:loss"


#: origins INFO ``# Forwards_lost`` counts one by one (node ids come and go:
#: each restart is a new one); the losses of any further origin are summed
#: under :data:`OTHER_ORIGINS` (``from_others``)
FORWARDS_LOST_ORIGINS = 256
OTHER_ORIGINS = "others"


class NodeHotFields:
    """The fields of a node that the compiled request loop reads or writes
    per read (router/_dataplane.pyx), as slots, as
    :class:`router.connection.HotFields` is for a connection: read at
    their offsets instead of by a generic attribute lookup. A :class:`Node`
    keeps a dict for the rest."""

    __slots__ = (
        "_dirty",
        "_loop",
        "context",
        "link",
        "metrics",
        "publish_seq",
        "tap",
        "turn_output",
    )


class Node(NodeHotFields):
    """One node agent (client side). Not thread-safe: one asyncio loop."""

    def __init__(self, config: NodeConfig, node_id: str | None = None) -> None:
        self.config = config
        #: 40 hex digits; given when --cluster-config-file kept it from a former run
        self.node_id = node_id or os.urandom(20).hex()
        self.registry = Registry(config.filter_capacity, config.filter_fp_rate)  # the filters
        # subscriptions, delivery, the bulk-work budget (router/pubsub.py)
        self.pubsub = PubSub(self, self.registry)
        # collections timed once the process settles (router/collector.py)
        self.gc_pauses = Pauses()
        self.tap: TrafficRecorder | None = None  # set by whoever wires the node
        self.clients: dict[int, Connection] = {}
        self.stats = NodeStats()
        self.acl = Acl(config.requirepass)  # ACL users (router/acl/)
        self.metrics = InstantaneousMetrics(time.monotonic())
        self.pause = ClientPause()
        self.idle = IdleTimer(self.clients)
        #: what command handlers reach (router/context.py); its ``settings``
        #: are the live ones, swapped whole by CONFIG SET
        # the compiled data plane or the Python core, chosen once (issue 29)
        plane = dataplane.load()
        self.context = CommandContext(
            node_id=self.node_id,
            config=config,
            settings=Settings.from_config(config),
            pubsub=self.pubsub,
            acl=self.acl,
            stats=self.stats,
            pause=self.pause,
            clients=self.clients,
            link=NoPeers(self.node_id, first_host(config.bind), config.port),
            view=self,
            on_settings=self.idle.settings_changed,
            parser_class=dataplane.parser_class(plane),
            connection_class=dataplane.connection_class(plane),
            data_plane=dataplane.name(plane),
        )
        #: the protocol of its client connections (the compiled twin's or the reference)
        self.client_class = dataplane.client_class(plane)
        #: the cluster bus seam: ``NoPeers`` until :meth:`set_link`
        self.link: ClusterLink = self.context.link
        self.port = config.port
        self.publish_seq = 0
        #: origin node id -> frames lost (at most FORWARDS_LOST_ORIGINS ids; the
        #: rest under OTHER_ORIGINS)
        self.forwards_lost_from: dict[str, int] = {}
        self.started = time.time()
        self._ids = count(1)
        self._dirty: list[Connection] = []  # clients with queued pub/sub output
        # bytes write_to_all queued since the last flush (bounded by the
        # pubsub hard limit: past it every queue is written at once)
        self.turn_output = 0
        # the running loop, looked up once: asyncio.get_running_loop() makes a
        # getpid() system call, and schedule_flush runs once per loop turn
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[asyncio.base_events.Server] = []  # one per bind address
        self._tls_servers: list[asyncio.base_events.Server] = []
        dataplane.bind_node(plane, self)  # the compiled flush_all, or the method below

    def set_link(self, link: ClusterLink) -> None:
        """Wire the cluster bus (:mod:`cluster_bus.api`), before clients are
        served: the bus needs the node (its ``LocalDelivery``) and its bound
        port, so the composition root makes it after ``start(serve=False)``.
        The node's delivery and its command context read the same link."""
        self.link = self.context.link = link

    # ------------------------------------------------------------ lifecycle

    async def start(self, serve: bool = True) -> None:
        """Listen on ``config.bind:config.port`` (port 0: any free port, see
        ``port``). ``serve=False`` binds the ports but accepts no client until
        :meth:`start_serving`: the composition root first wires and starts the
        bus, so no SUBSCRIBE reaches a bus that is not started yet."""
        if self.config.aclfile:
            from router.acl.aclfile import AclFileError, load_file

            error = load_file(self.context, self.config.aclfile)
            if error:
                raise AclFileError(error)
        backlog = self.config.tcp_backlog
        self._servers, self.port = await listen(
            lambda: self.client_class(self),
            self.config.bind,
            self.config.port,
            serve=serve,
            backlog=backlog,
        )
        self.context.port = self.port
        if self.config.tls_port:
            from router.tls import TlsClientProtocol, server_context

            context = server_context(self.config)
            self._tls_servers, _ = await listen(
                lambda: TlsClientProtocol(context, self.client_class(self), self._tls_failed),
                self.config.bind,
                self.config.tls_port,
                serve=serve,
                backlog=backlog,
            )
        if isinstance(self.link, NoPeers):
            self.set_link(NoPeers(self.node_id, first_host(self.config.bind), self.port))
        self.idle.set_timeout(self.context.settings.timeout)

    def _tls_failed(self, reason: str) -> None:
        """A connection to the TLS port that did not complete the handshake
        (a plain client, no CA-signed certificate): closed, as Redis does."""
        self.stats.tls_handshake_failures += 1
        log.debug("TLS handshake failed: %s", reason)

    async def start_serving(self) -> None:
        """Accept clients (after ``start(serve=False)``)."""
        for server in (*self._servers, *self._tls_servers):
            await server.start_serving()

    async def stop(self) -> None:
        self.idle.set_timeout(0)
        for server in self._tls_servers:
            server.close()
            await server.wait_closed()
        self._tls_servers = []
        if self._servers:
            for server in self._servers:
                server.close()
            for client in list(self.clients.values()):
                client.close_now()
            for server in self._servers:
                await server.wait_closed()
            self._servers = []

    def schedule_flush(self, client: Connection) -> None:
        """Flush ``client``'s queued messages at the end of this loop turn."""
        if not self._dirty:
            loop = self._loop
            if loop is None or loop.is_closed():
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self.flush_all)
        self._dirty.append(client)

    def flush_all(self) -> None:
        """Write every queued client's output: at the end of a loop turn, or
        sooner when the turn's output passed the pubsub hard limit."""
        dirty, self._dirty = self._dirty, []
        self.turn_output = 0
        for client in dirty:
            client.flush()
        if time.monotonic() >= self.metrics.next_sample:  # a 100 ms period passed
            self.sample_metrics()

    def sample_metrics(self) -> None:
        """INFO's instantaneous metrics, sampled lazily (:mod:`router.stats`)."""
        stats = self.stats
        self.metrics.sample(
            time.monotonic(),
            (stats.commands_processed, stats.net_input_bytes, stats.net_output_bytes),
        )

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT (Redis ``resetServerStats`` and the command table's)."""
        self.stats.reset()
        self.metrics.reset(time.monotonic(), (0, 0, 0))

    def info_sections(self) -> dict[str, dict[str, object]]:
        """Every INFO section (:mod:`router.info`)."""
        from router.info import info_sections

        return info_sections(self)  # type: ignore[return-value]

    def next_client_id(self) -> int:
        return next(self._ids)

    def client_disconnected(self, client: Connection) -> None:
        self.clients.pop(client.id, None)
        if client.channels or client.shard_channels or client.patterns:
            # under the shared budget: 4,600 clients leaving at once are
            # dropped over several loop turns, other clients served between
            self.pubsub.drop(client)

    # ------------------------------------------------------------ pub/sub

    def publish(self, channel: bytes, message: bytes, kind: Kind) -> int:
        """A client's PUBLISH/SPUBLISH (``kind`` CHANNELS / SHARD_CHANNELS):
        local delivery + forwarding; returns the local receivers (Redis
        Cluster's reply)."""
        self.stats.publish_received += 1
        receivers = self.pubsub.deliver(kind, channel, message)
        self.publish_seq += 1
        seq = self.publish_seq
        forwarded = self.link.forward_publish(channel, message, kind.shard, seq)
        if self.tap is not None:
            self._record(
                "origin", self.node_id, seq, channel, message, kind.shard, receivers, forwarded
            )
        return receivers

    def deliver_forwarded(
        self, origin: str, origin_seq: int, channel: bytes, message: bytes, shard: bool
    ) -> None:
        """A PUBLISH a peer forwarded (LocalDelivery): deliver it, never forward
        it again. No receiver makes it a false positive of our filter, which
        the registry's resize policy judges; a rebuilt filter is announced."""
        receivers = self.pubsub.deliver(KIND_OF[shard], channel, message)
        changes = self.registry.forward_received(receivers == 0)
        if changes:
            self.link.filters_changed(changes)
        if self.tap is not None:
            self._record("receiver", origin, origin_seq, channel, message, shard, receivers, 0)

    def deliver_forwarded_run(self, origin: str, msgs: list[Publish], count: int) -> None:
        """The first ``count`` of a run of PUBLISH frames ``origin`` forwarded
        (LocalDelivery), each delivered as :meth:`deliver_forwarded` does."""
        deliver = self.deliver_forwarded
        for i in range(count):
            _, origin_seq, shard, channel, payload = msgs[i]
            deliver(origin, origin_seq, channel, payload, shard)

    def _record(
        self,
        role: Role,
        origin: str,
        origin_seq: int,
        channel: bytes,
        message: bytes,
        shard: bool,
        receivers: int,
        forwarded: int,
    ) -> None:
        """The traffic event of one PUBLISH this node handled (spark.events)."""
        tap = self.tap
        event_id = f"{origin}-{origin_seq}"
        if tap is None or not tap.keeps(event_id):
            return
        # imported here: only a node with a tap records (and its tap, in
        # spark.tap, has imported the module already); ~0.45 MB on every other node
        from spark.events import TrafficEvent, channel_text

        tap.record(
            TrafficEvent(
                event_id=event_id,
                time=time.time(),
                node=self.node_id,
                role=role,
                channel=channel_text(channel),
                bytes=len(message),
                receivers=receivers,
                forwarded=forwarded,
                peers=self.link.peer_count(),
                false_positive=role == "receiver" and receivers == 0,
                shard=shard,
            )
        )

    def forwards_lost(self, origin: str, count: int, from_ms: int, to_ms: int) -> None:
        """LocalDelivery: ``count`` forwards from ``origin`` are lost for good.
        Counted per origin (INFO), announced on ``__bloomcast__:loss`` to local
        subscribers (JSON: ``node``, ``lost``, and ``from`` / ``to``: seconds
        since the epoch, bounds on when ``origin`` received those PUBLISHes
        from its clients, as its replay buffer's stamps give them), and with
        ``--on-publish-loss disconnect`` every client subscribed to anything
        else is closed, so it resubscribes and knows it may have missed
        messages (redis/redis #122)."""
        self.stats.forwards_lost += count
        by_origin = self.forwards_lost_from
        if origin not in by_origin and len(by_origin) >= FORWARDS_LOST_ORIGINS:
            origin = OTHER_ORIGINS  # a churning cluster's ids do not grow the map
        by_origin[origin] = by_origin.get(origin, 0) + count
        note = {
            "node": origin,
            "lost": count,
            "from": round(from_ms / 1000, 3),
            "to": round(to_ms / 1000, 3),
        }
        self.pubsub.deliver(
            CHANNELS, LOSS_CHANNEL, json.dumps(note, separators=(",", ":")).encode()
        )
        if self.config.on_publish_loss != "disconnect":
            return
        for client in list(self.clients.values()):
            if (
                (client.channels.keys() - {LOSS_CHANNEL})
                or client.patterns
                or client.shard_channels
            ):
                self.stats.loss_disconnections += 1
                client.close_now()
        log.warning(
            "clients closed after a loss of %d forwards (on-publish-loss disconnect)", count
        )

    def filter_snapshot(self, name: FilterName) -> FilterSnapshot:
        """One of our filters whole (LocalDelivery: the bus sends it as FILTER_FULL)."""
        return self.registry.snapshot(name)

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        """Tell the ClusterLink what one command (or a disconnect) changed, folded
        into at most one change per filter, so it is one delta round on the bus;
        returns the link's visibility future, if any."""
        if not changes:
            return None
        return self.link.filters_changed(merge_changes(changes))

    def after(self, future: asyncio.Future[Any], reply: bytes) -> asyncio.Future[bytes]:
        """A future of ``reply`` that resolves once ``future`` has, however it ends."""
        done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def finish(ended: asyncio.Future[Any]) -> None:
            if not ended.cancelled():
                ended.exception()  # retrieved: a failed wait still confirms
            if not done.done():
                done.set_result(reply)

        future.add_done_callback(finish)
        return done

    # ------------------------------------------------------------ INFO

    def cluster_info(self) -> dict[str, int | str]:
        """CLUSTER INFO: the bus's fields and the node's receive-side counters."""
        registry = self.registry
        return {
            **self.link.info_fields(),
            "cluster_stats_false_positives_received": registry.false_positives_received,
            "cluster_stats_filter_resizes": registry.filter_epoch,
        }
