"""Which data plane a node runs: the compiled one or the pure-Python data plane it is
checked against (issues 29, 42, 50; aiohttp's ``AIOHTTP_NO_EXTENSIONS`` and
msgpack's fallback are the model): the classes the node builds from.

The data plane's modules are written once, in Cython's pure-Python mode:
``router/connection.py``, ``dispatch.py``, ``pubsub.py``, ``client.py``,
``context.py`` and ``stats.py`` run as plain Python (the pure-Python data plane) and
are compiled by ``setup.py`` into ``router._connection``, ``router._dispatch``,
... (the compiled plane; their C declarations in ``router/_*.pxd``), beside
the two ``.pyx`` modules that only C can do: ``router._parser`` (the RESP
framing) and ``router._resp`` (a message frame). A compiled module reaches
the other compiled ones by ``cimport``, never the Python ones, so a
:class:`Plane` is one set or the other, whole.

The choice is the node's one (:func:`netutil.dataplane.choose`: compiled
when every compiled module imports, the router's and the bus's; otherwise
the pure-Python data plane for the whole node, with one warning line), and a
:class:`Plane` carries the bus's half (:attr:`Plane.bus`), so the router and
the bus of a node are always of one plane. INFO ``# Bloomcast``
``bloomcast_data_plane`` says which. ``bloomcast node`` calls :func:`load`
once and hands the plane to the node and its bus (a test builds one node per
plane in one process).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from cluster_bus import dataplane as bus_plane
from netutil.dataplane import COMPILED, ENV, PYTHON, choose, compiled_modules

if TYPE_CHECKING:  # (imported by python() alone: the compiled plane loads no Python twin)
    from router import client, connection, context, parser, pubsub, registry, stats

__all__ = ["ENV", "Plane", "compiled", "load", "named", "python"]


@dataclass(frozen=True, slots=True)
class Plane:
    """The classes a node builds from, all of one plane: ``name`` (INFO
    ``bloomcast_data_plane``), its connections' request parser, connection
    and protocol classes, its pub/sub, its command context and counters, and
    the run of a postponed command (:func:`router.dispatch.execute_counted`),
    and ``bus``, the bus's classes of the same plane."""

    name: str
    bus: bus_plane.BusPlane
    RequestParser: type[parser.RequestParser]
    Connection: type[connection.Connection]
    Client: type[client.Client]
    PubSub: type[pubsub.PubSub]
    CommandContext: type[context.CommandContext]
    NodeStats: type[stats.NodeStats]
    InstantaneousMetrics: type[stats.InstantaneousMetrics]
    SubscriptionFilters: type[registry.SubscriptionFilters]
    execute_counted: Callable[..., Any]
    #: the request loop (router.dispatch): a read, the next slice, an unblock
    process: Callable[..., Any]
    resume: Callable[..., Any]
    unblock: Callable[..., Any]


def _plane(name: str, modules: dict[str, ModuleType], bus: bus_plane.BusPlane) -> Plane:
    return Plane(
        name,
        bus,
        RequestParser=modules["parser"].RequestParser,
        Connection=modules["connection"].Connection,
        Client=modules["client"].Client,
        PubSub=modules["pubsub"].PubSub,
        CommandContext=modules["context"].CommandContext,
        NodeStats=modules["stats"].NodeStats,
        InstantaneousMetrics=modules["stats"].InstantaneousMetrics,
        SubscriptionFilters=modules["registry"].SubscriptionFilters,
        execute_counted=modules["dispatch"].execute_counted,
        process=modules["dispatch"].process,
        resume=modules["dispatch"].resume,
        unblock=modules["dispatch"].unblock,
    )


@functools.cache
def python() -> Plane:
    """The pure-Python data plane: the reference of every compiled module (its modules
    imported here, not at start: the compiled plane loads none of them, nor
    the ``cython`` module they import)."""
    from router import client, connection, context, dispatch, parser, pubsub, registry, stats

    return _plane(
        PYTHON,
        {
            "parser": parser,
            "connection": connection,
            "client": client,
            "pubsub": pubsub,
            "context": context,
            "stats": stats,
            "registry": registry,
            "dispatch": dispatch,
        },
        bus_plane.python(),
    )


def compiled() -> Plane:
    """The compiled plane; ImportError when it was not built (or is a partial
    or old build: a module missing), the bus's half
    (:mod:`cluster_bus.dataplane`) included."""
    bus = bus_plane.compiled()
    modules = {
        name.removeprefix("router._"): importlib.import_module(name)
        for name in compiled_modules("router")
    }
    return _plane(COMPILED, modules, bus)


def named(name: str) -> Plane:
    """The plane :func:`netutil.dataplane.choose` named."""
    return compiled() if name == COMPILED else python()


def load() -> Plane:
    """The node's plane: the whole compiled plane, or the pure-Python data plane for
    the whole node when ``BLOOMCAST_NO_EXTENSIONS`` is set or any compiled
    module does not import (one warning line;
    :func:`netutil.dataplane.choose`)."""
    return named(choose())
