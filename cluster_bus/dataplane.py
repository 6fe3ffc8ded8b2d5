"""Which forwarding hot path a bus runs: the compiled one or the Python
reference it is checked against (issues 29, 42; the bus's half of
:mod:`router.dataplane`, which says which one a node runs and warns when the
compiled one is missing). The bus's one place that decides it.

The bus's hot modules are written once, in Cython's pure-Python mode:
``cluster_bus/link.py``, ``decoder.py``, ``forwarding.py``, ``session.py``
and ``routing.py`` run as plain Python (the reference) and are compiled by
``setup.py`` into ``cluster_bus._link``, ``_decoder``, ``_forwarding``,
``_session`` and ``_routing`` (their C declarations in ``cluster_bus/_*.pxd``),
beside ``cluster_bus/_codec.pyx``, the PUBLISH frame read and written by C
pointers. A compiled module reaches the others by ``cimport``: a
:class:`BusPlane` is one set or the other, whole.

``BLOOMCAST_NO_EXTENSIONS=1`` selects the reference, as does a machine where
the extension was not built or does not import. The bus calls :func:`load`
once (or is given a plane) and builds its links, routing table and
forwarding sessions from it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported when used: the node imports this module at start)
    from cluster_bus.forwarding import Forwarding
    from cluster_bus.link import Link
    from cluster_bus.routing import PeerTable

#: the switch (the same variable turns off the node's compiled plane: router.dataplane)
ENV = "BLOOMCAST_NO_EXTENSIONS"


@dataclass(frozen=True, slots=True)
class BusPlane:
    """The classes a bus builds from, all of one plane."""

    name: str
    Link: type[Link]
    PeerTable: type[PeerTable]
    Forwarding: type[Forwarding]


def python() -> BusPlane:
    """The reference (plain Python)."""
    from cluster_bus import forwarding, link, routing

    return BusPlane("python", link.Link, routing.PeerTable, forwarding.Forwarding)


def compiled() -> BusPlane:
    """The compiled plane; ImportError when it was not built."""
    from cluster_bus import (  # type: ignore[attr-defined]
        _codec,
        _decoder,
        _forwarding,
        _link,
        _routing,
        _session,
    )

    del _codec, _decoder, _session  # (cimported by the others: named here as the plane's)
    return BusPlane("compiled", _link.Link, _routing.PeerTable, _forwarding.Forwarding)


def load() -> BusPlane:
    """The compiled plane, or the reference (no warning here: the node's
    :func:`router.dataplane.load` gives the one line)."""
    if os.environ.get(ENV):
        return python()
    try:
        return compiled()
    except ImportError:
        return python()
