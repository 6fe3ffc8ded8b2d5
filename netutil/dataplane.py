"""The node's one choice of data plane, and the one list of its compiled
modules (issues 29, 42, 50; docs/architecture.md §10).

The data plane's modules are written once: pure-Python mode ``.py`` files
that run as plain Python (the pure-Python data plane, the reference) and are compiled
by ``setup.py`` under a second name (``router/stats.py`` becomes
``router._stats``), beside the ``.pyx`` modules only C pointers can do.
:data:`MODULES` lists them; ``setup.py`` builds exactly these, the two
package halves (:mod:`router.dataplane`, :mod:`cluster_bus.dataplane`) load
them, and the tests (``tests/pxd_drift.py``, ``tests/router/test_dataplane.py``)
read them from here.

:func:`choose` is the node's one decision, made once at start by the entry
point (``bloomcast node``) and passed down: the router and the bus build
from the plane it names and decide nothing themselves. ``compiled`` when
every module of :data:`MODULES` imports; ``python`` for the whole node when
``BLOOMCAST_NO_EXTENSIONS=1`` is set, or when any one is missing or does not
import (a partial or stale build: one warning line), so a node never runs
the router on one plane and the bus on the other. INFO ``# Bloomcast``
``bloomcast_data_plane`` says which.

On the compiled plane a node loads none of the Python sources of
:data:`MODULES` (:data:`PYTHON_SOURCES`), nor the ``cython`` module they
import at their top (Cython's Shadow: no-ops); INFO
``bloomcast_data_plane_python_modules`` lists those it has loaded
(tests/integration/test_compiled_node.py reads it from a real node).

Standard library only: ``setup.py`` imports this module before the build
has installed anything.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

#: the switch: set (to anything) at build time, no extension is built; at
#: run time, the node runs the pure-Python data plane
ENV = "BLOOMCAST_NO_EXTENSIONS"

COMPILED = "compiled"
PYTHON = "python"

#: (compiled module, its source): a ``.py`` in pure-Python mode (its C
#: declarations in the compiled module's ``.pxd``) or a ``.pyx``; in the
#: order of their cimports (setup.py builds them in this order)
MODULES: tuple[tuple[str, str], ...] = (
    ("bloom._counting", "bloom/counting.py"),
    ("router._parser", "router/_parser.pyx"),
    ("router._resp", "router/_resp.pyx"),
    ("router._stats", "router/stats.py"),
    ("router._registry", "router/registry.py"),
    ("router._context", "router/context.py"),
    ("router._hotchannels", "router/hotchannels.py"),
    ("router._connection", "router/connection.py"),
    ("router._pubsub", "router/pubsub.py"),
    ("router._dispatch", "router/dispatch.py"),
    ("router._client", "router/client.py"),
    ("cluster_bus._codec", "cluster_bus/_codec.pyx"),
    ("cluster_bus._routing", "cluster_bus/routing.py"),
    ("cluster_bus._session", "cluster_bus/session.py"),
    ("cluster_bus._decoder", "cluster_bus/decoder.py"),
    ("cluster_bus._link", "cluster_bus/link.py"),
    ("cluster_bus._forwarding", "cluster_bus/forwarding.py"),
)

#: the pure-Python mode sources as modules (``router.stats``, ...): the
#: pure-Python data plane's twins of compiled modules, which a compiled node never
#: imports
PYTHON_SOURCES: tuple[str, ...] = tuple(
    source.removesuffix(".py").replace("/", ".") for _, source in MODULES if source.endswith(".py")
)

#: what the pure-Python mode sources import when they run as plain Python
#: (Cython's Shadow module); a compiled module resolves ``import cython`` at
#: compile time
CYTHON_MODULES = ("cython", "Cython.Shadow")

log = logging.getLogger("bloomcast.node")


def compiled_modules(package: str) -> list[str]:
    """The compiled modules of ``package`` (``router`` or ``cluster_bus``)."""
    return [name for name, _ in MODULES if name.partition(".")[0] == package]


def choose() -> str:
    """:data:`COMPILED` or :data:`PYTHON`, for the whole node (module doc):
    every compiled module is imported here, so a missing one is found before
    any part is built."""
    if os.environ.get(ENV):
        return PYTHON
    try:
        for name, _ in MODULES:
            importlib.import_module(name)
    except ImportError as exc:
        log.warning(
            "compiled data plane unavailable (%s): the whole node runs the pure-Python data plane",
            exc,
        )
        return PYTHON
    return COMPILED


def python_modules_loaded() -> list[str]:
    """Which of :data:`PYTHON_SOURCES` and :data:`CYTHON_MODULES` this
    process has imported (none on the compiled plane)."""
    return [name for name in (*PYTHON_SOURCES, *CYTHON_MODULES) if name in sys.modules]
