"""CommandContext: what a command handler may reach of its node, and nothing else.

A handler is ``(ctx, conn, args) -> Reply`` (:mod:`router.commands.base`):
``conn`` is the :class:`router.connection.Connection` that sent the request,
``ctx`` the node's one :class:`CommandContext`, built with the node and
handed to every connection by constructor. It holds:

- ``pubsub``: publishing and subscriptions (:class:`router.pubsub.PubSub`:
  subscribe / unsubscribe / drop under the shared budget, ``publish``,
  ``filters_changed``, ``after``, the tables PUBSUB lists);
- ``acl``, ``stats``, ``pause``, ``clients`` (id -> connection, CLIENT
  LIST / KILL), ``link`` (the cluster bus seam, :mod:`cluster_bus.api`);
- ``settings``: the live :class:`router.settings.Settings`, swapped whole by
  CONFIG SET (:meth:`swap_settings`); ``config``: the startup settings;
- ``view``: what INFO, CLUSTER INFO and CONFIG RESETSTAT read or reset of
  the node as a whole (:class:`NodeView`);
- ``data_plane`` (``compiled`` or ``python``, INFO ``bloomcast_data_plane``)
  and ``parser_class`` / ``connection_class``, the request parser and the
  connection class (its request loop) its connections use, picked once by
  the node through :mod:`router.dataplane` (issue 29).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from cluster_bus.api import ClusterLink, NoPeers

if TYPE_CHECKING:
    from router.acl import Acl
    from router.config import NodeConfig
    from router.connection import Connection
    from router.parser import RequestParser
    from router.pause import ClientPause
    from router.pubsub import PubSub
    from router.settings import Settings
    from router.stats import NodeStats


class NodeView(Protocol):
    """The node as a whole, for INFO, CLUSTER INFO and CONFIG RESETSTAT."""

    def info_sections(self) -> dict[str, dict[str, object]]: ...

    def cluster_info(self) -> dict[str, int | str]: ...

    def reset_stats(self) -> None: ...


class CommandContext:
    """The narrow context every command handler gets (module doc)."""

    __slots__ = (
        "acl",
        "clients",
        "config",
        "connection_class",
        "data_plane",
        "link",
        "node_id",
        "on_settings",
        "parser_class",
        "pause",
        "port",
        "pubsub",
        "settings",
        "stats",
        "view",
    )

    def __init__(
        self,
        *,
        node_id: str,
        config: NodeConfig,
        settings: Settings,
        pubsub: PubSub,
        acl: Acl,
        stats: NodeStats,
        pause: ClientPause,
        clients: dict[int, Connection],
        link: ClusterLink,
        view: NodeView,
        on_settings: Callable[[Settings, Settings], None],
        parser_class: type[RequestParser],
        connection_class: type[Connection],
        data_plane: str,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.settings = settings
        self.pubsub = pubsub
        self.acl = acl
        self.stats = stats
        self.pause = pause
        self.clients = clients
        self.link = link
        self.view = view
        self.port = config.port  # the bound port once the node listens
        #: called with (old, new) after each swap (the node applies what a
        #: setting changes beyond itself: the idle-client timer)
        self.on_settings = on_settings
        self.parser_class = parser_class
        self.connection_class = connection_class
        self.data_plane = data_plane

    @property
    def cluster_enabled(self) -> bool:
        """A node with a cluster bus is a cluster node (Redis's ``cluster_enabled``);
        without one (``--no-bus``) it answers as a standalone Redis does."""
        return not isinstance(self.link, NoPeers)

    def swap_settings(self, new: Settings) -> None:
        """CONFIG SET: the new settings, whole."""
        old, self.settings = self.settings, new
        self.on_settings(old, new)
