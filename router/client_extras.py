"""What a client connection keeps besides its hot attributes (:class:`ClientExtras`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from router.commands.base import Transaction
    from router.commands.tracking import Tracking


@dataclass(slots=True)
class ClientExtras:
    """State read rarely, kept out of the Client's own attributes (CPython
    shares an instance dict's keys only up to 30 of them; past that every
    attribute read on the hot path is slower)."""

    created: float = field(default_factory=time.monotonic)
    db: int = 0  # SELECT: recorded only, pub/sub ignores it (as Redis)
    lib_name: bytes = b""  # CLIENT SETINFO
    lib_ver: bytes = b""
    no_evict: bool = False  # CLIENT NO-EVICT: shown only (the node evicts no client)
    #: while EXEC runs: its queue and the output queued before it (CLIENT LIST
    #: shows them: Redis keeps CLIENT_MULTI and the reply buffer until EXEC ends)
    executing: tuple[Transaction, list[bytes]] | None = None
    peer_ip: str = ""  # protected mode's test, at connect
    refused: bool = False  # protected mode turned it away at connect
    laddr: str = "?:0"  # CLIENT LIST / KILL LADDR
    fd: int = -1  # the socket's descriptor (CLIENT LIST fd=)
    tracking: Tracking | None = None  # CLIENT TRACKING on (router/commands/tracking.py)
