"""Which forwarding hot path a bus runs: the compiled one or the Python
reference it is checked against (issues 29, 42, 50; the bus's half of
:mod:`router.dataplane`): the classes a bus builds from.

The bus's hot modules are written once, in Cython's pure-Python mode:
``cluster_bus/link.py``, ``decoder.py``, ``forwarding.py``, ``session.py``
and ``routing.py`` run as plain Python (the reference) and are compiled by
``setup.py`` into ``cluster_bus._link``, ``_decoder``, ``_forwarding``,
``_session`` and ``_routing`` (their C declarations in ``cluster_bus/_*.pxd``),
beside ``cluster_bus/_codec.pyx``, the PUBLISH frame read and written by C
pointers. A compiled module reaches the others by ``cimport``: a
:class:`BusPlane` is one set or the other, whole.

The bus decides nothing: the node's one choice
(:func:`netutil.dataplane.choose`) names the plane, and ``bloomcast node``
hands the bus the half of the node's :class:`router.dataplane.Plane`
(``plane.bus``); a bus built without one (a test) takes the plane of the
same choice (:func:`load`).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from netutil.dataplane import COMPILED, ENV, PYTHON, choose, compiled_modules

if TYPE_CHECKING:  # (imported when used: the node imports this module at start)
    from cluster_bus.forwarding import Forwarding
    from cluster_bus.link import Link
    from cluster_bus.routing import PeerTable

__all__ = ["ENV", "BusPlane", "compiled", "load", "named", "python"]


@dataclass(frozen=True, slots=True)
class BusPlane:
    """The classes a bus builds from, all of one plane."""

    name: str
    Link: type[Link]
    PeerTable: type[PeerTable]
    Forwarding: type[Forwarding]


@functools.cache
def python() -> BusPlane:
    """The reference (plain Python)."""
    from cluster_bus import forwarding, link, routing

    return BusPlane(PYTHON, link.Link, routing.PeerTable, forwarding.Forwarding)


def compiled() -> BusPlane:
    """The compiled plane; ImportError when it was not built (or a module of
    it is missing)."""
    modules = {name: importlib.import_module(name) for name in compiled_modules("cluster_bus")}
    return BusPlane(
        COMPILED,
        modules["cluster_bus._link"].Link,
        modules["cluster_bus._routing"].PeerTable,
        modules["cluster_bus._forwarding"].Forwarding,
    )


def named(name: str) -> BusPlane:
    """The plane :func:`netutil.dataplane.choose` named."""
    return compiled() if name == COMPILED else python()


def load() -> BusPlane:
    """The bus's half of the node's plane (:func:`netutil.dataplane.choose`:
    the Python reference for every part when any compiled module, the
    router's included, is missing)."""
    return named(choose())
