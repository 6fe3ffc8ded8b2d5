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

import asyncio
import errno
import logging
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from netutil.acceptor import Acceptor, Listener, listening_sockets

log = logging.getLogger("bloomcast.node")

WILDCARDS = {"*": "0.0.0.0", "::*": "::"}
#: errors that make an optional (``-``) bind address skipped, not fatal
OPTIONAL_ERRNOS = (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT)
LOOPBACKS = ("127.", "::1", "localhost")
#: Redis's NET_HOST_STR_LEN: a hostname is shorter than this
NET_HOST_STR_LEN = 256
#: the longest DNS label (RFC 1035; Python's resolver raises UnicodeError above it)
MAX_LABEL = 63
_HOSTNAME_CHARS = re.compile(r"[A-Za-z0-9.-]*")
#: an IPv6 zone: an interface name (IFNAMSIZ) or index
_ZONE = re.compile(r"[A-Za-z0-9._-]{1,15}")
HOSTNAME_LENGTH_ERROR = f"Hostnames must be less than {NET_HOST_STR_LEN} characters"
HOSTNAME_CHARS_ERROR = "Hostnames may only contain alphanumeric characters, hyphens or dots"


def hostname_error(name: str) -> str | None:
    """Why ``name`` is no valid announced hostname (Redis 7.0's rule and
    wording, ``isValidAnnouncedHostname``), or None ("" is valid: none)."""
    if len(name) >= NET_HOST_STR_LEN:
        return HOSTNAME_LENGTH_ERROR
    if _HOSTNAME_CHARS.fullmatch(name) is None:
        return HOSTNAME_CHARS_ERROR
    return None


def normal_ip(host: str) -> str | None:
    """``host`` as ``inet_ntop`` writes it when it is an IPv4 or IPv6 literal
    (``inet_pton``'s forms, no zone), else None: Redis's IP check and
    normalization (``clusterStartHandshake``)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.inet_ntop(family, socket.inet_pton(family, host))
        except (OSError, ValueError):  # ValueError: a NUL, or not encodable
            continue
    return None


def is_ip(host: str) -> bool:
    """``host`` is an IPv4 or IPv6 literal (what :func:`normal_ip` takes)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        socket.inet_pton(family, host)
    except (OSError, ValueError):
        return False
    return True


def address_error(host: str) -> str | None:
    """Why ``host`` cannot be dialled as a node's address, or None: an IP
    literal (an IPv6 one may name its zone, ``fe80::1%eth0``), or a hostname
    (:func:`hostname_error`) whose dot-separated labels are 1..63 characters
    (one trailing dot allowed), which the resolver takes without raising."""
    if not host:
        return "empty address"
    if (":" in host or host[-1].isdigit()) and is_ip(host):  # (a name ends in a letter)
        return None
    ip, scoped, zone = host.partition("%")  # a link-local IPv6 address, as a socket names it
    if scoped and ":" in ip and is_ip(ip) and _ZONE.fullmatch(zone):
        return None
    error = hostname_error(host)
    if error is not None:
        return f"not an IP address, and {error[0].lower()}{error[1:]}"
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if any(not 0 < len(label) <= MAX_LABEL for label in labels):
        return f"not an IP address, and a host name's labels are 1..{MAX_LABEL} characters"
    return None


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


def parse_seed(seed: str) -> tuple[str, int]:
    """A ``--join`` seed ``HOST:BUSPORT`` -> (host, port): HOST an IP literal
    (an IPv6 one with or without brackets) or a host name
    (:func:`address_error`), 127.0.0.1 when empty; ValueError saying why not."""
    host, sep, port = seed.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("expected HOST:BUSPORT, e.g. 127.0.0.1:17001")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host or "127.0.0.1"
    error = address_error(host)
    if error is not None:
        raise ValueError(f"invalid host ({error})")
    return host, int(port)


def first_host(bind: str) -> str:
    """The first of Redis's bind words, as an address."""
    return parse_bind(bind.split())[0].host


async def listen(
    factory: Callable[[], asyncio.BaseProtocol],
    bind: str,
    port: int,
    *,
    serve: bool = True,
    backlog: int = 511,
    on_accept_error: Callable[[OSError], None] | None = None,
) -> tuple[list[Listener], int]:
    """A listener on ``port`` at each of Redis's ``bind`` addresses (port 0: the
    first one's free port for all of them). An optional (``-``) address that
    does not exist here is skipped, as Redis does; any other failure closes
    what was opened and raises. Returns the servers and the port. With
    ``on_accept_error``, the listeners are :class:`netutil.acceptor.Acceptor`
    objects that report each failed accept() to it (EMFILE: counted, logged)."""
    loop = asyncio.get_running_loop()
    servers: list[Listener] = []
    for address in parse_bind(bind.split()):
        try:
            if on_accept_error is not None:
                for sock in listening_sockets(address.host, port, backlog):
                    acceptor = Acceptor(sock, factory, on_accept_error)
                    servers.append(acceptor)
                    if serve:
                        await acceptor.start_serving()
                port = port or servers[-1].sockets[0].getsockname()[1]
                continue
            server = await loop.create_server(
                factory,
                address.host,
                port,
                reuse_address=True,
                start_serving=serve,
                backlog=backlog,
            )
        except OSError as exc:
            if address.optional and exc.errno in OPTIONAL_ERRNOS:
                log.info("skipping optional bind address %s: %s", address.host, exc.strerror)
                continue
            for opened in servers:
                opened.close()
            raise
        servers.append(server)
        port = port or server.sockets[0].getsockname()[1]
    if not servers:
        raise OSError(errno.EADDRNOTAVAIL, f"none of the bind addresses is available: {bind}")
    return servers, port


def client_port(port: int, tls_port: int, tls: bool) -> int:
    """The port a client is told: the TLS port to a TLS client, the plaintext
    one to a plaintext client, either when the node has only the other
    (Redis 7.0 ``clusterGenNodeDescription`` / ``addNodeToNodeReply``)."""
    if tls:
        return tls_port or port
    return port or tls_port
