"""Which data plane a node runs: the compiled one (built by ``uv sync`` from
``setup.py``'s modules) or the Python core it is checked against (issue 29;
aiohttp's ``AIOHTTP_NO_EXTENSIONS`` and msgpack's fallback are the model).

``BLOOMCAST_NO_EXTENSIONS=1`` in the environment selects the Python core; so
does a machine where the extension was not built or does not import, with
one warning line. INFO ``# Bloomcast`` ``bloomcast_data_plane`` says which.
The node calls :func:`load` once and builds its connections from the
:class:`Plane` it gets.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from cluster_bus import dataplane as bus_plane
from cluster_bus.dataplane import ENV
from router.parser import RequestParser

log = logging.getLogger("bloomcast.node")


@dataclass(frozen=True, slots=True)
class Plane:
    """What a node builds from: ``name`` (INFO ``bloomcast_data_plane``) and
    the request parser class its connections use (the compiled
    ``router._parser.RequestParser`` or the reference
    :class:`router.parser.RequestParser`; same API, same behaviour)."""

    name: str
    parser_class: type[RequestParser]


#: the Python core: the reference of every compiled module
PYTHON = Plane("python", RequestParser)


def compiled() -> Plane:
    """The compiled plane; ImportError when it was not built (or is stale)."""
    from cluster_bus import _forwarding  # type: ignore[attr-defined]
    from router import _parser  # type: ignore[attr-defined]

    missing = [twin for twin in bus_plane.TWINS if not hasattr(_forwarding, twin)]
    if not hasattr(_parser, "RequestParser"):
        missing.append("RequestParser")
    if missing:
        raise ImportError(f"an old build (no {', '.join(missing)}; rebuild with uv sync)")
    return Plane("compiled", _parser.RequestParser)


def load() -> Plane:
    """The compiled plane, or the Python core (:data:`PYTHON`) when
    ``BLOOMCAST_NO_EXTENSIONS`` is set or the compiled one does not import
    (one warning line; the bus's half, :mod:`cluster_bus.dataplane`, is
    checked with it, so the line and INFO speak for both)."""
    if os.environ.get(ENV):
        return PYTHON
    try:
        return compiled()
    except ImportError as exc:
        log.warning("compiled data plane unavailable (%s): running the Python core", exc)
        return PYTHON
