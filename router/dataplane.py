"""Which data plane a node runs: the compiled one or the Python core it is
checked against (issue 29, issue 42; aiohttp's ``AIOHTTP_NO_EXTENSIONS`` and
msgpack's fallback are the model). The one place that decides it.

The data plane's modules are written once, in Cython's pure-Python mode:
``router/connection.py``, ``dispatch.py``, ``pubsub.py``, ``client.py``,
``context.py`` and ``stats.py`` run as plain Python (the Python core) and
are compiled by ``setup.py`` into ``router._connection``, ``router._dispatch``,
... (the compiled plane; their C declarations in ``router/_*.pxd``), beside
the two ``.pyx`` modules that only C can do: ``router._parser`` (the RESP
framing) and ``router._resp`` (a message frame). A compiled module reaches
the other compiled ones by ``cimport``, never the Python ones, so a
:class:`Plane` is one set or the other, whole.

``BLOOMCAST_NO_EXTENSIONS=1`` in the environment selects the Python core; so
does a machine where the extension was not built or does not import, with
one warning line (the bus's half, :mod:`cluster_bus.dataplane`, is checked
with it, so the line speaks for both). INFO ``# Bloomcast``
``bloomcast_data_plane`` says which. The node calls :func:`load` once (or is
given a plane: a test builds one node per plane in one process).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from cluster_bus import dataplane as bus_plane
from cluster_bus.dataplane import ENV

if TYPE_CHECKING:  # (imported by python() alone: the compiled plane loads no Python twin)
    from router import client, connection, context, parser, pubsub, registry, stats

log = logging.getLogger("bloomcast.node")

__all__ = ["ENV", "Plane", "compiled", "load", "python"]


@dataclass(frozen=True, slots=True)
class Plane:
    """The classes a node builds from, all of one plane: ``name`` (INFO
    ``bloomcast_data_plane``), its connections' request parser, connection
    and protocol classes, its pub/sub, its command context and counters, and
    the run of a postponed command (:func:`router.dispatch.execute_counted`)."""

    name: str
    RequestParser: type[parser.RequestParser]
    Connection: type[connection.Connection]
    Client: type[client.Client]
    PubSub: type[pubsub.PubSub]
    CommandContext: type[context.CommandContext]
    NodeStats: type[stats.NodeStats]
    InstantaneousMetrics: type[stats.InstantaneousMetrics]
    Registry: type[registry.Registry]
    execute_counted: Callable[..., Any]
    #: the request loop (router.dispatch): a read, the next slice, an unblock
    process: Callable[..., Any]
    resume: Callable[..., Any]
    unblock: Callable[..., Any]


def _plane(name: str, modules: dict[str, ModuleType]) -> Plane:
    return Plane(
        name,
        RequestParser=modules["parser"].RequestParser,
        Connection=modules["connection"].Connection,
        Client=modules["client"].Client,
        PubSub=modules["pubsub"].PubSub,
        CommandContext=modules["context"].CommandContext,
        NodeStats=modules["stats"].NodeStats,
        InstantaneousMetrics=modules["stats"].InstantaneousMetrics,
        Registry=modules["registry"].Registry,
        execute_counted=modules["dispatch"].execute_counted,
        process=modules["dispatch"].process,
        resume=modules["dispatch"].resume,
        unblock=modules["dispatch"].unblock,
    )


@functools.cache
def python() -> Plane:
    """The Python core: the reference of every compiled module (its modules
    imported here, not at start: the compiled plane loads none of them, nor
    the ``cython`` module they import)."""
    from router import client, connection, context, dispatch, parser, pubsub, registry, stats

    return _plane(
        "python",
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
    )


def compiled() -> Plane:
    """The compiled plane; ImportError when it was not built (or is an old
    build: a module missing), the bus's half (:mod:`cluster_bus.dataplane`)
    included."""
    from router import (  # type: ignore[attr-defined]
        _client,
        _connection,
        _context,
        _dispatch,
        _hotchannels,
        _parser,
        _pubsub,
        _registry,
        _resp,
        _stats,
    )

    bus_plane.compiled()
    del _resp, _hotchannels  # (loaded by _pubsub's cimport: imported to check the build)
    modules = {
        "parser": _parser,
        "connection": _connection,
        "client": _client,
        "pubsub": _pubsub,
        "context": _context,
        "stats": _stats,
        "registry": _registry,
        "dispatch": _dispatch,
    }
    return _plane("compiled", modules)


def load() -> Plane:
    """The compiled plane, or the Python core (:func:`python`) when
    ``BLOOMCAST_NO_EXTENSIONS`` is set or the compiled one does not import
    (one warning line)."""
    if os.environ.get(ENV):
        return python()
    try:
        return compiled()
    except ImportError as exc:
        log.warning("compiled data plane unavailable (%s): running the Python core", exc)
        return python()
