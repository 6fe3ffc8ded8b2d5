"""How CLIENT LIST / INFO / KILL and ACL LOG see a connection: its type
(TYPE filters), its flags and its line, Redis 7.0.15's ``catClientInfoString``
(``src/networking.c``): the same fields in the same order, each with the
value the node has for it.

Where the node keeps things differently from Redis, the fields say what the
node holds: ``qbuf`` / ``qbuf-free`` are the parser's buffer (while a
request runs, the whole read it came in, as Redis's query buffer is trimmed
after the read's requests ran); there is no fixed reply buffer (``rbs`` and
``rbp`` are 0): replies are queued for the end of the loop iteration (``obl``,
their bytes) and what the socket did not take waits in the transport
(``omem``, what the pub/sub output limits read; ``oll`` 1 while it does);
``tot-mem`` adds up those buffers, the arguments and the MULTI queue, not
the Python objects. ``lib-name`` / ``lib-ver`` (CLIENT SETINFO, Redis 7.2's)
follow Redis 7.0.15's last field, where Redis 7.2 puts them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from router.context import CommandClient

#: Redis getClientTypeByName; the node has no master or replica connections
CLIENT_TYPES = frozenset({b"normal", b"pubsub", b"master", b"slave", b"replica"})

#: Redis's pointer size: MULTI's memory counts one per queued argument
_POINTER = 8


def client_type(c: CommandClient) -> bytes:
    """Redis getClientType: pubsub while subscribed to anything, else normal."""
    return b"pubsub" if c.channels or c.patterns or c.shard_channels else b"normal"


def flags(c: CommandClient) -> str:
    """CLIENT LIST flags=, in Redis's order: P pub/sub, x MULTI, b blocked
    (a reply waiting: CLIENT PAUSE, subscribe visibility), t tracking, R its
    tracking redirect is gone, B tracking in BCAST mode, c closing after the
    reply, A closing as soon as possible, r READONLY, e NO-EVICT; N for
    none; O first for a MONITOR client."""
    extras = c.extras
    shown = "O" if extras.monitor else ""
    if c.channels or c.patterns or c.shard_channels:
        shown += "P"
    if c.multi is not None or c.extras.executing is not None:
        shown += "x"
    if c.blocked is not None:
        shown += "b"
    tracking = extras.tracking
    if tracking is not None:
        shown += "t"
        if tracking.broken_redirect:
            shown += "R"
        if tracking.bcast:
            shown += "B"
    if c.closing:
        shown += "A" if c.closed else "c"
    if extras.readonly:
        shown += "r"
    if extras.no_evict:
        shown += "e"
    return shown or "N"


def info_line(c: CommandClient, argv: list[bytes] | None = None) -> str:
    """One CLIENT LIST / CLIENT INFO line (also ACL LOG's ``client-info`` and
    the log's client). ``argv``: the request ``c`` is running (the caller of
    CLIENT LIST / INFO, the client an ACL LOG entry is about), None for a
    client listed by another."""
    now = time.monotonic()
    running = argv is not None
    qbuf, qbuf_free, qbuf_alloc = c.parser.query_buffer(running)
    multi, before = c.multi, 0
    executing = c.extras.executing
    if executing is not None:  # inside EXEC: EXEC's own arguments, its queue
        multi, saved = executing
        argv, before = [b"exec"], sum(len(frame) for frame in saved)
    argv_mem = sum(len(a) for a in argv) if argv is not None else c.parser.partial_bytes
    multi_mem = (
        sum(sum(len(a) for a in args) + _POINTER * len(args) for _, args in multi)
        if multi is not None
        else 0
    )
    obl = before + c.queued_bytes()
    omem = c.output_buffer_size()
    reading = c.is_reading()
    events = ("r" if reading else "") + ("w" if omem else "")
    tracking = c.extras.tracking
    return (
        f"id={c.id} addr={c.addr} laddr={c.extras.laddr} fd={c.extras.fd} "
        f"name={c.name.decode(errors='replace')} age={int(now - c.extras.created)} "
        f"idle={int(now - c.last_interaction)} flags={flags(c)} db={c.extras.db} "
        f"sub={len(c.channels)} psub={len(c.patterns)} ssub={len(c.shard_channels)} "
        f"multi={-1 if multi is None else len(multi)} qbuf={qbuf} qbuf-free={qbuf_free} "
        f"argv-mem={argv_mem} multi-mem={multi_mem} rbs=0 rbp=0 obl={obl} "
        f"oll={1 if omem else 0} omem={omem} "
        f"tot-mem={qbuf_alloc + argv_mem + multi_mem + obl + omem} events={events} "
        f"cmd={c.last_command} user={c.user.name.decode(errors='replace')} "
        f"redir={-1 if tracking is None else tracking.redirect} resp={c.resp} "
        f"lib-name={c.extras.lib_name.decode(errors='replace')} "
        f"lib-ver={c.extras.lib_ver.decode(errors='replace')}"
    )


def acl_context(c: CommandClient) -> str:
    """ACL LOG's context of what ``c`` runs now: ``multi`` while queueing in
    MULTI or running EXEC's commands (Redis's CLIENT_MULTI), else ``toplevel``."""
    return "multi" if c.multi is not None or c.in_exec else "toplevel"
