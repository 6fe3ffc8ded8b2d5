"""Where a node listens and what it tells others: Redis's ``bind`` syntax and its
announce settings, as pure functions (the node's listeners and the bus share them).

``bind`` (redis.conf 7.0): one or more addresses; ``*`` is every IPv4
interface (0.0.0.0), ``::*`` every IPv6 one (::); a ``-`` prefix makes an
address optional: a node still starts when that address is not available on
any interface (EADDRNOTAVAIL) or its protocol is not supported; an address
already in use always fails.

Announcements (redis ``src/cluster.c`` ``deriveAnnouncedPorts`` and the
``cluster-announce-*`` settings): a node tells peers the client port, TLS port,
bus port, IP and hostname that clients and peers should use, which behind a
port forwarder or NAT are not the ones it listens on. Without
``cluster-announce-ip`` a node bound to a wildcard (or to several addresses)
learns its IP from the local address of the bus connection a MEET arrives
on, as Redis does (``clusterProcessPacket``); until then it shows "" (a
cluster client uses the address it connected to).
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from dataclasses import dataclass

WILDCARDS = {"*": "0.0.0.0", "::*": "::"}
#: errors that make an optional (``-``) bind address skipped, not fatal
OPTIONAL_ERRNOS = (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT)
LOOPBACKS = ("127.", "::1", "localhost")


@dataclass(frozen=True, slots=True)
class BindAddress:
    """One ``bind`` word: the address to listen on, and whether it may be missing."""

    host: str
    optional: bool = False

    @property
    def wildcard(self) -> bool:
        return self.host in ("0.0.0.0", "::", "")

    @property
    def loopback(self) -> bool:
        return self.host.startswith(LOOPBACKS)


def parse_bind(words: Sequence[str]) -> list[BindAddress]:
    """Redis's ``bind`` words -> addresses. ValueError on an empty list or word."""
    out = []
    for word in words:
        optional = word.startswith("-")
        host = word[1:] if optional else word
        if not host:
            raise ValueError(f"bad bind address {word!r}")
        out.append(BindAddress(WILDCARDS.get(host, host), optional))
    if not out:
        raise ValueError("bind needs at least one address")
    return out


def own_host(bind: Sequence[BindAddress], announce_ip: str | None) -> str:
    """The IP this node shows for itself before learning one: the announced
    IP, else the one specific address it is bound to, else "" (learned from
    the first MEET: :func:`learns_own_ip`)."""
    if announce_ip:
        return announce_ip
    specific = [b.host for b in bind if not b.wildcard]
    if len(bind) == 1 and len(specific) == 1:
        return specific[0]
    return ""


def learns_own_ip(announce_ip: str | None) -> bool:
    """Whether a MEET's local address may set this node's IP (Redis: only
    without ``cluster-announce-ip``)."""
    return not announce_ip


@dataclass(frozen=True, slots=True)
class Announced:
    """The ports a node tells its peers (0: none), and its hostname."""

    client_port: int
    tls_port: int
    bus_port: int
    hostname: str = ""


def announced(
    port: int,
    tls_port: int,
    bus_port: int,
    *,
    announce_port: int | None = None,
    announce_tls_port: int | None = None,
    announce_bus_port: int | None = None,
    announce_hostname: str | None = None,
) -> Announced:
    """``cluster-announce-port`` / ``-tls-port`` / ``-bus-port`` /
    ``-hostname`` over the ports the node listens on (0 or None: not set)."""
    return Announced(
        announce_port or port,
        announce_tls_port or tls_port,
        announce_bus_port or bus_port,
        announce_hostname or "",
    )
