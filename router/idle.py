"""IdleTimer: redis.conf ``timeout``, closing clients idle for too long.

Redis 7.0.15's ``clientsCronHandleTimeout``: with ``timeout`` > 0, a client
whose last request came more than ``timeout`` seconds ago is freed (no
reply), logged at verbose as "Closing idle client". Pub/sub clients (RESP2
or RESP3, subscribed to anything) and blocked ones are exempt
(:meth:`router.connection.CommandClient.idle_for`). Redis's cron visits each
client at least once a second (every 100 ms with few clients); the timer
here runs only while ``timeout`` is set, every 100 ms up to 50 clients and
then less often, at most a second apart, checking every client.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from router import client_log

if TYPE_CHECKING:
    from router.context import CommandClient
    from router.settings import Settings


class IdleTimer:
    """Closes idle clients of ``clients`` while a timeout is set."""

    def __init__(self, clients: dict[int, CommandClient]) -> None:
        self._clients = clients
        self._timeout = 0
        self._handle: asyncio.TimerHandle | None = None

    def set_timeout(self, seconds: int) -> None:
        """Start, change or (0) stop the timeout; CONFIG SET timeout."""
        self._timeout = seconds
        if not seconds:
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
        elif self._handle is None:
            self._schedule()

    def settings_changed(self, old: Settings, new: Settings) -> None:
        """CONFIG SET swapped the settings (:class:`router.settings.Settings`)."""
        if new.timeout != old.timeout:
            self.set_timeout(new.timeout)

    def _schedule(self) -> None:
        period = min(1.0, max(0.1, len(self._clients) / 500))
        self._handle = asyncio.get_running_loop().call_later(period, self._tick)

    def _tick(self) -> None:
        self._handle = None
        timeout = self._timeout
        if not timeout:
            return
        now = time.monotonic()
        for conn in list(self._clients.values()):
            idle = conn.idle_for(now)
            if idle is not None and idle > timeout and not conn.closed:
                client_log.idle_closed(conn)
                conn.kill()
        self._schedule()
