"""A connection's output limits (:func:`over_limit`, applied by
:meth:`router.connection.Connection.flush`); the fan-out loop that queues one
pub/sub frame for many connections is :meth:`router.pubsub.PubSub.write_to_all`.

Pub/sub output is limited like ``client-output-buffer-limit pubsub``: over the
hard limit, or over the soft limit for longer than its seconds, the client is
closed asynchronously and counted (``client_output_buffer_limit_disconnections``);
the writer never waits for a slow reader, so no subscriber stalls the node.
Every other authenticated client is held to the ``normal`` class the same
way (Redis's ``getClientType``; no limit by default, ``normal 0 0 0``).
Before AUTH, a client that does not read its replies is closed as Redis
7.0.15 with the CVE-2025-21605 fix closes it (:data:`PREAUTH_OUTPUT_LIMIT`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from router.context import CommandContext


class _Wire(Protocol):
    def get_write_buffer_size(self) -> int: ...


class Connection(Protocol):
    """What the limits read of a connection (:class:`router.connection.Connection`)."""

    _out: list[bytes]
    _soft_limit_since: float | None

    @property
    def ctx(self) -> CommandContext: ...

    @property
    def wire(self) -> _Wire: ...


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


def over_limit(conn: Connection, pending: int, normal: bool = False) -> bool:
    """Whether ``conn``, with ``pending`` bytes the socket did not take, is
    past its ``client-output-buffer-limit`` class (Redis's
    ``checkClientOutputBufferLimits``): ``pubsub`` for a subscribed client,
    ``normal`` (``normal`` true) for the others; over the hard limit, or over
    the soft limit for longer than its seconds. (The connection's flush does
    the first case of a subscriber, ``pending`` 0, itself: keep them alike.)"""
    if not pending:  # the socket took it all: under every limit
        conn._soft_limit_since = None
        return False
    settings = conn.ctx.settings
    hard, soft, seconds = settings.normal_limits if normal else settings.pubsub_limits
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
