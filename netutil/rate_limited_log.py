""":class:`RateLimitedLog`, the node's one rate-limited log: a warning is logged
at most once per (kind, peer) per ``EVERY_MS``, with how many were not logged
since.

Its first use: refused and failed bus links, each counted (CLUSTER INFO) on
the side that sees it and logged through it, so a peer with the wrong secret
or a plain node dialling a TLS bus does not flood the log every second (issue
30: misconfiguration visible on both sides, rate-limited). The traffic tap,
the spool's HTTP server, the nodes file and the event loop's error log write
through it too, by cause (issue 41)."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("bloomcast.bus")

EVERY_MS = 60_000
#: what a reply in the Redis protocol starts with: a seed that is a client port
RESP_FIRST_BYTES = b"+-:$*_#,(!=%~>|"
CLIENT_PORT_HINT = (
    "the address answers in the Redis protocol: is it a client port? "
    "(the bus port is the client port + 10000 unless --cluster-port)"
)


class RateLimitedLog:
    """Rate-limited warnings keyed by (kind, peer address), on ``logger``."""

    def __init__(self, every_ms: int = EVERY_MS, logger: logging.Logger = log) -> None:
        self.every_ms = every_ms
        self.log = logger
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # -> (logged at, unlogged)

    def warn(self, kind: str, peer: str, message: str) -> bool:
        """Log ``message`` unless one of ``kind`` about ``peer`` was logged less
        than ``every_ms`` ago (then it is only counted). True when logged."""
        now = time.monotonic() * 1000
        key = (kind, peer)
        at, unlogged = self._last.get(key, (-float("inf"), 0))
        if now - at < self.every_ms:
            self._last[key] = (at, unlogged + 1)
            return False
        more = f" ({unlogged} more since the last such line)" if unlogged else ""
        self.log.warning("%s%s", message, more)
        self._last[key] = (now, 0)
        if len(self._last) > 4096:  # many peers: keep the newest
            for old in sorted(self._last, key=lambda k: self._last[k][0])[:2048]:
                del self._last[old]
        return True


def resp_hint(reason: str, data_start: bytes) -> str:
    """``reason`` with a hint when the bytes a handshake got look like RESP."""
    if data_start[:1] and data_start[:1] in RESP_FIRST_BYTES:
        return f"{reason}; {CLIENT_PORT_HINT}"
    return reason
