"""A connection's output limits (:func:`over_limit`, applied by
:meth:`router.connection.Connection.flush`) and the fan-out loop that queues
one pub/sub frame for many connections (:func:`write_to_all`).

Pub/sub output is limited like ``client-output-buffer-limit pubsub``: over the
hard limit, or over the soft limit for longer than its seconds, the client is
closed asynchronously and counted (``client_output_buffer_limit_disconnections``);
the writer never waits for a slow reader, so no subscriber stalls the node.
Before AUTH, a client that does not read its replies is closed as Redis
7.0.15 with the CVE-2025-21605 fix closes it (:data:`PREAUTH_OUTPUT_LIMIT`).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import TYPE_CHECKING

from router import resp

if TYPE_CHECKING:
    from router.connection import Connection
    from router.node import Node


#: Redis 7.0.15 as Debian ships it (CVE-2025-21605 fix): a client that must
#: authenticate and has not is freed at once (``freeClientAsync``, its
#: output dropped) when a reply does not fit in its 16 KiB reply buffer,
#: that is when more than 16384 bytes of replies wait to be written: 481
#: pipelined PINGs before AUTH are answered, 482 close the connection with
#: no reply at all (their NOAUTH errors are 34 bytes each).
PREAUTH_OUTPUT_LIMIT = 16 * 1024


def preauth_cut(conn: Connection) -> bool:
    """Whether ``conn``, not authenticated, must be cut before its queued
    output is written (:data:`PREAUTH_OUTPUT_LIMIT`: what is queued plus
    what an earlier write left waiting for the socket)."""
    waiting = sum(map(len, conn._out)) + conn.wire.get_write_buffer_size()
    return waiting > PREAUTH_OUTPUT_LIMIT and conn.ctx.acl.default_requires_auth()


def over_limit(conn: Connection, pending: int) -> bool:
    """Whether a subscribed ``conn``, with ``pending`` bytes the socket did
    not take, is past the ``client-output-buffer-limit pubsub`` class (Redis's
    ``checkClientOutputBufferLimits``): over the hard limit, or over the soft
    limit for longer than its seconds. Other authenticated clients, like
    Redis's ``normal`` class, have no limit."""
    if not pending:  # the socket took it all: under every limit
        conn._soft_limit_since = None
        return False
    hard, soft, seconds = conn.ctx.settings.pubsub_limits
    if hard and pending > hard:
        return True
    if not soft or pending <= soft:
        conn._soft_limit_since = None
        return False
    now = time.monotonic()
    if conn._soft_limit_since is None:
        conn._soft_limit_since = now
        return False
    return now - conn._soft_limit_since > seconds


def write_to_all(node: Node, subs: Collection[Connection], frame2: bytes) -> int:
    """Queue one pub/sub frame (RESP2 bytes; a RESP3 client gets it as a push)
    for every client in ``subs``; returns how many.

    The fan-out loop. For a client whose queue already holds output this loop
    turn (so it is already due to be flushed), the frame is appended in line:
    the call per receiver was a fifth of the cost of a delivered message
    (``bench.hot_path``, 10 subscribers). Anything else (a first frame this
    turn, a held or closed client, a RESP3 client) goes through ``write()``.

    A frame appended in line is not added to its client's ``_out_bytes``:
    that read-modify-write of an int was a third of the loop. The loop's bytes
    are added once to ``node.turn_output`` instead. No queue holds more than
    all of them together, so when that total passes the pubsub hard limit,
    every queue is written at once (``node.flush_all``), where its client's
    own count would have had it written (``write()``)."""
    frame3: bytes | None = None
    for client in subs:
        if client.resp == 2:
            out = client._out
            if out and client.blocked is None and not client.closed:
                out.append(frame2)
            else:
                client.write(frame2)
        else:
            if frame3 is None:
                frame3 = resp.as_push(frame2)
            client.write(frame3)
    n = len(subs)
    queued = node.turn_output + n * len(frame2)
    node.turn_output = queued
    if queued > node.context.settings.queue_limit:
        node.flush_all()
    return n
