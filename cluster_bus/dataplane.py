"""Which forwarding hot path a bus runs: the compiled twin
(``cluster_bus/_forwarding.pyx``, typed Cython, built by ``uv sync``) or the
Python reference it is checked against (issue 29; the bus's half of
:mod:`router.dataplane`, which says which one a node runs and warns when the
twin is missing).

``BLOOMCAST_NO_EXTENSIONS=1`` selects the reference, as does a machine where
the extension was not built or does not import. The bus calls :func:`load`
once and builds its links (:func:`link_class`) and its forwarding sessions
(:func:`forwarding_class`) with what it picked.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (imported when used: the node imports this module at start)
    from cluster_bus.forwarding import Forwarding
    from cluster_bus.link import Link

#: the switch (the same variable turns off the node's twins: router.dataplane)
ENV = "BLOOMCAST_NO_EXTENSIONS"
#: what the compiled module must have (an older build may lack a later twin)
TWINS = ("data_received", "publishes_received", "Forwarder")


def load() -> ModuleType | None:
    """The compiled module, or None for the reference (no warning here: the
    node's :func:`router.dataplane.load` gives the one line)."""
    if os.environ.get(ENV):
        return None
    try:
        from cluster_bus import _forwarding  # type: ignore[attr-defined]
    except ImportError:
        return None
    if not all(hasattr(_forwarding, twin) for twin in TWINS):
        return None
    return _forwarding


def link_class(module: ModuleType | None) -> type[Link]:
    """The bus link: the reference (:class:`cluster_bus.link.Link`) or a
    subclass whose ``data_received`` is the compiled twin (a read of PUBLISH
    frames decoded and handed on in C); same API, same behaviour."""
    from cluster_bus.link import Link

    if module is None:
        return Link
    return type(
        "CompiledLink",
        (Link,),
        {"data_received": module.data_received, "__doc__": link_class.__doc__},
    )


def forwarding_class(module: ModuleType | None) -> type[Forwarding]:
    """The forwarding sessions: the reference
    (:class:`cluster_bus.forwarding.Forwarding`) or a subclass whose
    ``publishes_received`` is the compiled twin and whose ``forward`` is its
    own :class:`Forwarder`'s (the twin, holding what it reads of the
    forwarding); same API, same behaviour."""
    from cluster_bus.forwarding import Forwarding

    if module is None:
        return Forwarding

    def __init__(self: Forwarding, *args: Any, **kwargs: Any) -> None:
        Forwarding.__init__(self, *args, **kwargs)
        self.forward = module.Forwarder(self).forward  # type: ignore[method-assign]

    return type(
        "CompiledForwarding",
        (Forwarding,),
        {
            "__init__": __init__,
            "publishes_received": module.publishes_received,
            "__doc__": forwarding_class.__doc__,
        },
    )
