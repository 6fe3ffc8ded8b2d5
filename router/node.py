"""Node: one node agent's client side: its lifecycle (listeners, start and
stop, the cluster link), its parts and INFO.

The node builds its parts from the data plane it runs
(:mod:`router.dataplane`: the compiled one or the pure-Python data plane): the
pub/sub (:class:`router.pubsub.PubSub`: the subscriber tables, PUBLISH,
delivery of local and forwarded messages, the end-of-iteration flush; it is the
cluster bus's :class:`cluster_bus.api.LocalDelivery`), the bulk work of
(P|S)(UN)SUBSCRIBE (:mod:`router.subscriptions`), the command context
(:mod:`router.context`) and the protocol of its client connections
(:class:`router.client.Client`).

Running a node in-process (tests)::

    node = Node(NodeConfig(port=0))
    await node.start()          # node.port is the bound port
    ...
    await node.stop()
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import time
from collections.abc import Callable
from itertools import count
from typing import TYPE_CHECKING, Any, cast

from cluster_bus.api import ClusterLink, NoPeers
from netutil.acceptor import Listener
from netutil.addresses import first_host, listen
from netutil.rate_limited_log import RateLimitedLog
from router import dataplane
from router.acl import Acl
from router.allocator import rss_bytes
from router.collector import Pauses
from router.commands import COMMANDS
from router.commands.hot import serve as hot_serve
from router.config import NodeConfig
from router.hooks import Hooks
from router.idle import IdleTimer
from router.pause import ClientPause
from router.settings import Settings
from router.subscriptions import Subscriptions

if TYPE_CHECKING:
    from cluster_bus.api import NodesFile
    from spark.events import TrafficRecorder

log = logging.getLogger("bloomcast.node")

#: the hot-channels summaries' clock period while they count (Redis's hz
#: 10), and while nothing is published
HOT_TICK_SECONDS = 0.1
HOT_IDLE_TICK_SECONDS = 1.0


class Node:
    """One node agent (client side). Not thread-safe: one asyncio loop."""

    def __init__(
        self,
        config: NodeConfig,
        node_id: str | None = None,
        plane: dataplane.Plane | None = None,
    ) -> None:
        """``plane``: the data plane to build from (``bloomcast node`` passes
        the node's one choice; when None, :func:`router.dataplane.load`)."""
        self.config = config
        #: 40 hex digits; given when --cluster-config-file kept it from a former run
        self.node_id = node_id or os.urandom(20).hex()
        # the compiled data plane or the pure-Python data plane, chosen once (issues 29, 50)
        if plane is None:
            plane = dataplane.load()
        self.plane = plane
        self.registry = plane.SubscriptionFilters(config.filter_capacity, config.filter_fp_rate)
        # collections timed once the process settles (router/collector.py)
        self.gc_pauses = Pauses()
        self.clients: dict[int, Any] = {}  # id -> connection
        self.stats = plane.NodeStats()
        self.acl = Acl(config.requirepass)  # ACL users (router/acl/)
        self.metrics = plane.InstantaneousMetrics(time.monotonic())
        self.pause = ClientPause(plane.execute_counted)
        self.idle = IdleTimer(self.clients)
        #: the cluster bus seam: ``NoPeers`` until :meth:`set_link`
        self.link: ClusterLink = NoPeers(self.node_id, first_host(config.bind), config.port)
        #: the subscriber tables, publish, delivery, the end-of-iteration flush
        self.pubsub = plane.PubSub(
            self.node_id,
            self.registry,
            self.stats,
            self.metrics,
            self.link,
            self.clients,
            config.on_publish_loss,
        )
        #: (P|S)(UN)SUBSCRIBE and the other bulk work, under one budget per loop iteration
        self.subscriptions = Subscriptions(self.pubsub)
        #: what command handlers reach (router/context.py); its ``settings``
        #: are the live ones, swapped whole by CONFIG SET
        #: MONITOR, the slow log, the latency monitor (router/hooks.py)
        self.hooks = Hooks()
        self.context = plane.CommandContext(
            node_id=self.node_id,
            config=config,
            settings=Settings.from_config(config),
            pubsub=self.pubsub,
            subscriptions=self.subscriptions,
            acl=self.acl,
            stats=self.stats,
            pause=self.pause,
            clients=self.clients,
            link=self.link,
            view=self,
            on_settings=self._settings_changed,
            hooks=self.hooks,
            data_plane=plane.name,
            commands=COMMANDS,
        )
        self.pubsub.context = self.context
        #: the hot-channels summaries' clock (:meth:`_hot_tick`), while they are on
        self._hot_timer: asyncio.TimerHandle | None = None
        self._hot_handled = 0.0  # the summaries' count at the last tick
        self.pubsub.set_hot_channels(config.hot_channels_size, time.monotonic())
        #: the protocol of its client connections
        self.client_class = plane.Client
        self.port = config.port
        self.started = time.time()
        self.startup_rss = rss_bytes()  # MEMORY STATS's startup.allocated
        #: what SHUTDOWN calls (``bloomcast node``: the SIGTERM path); an
        #: in-process node stops itself
        self.on_shutdown: Callable[[], object] = self._stop_soon
        self._stop_task: asyncio.Task[None] | None = None
        self._ids = count(1)
        self._servers: list[Listener] = []  # one per bind address
        self._tls_servers: list[Listener] = []
        #: failed accept() calls on the client ports (INFO total_accept_errors)
        self.accept_errors = 0
        self.warnings = RateLimitedLog(logger=log)

    @property
    def tap(self) -> TrafficRecorder | None:
        """The traffic recorder (spark.tap), set by whoever wires the node."""
        tap: TrafficRecorder | None = self.pubsub.tap
        return tap

    @tap.setter
    def tap(self, tap: TrafficRecorder | None) -> None:
        self.pubsub.tap = tap

    def time_off_loop_events(
        self, loop: asyncio.AbstractEventLoop, nodes_file: NodesFile | None
    ) -> None:
        """Have the latency monitor record the events outside the data plane
        (:mod:`router.latency`): a collector pause (whichever thread
        collected) and the nodes file's save (its writer thread); each sample
        over the threshold is handed to ``loop``."""
        self.gc_pauses.sink = self.hooks.off_loop(self.context, "collector-pause", loop)
        if nodes_file is not None:
            nodes_file.on_saved = self.hooks.off_loop(self.context, "nodes-file-fsync", loop)

    def set_link(self, link: ClusterLink) -> None:
        """Wire the cluster bus (:mod:`cluster_bus.api`), before clients are
        served: the bus needs the node (its ``LocalDelivery``) and its bound
        port, so the composition root makes it after ``start(serve=False)``.
        The node's pub/sub and its command context read the same link."""
        self.link = self.context.link = link
        self.pubsub.set_link(link)
        # a peer's BLOOMCAST.HOTCHANNELS CLUSTER asks this node's summary
        link.serve_stats(lambda query: hot_serve(self.context, query))

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
            self._protocol,
            self.config.bind,
            self.config.port,
            serve=serve,
            backlog=backlog,
            on_accept_error=self._accept_failed,
        )
        self.context.port = self.port
        if self.config.tls_port:
            from router.tls import TlsClientProtocol, server_context

            context = server_context(self.config)
            self._tls_servers, _ = await listen(
                lambda: TlsClientProtocol(context, self._protocol(), self._tls_failed),
                self.config.bind,
                self.config.tls_port,
                serve=serve,
                backlog=backlog,
                on_accept_error=self._accept_failed,
            )
        if isinstance(self.link, NoPeers):
            self.set_link(NoPeers(self.node_id, first_host(self.config.bind), self.port))
        self.idle.set_timeout(self.context.settings.timeout)
        self._hot_tick()

    def _protocol(self) -> asyncio.Protocol:
        """A new client connection's protocol (an asyncio protocol by duck
        typing: the compiled ``Client`` is no subclass of one)."""
        return cast(asyncio.Protocol, self.client_class(self))

    def _accept_failed(self, exc: OSError) -> None:
        """accept() on a client port failed (EMFILE, ENFILE: the connection
        waits in the backlog): INFO ``total_accept_errors``, and Redis 7.0's log
        line ("Accepting client connection: accept: %s") once a minute."""
        self.accept_errors += 1
        why = exc.strerror or str(exc)
        self.warnings.warn("accept", "clients", f"Accepting client connection: accept: {why}")

    def _tls_failed(self, reason: str) -> None:
        """A connection to the TLS port that did not complete the handshake
        (a plain client, no CA-signed certificate): closed, as Redis does."""
        self.stats.tls_handshake_failures += 1
        log.debug("TLS handshake failed: %s", reason)

    async def start_serving(self) -> None:
        """Accept clients (after ``start(serve=False)``): the TLS port first, so
        whoever finds the plain port accepting (a readiness probe, a client)
        finds the TLS port accepting too."""
        for server in (*self._tls_servers, *self._servers):
            await server.start_serving()

    def _settings_changed(self, old: Settings, new: Settings) -> None:
        """CONFIG SET: the idle timer's timeout, the hot-channels size."""
        self.idle.settings_changed(old, new)
        if new.hot_channels_size != old.hot_channels_size:
            self.pubsub.set_hot_channels(new.hot_channels_size, time.monotonic())
            if self._hot_timer is None:
                self._hot_tick()

    def _hot_tick(self) -> None:
        """The hot-channels summaries' time (sans-IO: they read no clock of
        their own): every :data:`HOT_TICK_SECONDS` while they count, every
        :data:`HOT_IDLE_TICK_SECONDS` while nothing is published (an idle node
        wakes once a second for them; the first second of a burst after a
        pause is weighed with a time up to a second old)."""
        hot = self.pubsub.hot
        if hot is None:
            self._hot_timer = None
            return
        hot.tick(time.monotonic())
        handled = hot.channels.n1 + hot.patterns.n1 + hot.shards.n1
        period = HOT_TICK_SECONDS if handled != self._hot_handled else HOT_IDLE_TICK_SECONDS
        self._hot_handled = handled
        loop = asyncio.get_running_loop()
        self._hot_timer = loop.call_later(period, self._hot_tick)

    async def stop(self) -> None:
        self.idle.set_timeout(0)
        if self._hot_timer is not None:
            self._hot_timer.cancel()
            self._hot_timer = None
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

    def shutdown(self, client: Any) -> asyncio.Future[bytes]:
        """SHUTDOWN from ``client`` (:mod:`router.commands.operator`): the
        node stops as on SIGTERM; the returned reply never comes."""
        log.warning("User requested shutdown...")
        self.on_shutdown()
        return asyncio.get_running_loop().create_future()

    def rss(self) -> tuple[int, int]:
        """The resident set now and at its peak, bytes (INFO's used_memory, _peak)."""
        now = rss_bytes()
        return now, max(now, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)

    def _stop_soon(self) -> None:
        self._stop_task = asyncio.get_running_loop().create_task(self.stop())

    def sample_metrics(self) -> None:
        """INFO's instantaneous metrics, sampled lazily (:mod:`router.stats`)."""
        self.pubsub.sample_metrics()

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

    def client_disconnected(self, client: Any) -> None:
        self.clients.pop(client.id, None)
        if self.hooks.monitors:
            self.hooks.forget(self.context, client)
        if client.channels or client.shard_channels or client.patterns:
            # under the shared budget: 4,600 clients leaving at once are
            # dropped over several loop iterations, other clients served between
            self.subscriptions.drop(client)

    # ------------------------------------------------------------ INFO

    def cluster_info(self) -> dict[str, int | str]:
        """CLUSTER INFO: the bus's fields and the node's receive-side counters."""
        registry = self.registry
        return {
            **self.link.info_fields(),
            "cluster_stats_false_positives_received": registry.false_positives_received,
            "cluster_stats_filter_resizes": registry.filter_epoch,
        }
