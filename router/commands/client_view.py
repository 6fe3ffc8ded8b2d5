"""How CLIENT LIST / INFO / KILL see a connection: its type (TYPE filters),
its flags and its line (Redis's field names)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from router.client import Client

#: Redis getClientTypeByName; the node has no master or replica connections
CLIENT_TYPES = frozenset({b"normal", b"pubsub", b"master", b"slave", b"replica"})


def client_type(c: Client) -> bytes:
    """Redis getClientType: pubsub while subscribed to anything, else normal."""
    return b"pubsub" if c.channels or c.patterns or c.shard_channels else b"normal"


def flags(c: Client) -> str:
    """CLIENT LIST flags=, in Redis's order (P pub/sub, x MULTI, e NO-EVICT)."""
    shown = "P" if c.channels or c.patterns or c.shard_channels else ""
    if c.multi is not None:
        shown += "x"
    if c.extras.no_evict:
        shown += "e"
    return shown or "N"


def info_line(c: Client) -> str:
    """One CLIENT LIST / CLIENT INFO line (Redis's field names)."""
    now = time.monotonic()
    return (
        f"id={c.id} addr={c.addr} laddr={c.extras.laddr} fd=-1 "
        f"name={c.name.decode(errors='replace')} age={int(now - c.extras.created)} "
        f"idle={int(now - c.last_interaction)} flags={flags(c)} db={c.extras.db} "
        f"sub={len(c.channels)} psub={len(c.patterns)} ssub={len(c.shard_channels)} "
        f"multi={-1 if c.multi is None else len(c.multi)} qbuf={c.parser.buffered} "
        f"omem={c.output_buffer_size()} cmd={c.last_command} "
        f"user={c.user.name.decode(errors='replace')} resp={c.resp} "
        f"lib-name={c.extras.lib_name.decode(errors='replace')} "
        f"lib-ver={c.extras.lib_ver.decode(errors='replace')}"
    )


def acl_context(c: Client) -> str:
    """ACL LOG's context of what ``c`` runs now: ``multi`` while queueing in
    MULTI or running EXEC's commands (Redis's CLIENT_MULTI), else ``toplevel``."""
    return "multi" if c.multi is not None or c.extras.in_exec else "toplevel"
