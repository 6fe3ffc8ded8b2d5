"""Redis 7.0.15's COMMAND INFO and COMMAND DOCS entries of every command the
node implements, as data: ``redis_meta.json``, written from a running
``redis-server`` 7.0.15 by :mod:`router.commands.redis_meta_dump`, each value
with its RESP type (:class:`router.resp.Status` for a simple string,
:class:`router.resp.Set` for ``~`` in RESP3 / an array in RESP2).

Cluster clients route by these: SSUBSCRIBE and SUNSUBSCRIBE have their shard
channels as keys (first 1, last -1, step 1), SPUBLISH its shard channel
(first 1, last 1, step 1), each with one ``not_key`` key spec; the other
commands of a node have no keys. ``tests/differential/test_command_docs.py``
compares every entry with the binary, RESP2 and RESP3.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from router.resp import Set
from router.resp import Status as S

_DATA = os.path.join(os.path.dirname(__file__), "redis_meta.json")


@dataclass(frozen=True)
class Meta:
    """One command's COMMAND INFO entry but its subcommands (name, arity,
    flags, first/last key, step, ACL categories, tips, key specs) and its
    COMMAND DOCS map but its subcommands."""

    info: list[Any]
    docs: dict[str, Any]


def _typed(value: Any) -> Any:
    """A JSON value of ``redis_meta.json`` as the value :func:`router.resp.encode_value` encodes."""
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, dict):
        ((tag, inner),) = value.items()
        if tag == "+":
            return S(inner)
        if tag == "~":
            return Set(_typed(v) for v in inner)
        return {k: _typed(v) for k, v in inner}
    return value


def _load() -> dict[str, Meta]:
    with open(_DATA, "rb") as fh:
        raw = json.load(fh)
    raw.pop("_source")
    return {name: Meta(_typed(e["info"]), _typed(e["docs"])) for name, e in raw.items()}


_META: dict[str, Meta] = {}


def command_meta(name: str) -> Meta | None:
    """Redis 7.0.15's COMMAND INFO / DOCS entry of ``name`` (None if Redis has
    none). The table is read on the first COMMAND INFO or DOCS, not at start:
    ~0.4 MB of RSS that a node serving pub/sub never needs."""
    if not _META:
        _META.update(_load())
    return _META.get(name)
