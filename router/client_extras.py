"""What a client connection keeps besides its hot attributes (:class:`ClientExtras`),
and its CLIENT TRACKING state (:class:`Tracking`, router/commands/tracking.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Tracking:
    """A connection's CLIENT TRACKING state while it is on (Redis's
    ``CLIENT_TRACKING*`` flags, redirection and prefixes)."""

    redirect: int = 0  # client id; 0: none
    bcast: bool = False
    optin: bool = False
    optout: bool = False
    noloop: bool = False
    caching: bool = False  # CLIENT CACHING given for the next command
    broken_redirect: bool = False  # its redirect target was gone at an invalidation
    prefixes: list[bytes] = field(default_factory=list)  # BCAST, in byte order
    #: invalidations of this client due after its EXEC's reply
    after_exec: list[bytes] = field(default_factory=list)


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
    monitor: bool = False  # MONITOR (router/hooks.py); CLIENT LIST flags=O
    readonly: bool = False  # READONLY on a cluster node: shown only (flags=r)
    #: while EXEC runs: its queue and the output queued before it (CLIENT LIST
    #: shows them: Redis keeps CLIENT_MULTI and the reply buffer until EXEC ends)
    executing: tuple[Any, list[bytes]] | None = None
    peer_ip: str = ""  # protected mode's test, at connect
    refused: bool = False  # protected mode turned it away at connect
    laddr: str = "?:0"  # CLIENT LIST / KILL LADDR
    fd: int = -1  # the socket's descriptor (CLIENT LIST fd=)
    tracking: Tracking | None = None  # CLIENT TRACKING on (router/commands/tracking.py)
