"""CommandContext: what a command handler may reach of its node, and nothing else;
:class:`CommandClient`: what it may reach of the client that sent the request.

A handler is ``(ctx, client, args) -> Reply`` (:mod:`router.commands.base`):
``client`` is the connection that sent the request, seen through the
:class:`CommandClient` protocol (the connection class itself,
:class:`router.connection.Connection`, is the node's business), and ``ctx``
the node's one :class:`CommandContext`, built with the node and handed to
every connection by constructor. It holds:

- ``pubsub``: publishing and the subscriber tables (:class:`PubSubView`,
  :class:`router.pubsub.PubSub`); ``subscriptions``: (P|S)(UN)SUBSCRIBE and
  the other bulk work under the shared budget (:class:`SubscriptionsView`,
  :class:`router.subscriptions.Subscriptions`);
- ``acl``, ``stats``, ``pause``, ``clients`` (id -> connection, CLIENT
  LIST / KILL), ``link`` (the cluster bus seam, :mod:`cluster_bus.api`);
- ``settings``: the live :class:`router.settings.Settings`, swapped whole by
  CONFIG SET (:meth:`CommandContext.swap_settings`), and ``queue_limit``,
  the pubsub hard limit the output queues are held to (derived from them);
  ``config``: the startup settings;
- ``view``: what INFO, CLUSTER INFO and CONFIG RESETSTAT read or reset of
  the node as a whole (:class:`NodeView`);
- ``commands``: the command table (:mod:`router.commands`);
- ``hooks``: MONITOR, the slow log and the latency monitor
  (:mod:`router.hooks`), with ``watch`` and ``slow_ns``, which the request
  loop reads;
- ``data_plane`` (``compiled`` or ``python``, INFO ``bloomcast_data_plane``,
  :mod:`router.dataplane`) and ``slice_ns``, the longest one connection's
  requests hold the loop (:mod:`router.dispatch`).

Compiled on the compiled data plane (``router._context``, declared in
``router/_context.pxd``): the request loop reads the context's fields in C.
This module imports no router module that imports it: commands, the
connection and pub/sub all depend on it, never the other way.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import cython

from cluster_bus.api import ClusterLink, NoPeers
from router.resp import Reply

if TYPE_CHECKING:
    from router.acl import Acl, User
    from router.budget import Work
    from router.channel_table import ChannelTable
    from router.client_extras import ClientExtras
    from router.config import NodeConfig
    from router.hotchannels import HotChannels
    from router.kinds import Kind
    from router.parser import RequestParser
    from router.pattern_index import PatternIndex
    from router.pause import ClientPause
    from router.settings import Settings
    from router.states import ReplyMode, State
    from router.stats import CommandStat
if not cython.compiled and TYPE_CHECKING:  # (compiled: the .pxd cimports it)
    from router.stats import NodeStats

#: the longest one connection's requests hold the loop before the other
#: clients run: the rest of its pipeline (or of a huge request) waits for the
#: next loop iteration (``Action.SLICE``, :mod:`router.dispatch`)
SLICE_SECONDS = 0.005


class CommandClient(Protocol):
    """A client as the commands see it (:class:`router.connection.Connection`
    is one): its identity, protocol and user, its subscriptions, its MULTI
    queue and reply mode, and its output."""

    id: int
    addr: str
    name: bytes
    resp: int
    user: User
    authenticated: bool
    extras: ClientExtras
    channels: dict[bytes, None]
    patterns: dict[bytes, None]
    shard_channels: dict[bytes, None]
    multi: Any  # MULTI's queue (router.commands.base.Transaction), None outside one
    blocked: asyncio.Future[bytes] | None
    closed: bool
    state: State
    reply_mode: ReplyMode
    last_command: str
    last_interaction: float
    parser: RequestParser
    ran: CommandStat | None
    transport: Any  # asyncio's (CLUSTER NODES asks whether it is TLS)

    @property
    def ctx(self) -> CommandContext: ...

    @property
    def in_exec(self) -> bool: ...

    @property
    def closing(self) -> bool: ...

    def write(self, data: bytes) -> None: ...

    def settle(self) -> None: ...

    def begin_multi(self, queue: Any) -> None: ...

    def end_multi(self) -> Any: ...

    def start_exec(self, saved: list[bytes]) -> Any: ...

    def end_exec(self) -> None: ...

    def swap_output(self, out: list[bytes]) -> list[bytes]: ...

    def queued_bytes(self) -> int: ...

    def output_buffer_size(self) -> int: ...

    def over_limit_with(self, extra: int, normal: bool) -> bool: ...

    def is_reading(self) -> bool: ...

    def set_authenticated(self, value: bool) -> None: ...

    def set_reply_mode(self, mode: ReplyMode) -> None: ...

    def take_reply_mode(self) -> ReplyMode: ...

    def silenced(self, taken: ReplyMode) -> bool: ...

    def update_quiet(self) -> None: ...

    def close_after_reply(self) -> None: ...

    def close_now(self) -> None: ...

    def kill(self) -> None: ...

    def disconnect_over_limit(self) -> None: ...

    def drop(self) -> None: ...

    def idle_for(self, now: float) -> float | None: ...

    def subscription_count(self) -> int: ...


class PubSubView(Protocol):
    """What commands reach of the node's pub/sub (:class:`router.pubsub.PubSub`)."""

    tables: tuple[ChannelTable, ChannelTable]
    patterns: PatternIndex[Any]
    #: what is hot now (router/hotchannels.py); None while hot-channels-size is 0
    hot: HotChannels | None

    def publish_command(self, client: CommandClient, args: list[bytes], shard: bool) -> Reply: ...

    def count(self, kind: Kind, name: bytes) -> int: ...

    def after(self, future: asyncio.Future[Any], reply: bytes) -> asyncio.Future[bytes]: ...


