"""Node id -> address: the tap's sidecar files, and how ``stats top`` names node bins.

Events name a node by its 40-hex id. A tap given the node's announced address
(``TrafficTap(..., address="10.0.0.5:7001")``) writes, next to its spool files,
``<node id>.node.json`` = ``{"node": id, "address": "host:port"}`` (written to
a ``.tmp`` name and renamed; not ``*.ndjson``, so the Spark file source never
reads it). Each micro-batch the job reads the sidecars of a local spool
(:func:`read_sidecars`) and the sinks keep the mapping (Redis hash
``bloomcast:stats:_nodes``, the ``"nodes"`` object of each batch file), so
``stats top`` shows a node bin as ``host:port (id prefix)``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SIDECAR_SUFFIX = ".node.json"
#: hex digits of a node id shown next to its address, or alone when unknown
ID_PREFIX = 12


def write_sidecar(directory: str | os.PathLike[str], node: str, address: str) -> Path:
    """Write ``<directory>/<node>.node.json`` atomically; returns its path."""
    path = Path(directory) / f"{node}{SIDECAR_SUFFIX}"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"node": node, "address": address}, sort_keys=True))
    os.replace(tmp, path)
    return path


def read_sidecars(spool: str) -> dict[str, str]:
    """node id -> address from the sidecars of a local spool ({} for a remote one, or
    when there are none). Unreadable sidecars are skipped."""
    if "://" in spool and not spool.startswith("file://"):
        return {}
    directory = Path(spool.removeprefix("file://"))
    out: dict[str, str] = {}
    try:
        paths = sorted(directory.glob(f"*{SIDECAR_SUFFIX}"))
    except OSError:
        return {}
    for path in paths:
        try:
            raw = json.loads(path.read_text())
            node, address = raw["node"], raw["address"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(node, str) and isinstance(address, str) and node and address:
            out[node] = address
    return out


def node_label(node: str, addresses: dict[str, str]) -> str:
    """``host:port (a1b2c3d4e5f6)`` when the address is known, else the id's first
    :data:`ID_PREFIX` hex digits (always the same width, never cut by the table)."""
    short = node[:ID_PREFIX]
    address = addresses.get(node)
    return f"{address} ({short})" if address else short
