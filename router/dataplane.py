"""Which data plane a node runs: the compiled twin (``router/_dataplane.pyx``,
typed Cython, built by ``uv sync``) or the Python core it is checked against
(issue 29; aiohttp's ``AIOHTTP_NO_EXTENSIONS`` and msgpack's fallback are the
model).

``BLOOMCAST_NO_EXTENSIONS=1`` in the environment selects the Python core; so
does a machine where the extension was not built or does not import, with
one warning line. INFO ``# Bloomcast`` ``bloomcast_data_plane`` says which.
The node calls :func:`load` once and hands the classes it picks
(:func:`parser_class`, :func:`connection_class`) to its connections through
its ``CommandContext``; :func:`bind_node` gives it the twins of its own
methods.
"""

from __future__ import annotations

import logging
import os
from types import MethodType, ModuleType
from typing import TYPE_CHECKING

from cluster_bus import dataplane as bus_plane
from cluster_bus.dataplane import ENV
from router.client import Client
from router.connection import Connection
from router.parser import RequestParser

if TYPE_CHECKING:
    from router.node import Node

log = logging.getLogger("bloomcast.node")

#: what a compiled module must have (an older build may lack the later twins)
TWINS = (
    "RequestParser",
    "process",
    "flush_all",
    "schedule_flush",
    "deliver_forwarded",
    "deliver_forwarded_run",
    "CompiledClient",
)


def load() -> ModuleType | None:
    """The compiled module, or None for the Python core (one warning line
    when it or the bus's twin, :mod:`cluster_bus.dataplane`, does not
    import, or is a stale build without every twin)."""
    if os.environ.get(ENV):
        return None
    try:
        from cluster_bus import _forwarding  # type: ignore[attr-defined]
        from router import _dataplane  # type: ignore[attr-defined]
    except ImportError as exc:
        log.warning("compiled data plane unavailable (%s): running the Python core", exc)
        return None
    missing = [twin for twin in TWINS if not hasattr(_dataplane, twin)]
    missing += [twin for twin in bus_plane.TWINS if not hasattr(_forwarding, twin)]
    if missing:
        log.warning(
            "compiled data plane is an old build (no %s; rebuild with uv sync): "
            "running the Python core",
            ", ".join(missing),
        )
        return None
    return _dataplane


def name(module: ModuleType | None) -> str:
    """``compiled`` or ``python`` (INFO ``bloomcast_data_plane``)."""
    return "compiled" if module is not None else "python"


def parser_class(module: ModuleType | None) -> type[RequestParser]:
    """The request parser a node's connections use: the compiled twin
    (``router._dataplane.RequestParser``) or the reference
    (:class:`router.parser.RequestParser`); same API, same behaviour."""
    if module is None:
        return RequestParser
    cls: type[RequestParser] = module.RequestParser
    return cls


def connection_class(module: ModuleType | None) -> type[Connection]:
    """The connection class a node's clients get: the reference
    (:class:`router.connection.Connection`, whose request loop is
    :func:`router.dispatch.process`) or a subclass whose ``receive`` is the
    compiled twin of that loop (``router._dataplane.process``, which runs
    PUBLISH in line); same API, same behaviour."""
    if module is None:
        return Connection
    return type(
        "CompiledConnection",
        (Connection,),
        {"receive": module.process, "__doc__": connection_class.__doc__},
    )


def client_class(module: ModuleType | None) -> type[Client]:
    """The asyncio protocol of a node's client connections: the reference
    (:class:`router.client.Client`) or its subclass whose ``data_received``
    is the compiled twin (``router._dataplane.CompiledClient``, which calls
    the compiled request loop in C); same API, same behaviour."""
    if module is None:
        return Client
    cls: type[Client] = module.CompiledClient
    return cls


def bind_node(module: ModuleType | None, node: Node) -> None:
    """Give ``node`` the compiled twins of its own methods, before its
    first client: ``flush_all`` (the end of a loop turn),
    ``schedule_flush`` (which each connection is given) and
    ``deliver_forwarded`` (what the bus calls for a forwarded PUBLISH) and
    ``deliver_forwarded_run`` (for a read's run of them).
    With the Python core, the node keeps its methods."""
    if module is not None:
        node.flush_all = MethodType(module.flush_all, node)  # type: ignore[method-assign]
        node.schedule_flush = MethodType(module.schedule_flush, node)  # type: ignore[method-assign]
        node.deliver_forwarded = MethodType(module.deliver_forwarded, node)  # type: ignore[method-assign]
        node.deliver_forwarded_run = MethodType(module.deliver_forwarded_run, node)  # type: ignore[method-assign]