class SubscriptionsView(Protocol):
    """What commands reach of the bulk work under the shared budget
    (:class:`router.subscriptions.Subscriptions`)."""

    def subscribe(self, kind: Kind, client: CommandClient, names: list[bytes]) -> Reply: ...

    def unsubscribe(self, kind: Kind, client: CommandClient, names: list[bytes]) -> Reply: ...

    def drop(self, client: CommandClient) -> asyncio.Future[bytes] | None: ...

    def run(self, job: Work) -> Reply: ...

    #: the last reply that awaits only subscribe visibility (the request
    #: loop runs the pipeline's next (un)subscribes behind it)
    confirming: asyncio.Future[bytes] | None

    def after_all(self, replies: list[Reply]) -> asyncio.Future[bytes]: ...


class HooksView(Protocol):
    """What the request loop and commands reach of the node's watchers of
    commands (:class:`router.hooks.Hooks`: MONITOR, the slow log, the
    latency monitor)."""

    monitors: dict[int, Any]
    slowlog: Any  # router.hooks.SlowLog
    latency: Any  # router.latency.LatencyMonitor

    def rewatch(self, ctx: CommandContext) -> None: ...

    def event(self, ctx: CommandContext, name: str, ms: float) -> None: ...

    def add_monitor(self, ctx: CommandContext, client: CommandClient) -> None: ...

    def forget(self, ctx: CommandContext, client: CommandClient) -> None: ...

    def call(
        self,
        ctx: CommandContext,
        client: CommandClient,
        cmd: Any,
        args: list[bytes],
    ) -> Reply: ...

    def slow_batch(
        self, ctx: CommandContext, client: CommandClient, args: list[bytes], ns: int, count: int
    ) -> None: ...


class NodeView(Protocol):
    """The node as a whole, for INFO, CLUSTER INFO and CONFIG RESETSTAT."""

    def info_sections(self) -> dict[str, dict[str, object]]: ...

    def cluster_info(self) -> dict[str, int | str]: ...

    def reset_stats(self) -> None: ...

    #: when the node started (unix seconds): LASTSAVE
    started: float
    #: its resident set when it was built (bytes): MEMORY STATS
    startup_rss: int

    def rss(self) -> tuple[int, int]:
        """Its resident set now and at its peak (bytes): MEMORY STATS."""
        ...

    def shutdown(self, client: CommandClient) -> asyncio.Future[bytes]:
        """SHUTDOWN: stop the node as SIGTERM does; the future (``client``'s
        reply) never resolves: the connection closes with the node."""
        ...


@cython.final
@cython.cclass
class CommandContext:
    """The narrow context every command handler gets (module doc)."""

    def __init__(
        self,
        *,
        node_id: str,
        config: NodeConfig,
        settings: Settings,
        pubsub: PubSubView,
        subscriptions: SubscriptionsView,
        acl: Acl,
        stats: NodeStats,
        pause: ClientPause,
        clients: dict[int, Any],
        link: ClusterLink,
        view: NodeView,
        on_settings: Callable[[Settings, Settings], None],
        data_plane: str,
        commands: dict[bytes, Any],
        hooks: HooksView,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.settings = settings
        self.queue_limit = min(settings.queue_limit, sys.maxsize)  # (none: sys.maxsize)
        #: settings.normal_limited, read by every flush of a normal client
        self.normal_limited = settings.normal_limited
        self.pubsub = pubsub
        self.subscriptions = subscriptions
        self.acl = acl
        self.stats = stats
        self.pause = pause
        #: a CLIENT PAUSE is in effect (``pause.level``, kept here by the pause:
        #: the request loop reads it in C on every read, router.dispatch._open)
        self.paused = pause.level != 0
        pause.context = self
        self.clients: dict[int, Any] = clients
        self.link = link
        self.view = view
        self.port = config.port  # the bound port once the node listens
        #: called with (old, new) after each swap (the node applies what a
        #: setting changes beyond itself: the idle-client timer)
        self.on_settings = on_settings
        self.data_plane = data_plane
        #: the command table (name -> router.commands.base.Command), for the
        #: commands that list or check commands (COMMAND, ACL DRYRUN)
        self.commands = commands
        #: :data:`SLICE_SECONDS` in nanoseconds (a test may set it)
        self.slice_ns = int(SLICE_SECONDS * 1e9)
        #: MONITOR, the slow log, the latency monitor (:class:`router.hooks.Hooks`);
        #: ``watch``: every command is timed alone through it; else a batch
        #: longer than ``slow_ns`` is given to it (set by ``hooks.rewatch``)
        self.hooks = hooks
        self.watch = False
        self.slow_ns = 2**62
        #: ``latency-monitor-threshold`` (ms; 0: off), for the events outside
        #: commands (:mod:`router.latency`; set by ``hooks.rewatch``)
        self.latency_ms = 0
        hooks.rewatch(self)

    @property
    def cluster_enabled(self) -> bool:
        """A node with a cluster bus is a cluster node (Redis's ``cluster_enabled``);
        without one (``--no-bus``) it answers as a standalone Redis does."""
        return not isinstance(self.link, NoPeers)

    def swap_settings(self, new: Settings) -> None:
        """CONFIG SET: the new settings, whole."""
        old, self.settings = self.settings, new
        self.queue_limit = min(new.queue_limit, sys.maxsize)
        self.normal_limited = new.normal_limited
        self.hooks.rewatch(self)
        self.on_settings(old, new)
