"""A client connection's output: one queue for replies and pub/sub messages,
written once per event-loop turn (:class:`ClientOutput`, a base of
:class:`router.client.Client`).

Pub/sub output is limited like ``client-output-buffer-limit pubsub``: over the
hard limit, or over the soft limit for longer than its seconds, the client is
closed asynchronously and counted (``client_output_buffer_limit_disconnections``);
the writer never waits for a slow reader, so no subscriber stalls the node.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TYPE_CHECKING, cast

from router import client_log

if TYPE_CHECKING:
    from router.client import Client
    from router.client_extras import ClientExtras
    from router.node import Node


class ClientOutput:
    """The output half of a client; its attributes are set by ``Client.__init__``."""

    node: Node
    extras: ClientExtras
    transport: asyncio.Transport | None
    closed: bool
    channels: dict[bytes, None]  # subscriptions (router/pubsub.py)
    patterns: dict[bytes, None]
    shard_channels: dict[bytes, None]
    resp: int  # 2 or 3 (HELLO)
    _blocked: asyncio.Future[bytes] | None
    _held: list[bytes]
    _out: list[bytes]
    _out_bytes: int
    _queue_limit: int
    _soft_limit_since: float | None
    _work_started: int | None

    def subscription_count(self) -> int:
        """Channels + patterns: the count in (un)subscribe replies (Redis
        ``clientSubscriptionsCount``; shard channels are counted apart)."""
        return len(self.channels) + len(self.patterns)

    def write(self, data: bytes) -> None:
        """Queue output (a reply or a pub/sub message); the node flushes every
        queued client once per event-loop turn, after reading from every ready
        client (Redis writes in ``beforeSleep``,
        ``handleClientsWithPendingWrites``). Output leaves in the order it was
        made, and a pipelined batch or many messages to one client cost one
        system call. While a (P|S)SUBSCRIBE confirmation is held for subscribe
        visibility, messages wait behind it: Redis always confirms first."""
        if self.closed or self.transport is None:
            return
        if self._blocked is not None:
            self._held.append(data)
            return
        out = self._out
        if not out:
            self.node.schedule_flush(self)
        out.append(data)
        self._out_bytes += len(data)
        if self._out_bytes > self._queue_limit:
            self.flush()

    def flush(self) -> None:
        """Write the queued output; a pub/sub client is held to the
        ``client-output-buffer-limit pubsub`` limits (other clients, like
        Redis's ``normal`` class, have none)."""
        transport = self.transport
        out = self._out
        self._work_started = None
        if not out or self.closed or transport is None:
            out.clear()
            self._out_bytes = 0
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        transport.write(data)
        self.node.stats.net_output_bytes += len(data)
        out.clear()
        self._out_bytes = 0
        if not (self.channels or self.patterns or self.shard_channels):
            return
        size = transport.get_write_buffer_size()
        if not size:  # the socket took it all: under every limit
            self._soft_limit_since = None
            return
        config = self.node.config
        if size <= config.pubsub_soft_limit or not config.pubsub_soft_limit:
            self._soft_limit_since = None
            if size <= config.pubsub_hard_limit or not config.pubsub_hard_limit:
                return
        if config.pubsub_hard_limit and size > config.pubsub_hard_limit:
            self._cut_slow()
            return
        now = time.monotonic()
        if self._soft_limit_since is None:
            self._soft_limit_since = now
        elif now - self._soft_limit_since > config.pubsub_soft_seconds:
            self._cut_slow()

    def _cut_slow(self) -> None:
        # Redis frees such a client asynchronously (freeClientAsync); abort()
        # drops the buffered output and calls connection_lost on a later turn
        # of the loop, so the delivery loop in progress is not disturbed.
        self.node.stats.output_buffer_limit_disconnections += 1
        client_log.output_buffer_cut(cast("Client", self))  # omem= is the size that cut it
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def refuse(self, reply: bytes) -> None:
        """Write ``reply`` and close, reading nothing (protected mode): the
        connection never counts as a client."""
        self.closed = True
        self.extras.refused = True
        transport = self.transport
        if transport is not None:
            transport.write(reply)
            # half-close, and close once the peer does (a close with its
            # request still unread would reset the connection and could lose
            # the reply); a peer that never closes is cut after 5 s
            transport.write_eof()
            asyncio.get_running_loop().call_later(5.0, transport.abort)

    def drop(self) -> None:
        """Close without writing what is queued (Redis's freeClient of a
        client that sent an HTTP request)."""
        self._out.clear()
        self._out_bytes = 0
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def kill(self) -> None:
        """Close now, dropping pending output (Redis's freeClientAsync of an
        ACL revocation or a deleted user)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def output_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport else 0

    def set_queue_limit(self, hard_limit: int) -> None:
        """CONFIG SET client-output-buffer-limit changed the pubsub hard limit."""
        self._queue_limit = hard_limit or sys.maxsize

    def swap_output(self, out: list[bytes]) -> list[bytes]:
        """Make ``out`` the output queue; returns the queue it replaces (EXEC
        collects what its commands write into its own reply)."""
        saved, self._out = self._out, out
        return saved
