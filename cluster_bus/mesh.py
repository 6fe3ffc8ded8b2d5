"""The full mesh: which link reaches each peer, sending on it, and dialling.

Redis Cluster's model: one outbound connection to every known peer, dialled
and kept by this node, plus the peer's inbound one (two links per pair). A
frame to a peer goes on our outbound link when it is up, so filter deltas,
heartbeats and PUBLISH forwards to one peer stay in one ordered stream; else
on the peer's inbound link. :class:`Dialer` redials with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from cluster_bus.api import LinkInfo
from cluster_bus.clock import Address, now_ms
from cluster_bus.codec import encode
from cluster_bus.frames import MSG_TYPE, Message, NodeFlags
from cluster_bus.info import BusStats
from cluster_bus.membership import Membership
from netutil.rate_limited_log import RateLimitedLog

if TYPE_CHECKING:
    from cluster_bus.link import Link

log = logging.getLogger("bloomcast.bus")

BACKOFF_BASE_MS = 100


class Mesh:
    """This node's links: all of them, and the authenticated one each way per peer."""

    def __init__(self, sender: int, stats: BusStats) -> None:
        self._sender = sender  # our short id, in every frame header
        self._stats = stats
        self.out: dict[str, Link] = {}
        self.inbound: dict[str, Link] = {}
        self.links: set[Link] = set()
        #: links still in the handshake (the cron times them out)
        self.handshaking: set[Link] = set()
        #: accepted links still in the handshake, per source address: what
        #: the accept-side caps count (cluster-max-handshakes[-per-ip])
        self.accepting: dict[str, int] = {}
        self.accepting_total = 0
        #: bumped when ``out`` changes (a peer's link state in CLUSTER NODES)
        self.version = 0

    def add(self, link: Link) -> None:
        """A new link, not yet authenticated."""
        self.links.add(link)
        self.handshaking.add(link)
        if not link.outbound:
            host = link.peer_host
            self.accepting[host] = self.accepting.get(host, 0) + 1
            self.accepting_total += 1

    def _accepted(self, link: Link) -> None:
        """An accepted link leaves its handshake (done or closed)."""
        if link.outbound or link not in self.handshaking:
            return
        host = link.peer_host
        left = self.accepting.get(host, 0) - 1
        if left > 0:
            self.accepting[host] = left
        else:
            self.accepting.pop(host, None)
        self.accepting_total -= 1

    def adopt(self, link: Link) -> bool:
        """An authenticated link becomes the way to its peer; False (and the
        link is closed) when an authenticated outbound link to it exists."""
        self._accepted(link)
        self.handshaking.discard(link)
        peer = link.peer_id
        assert peer is not None
        if not link.outbound:
            self.inbound[peer] = link
            return True
        old = self.out.get(peer)
        if old is not None and old is not link and old.authenticated:
            link.close()
            return False
        self.out[peer] = link
        self.version += 1
        return True

    def drop(self, link: Link) -> None:
        """A closed link is no longer a way to its peer."""
        self.links.discard(link)
        self._accepted(link)
        self.handshaking.discard(link)
        peer = link.peer_id
        if peer is None:
            return
        if self.out.get(peer) is link:
            del self.out[peer]
            self.version += 1
        if self.inbound.get(peer) is link:
            del self.inbound[peer]

    def close_peer(self, node_id: str) -> None:
        for table in (self.out, self.inbound):
            link = table.get(node_id)
            if link is not None:
                link.close()

    def infos(self) -> list[LinkInfo]:
        """CLUSTER LINKS: our link to each peer, then each peer's link to us."""
        out = []
        for direction, table in (("to", self.out), ("from", self.inbound)):
            for node_id, link in table.items():
                if link.authenticated and not link.closed:
                    used = link.send_buffer_used()
                    events = "rw" if used else "r"
                    out.append(LinkInfo(direction, node_id, link.created_ms, events, used, used))
        return out

    def link_to(self, node_id: str) -> Link | None:
        link = self.out.get(node_id)
        if link is not None and link.authenticated:
            return link
        link = self.inbound.get(node_id)
        if link is not None and link.authenticated:
            return link
        return None

    def linked_out(self, node_id: str) -> bool:
        """Our own link to the peer is up (what CLUSTER NODES shows)."""
        link = self.out.get(node_id)
        return link is not None and link.authenticated

    def connected(self) -> int:
        return sum(1 for link in self.links if link.authenticated)

    def live(self, ms: Membership) -> list[tuple[str, Link]]:
        """(peer, link) for every peer not in FAIL that we can reach."""
        live = []
        for node_id, rec in ms.peers.items():
            if rec.flags & NodeFlags.FAIL:
                continue
            link = self.link_to(node_id)
            if link is not None:
                live.append((node_id, link))
        return live

    def last_heard(self, node_id: str, link: Link) -> int:
        """When any link of ``node_id`` last delivered bytes (ms)."""
        inbound = self.inbound.get(node_id)
        return max(link.last_rx_ms, inbound.last_rx_ms if inbound is not None else 0)

    def send(self, link: Link, msg: Message) -> None:
        link.write(encode(msg, self._sender))
        self._stats.sent[MSG_TYPE[type(msg)]] += 1

    def send_to(self, node_id: str, msg: Message, fallback: Link | None = None) -> None:
        """Send to ``node_id`` on its preferred link, else on ``fallback``."""
        link = self.link_to(node_id) or fallback
        if link is not None and not link.closed:
            self.send(link, msg)


#: dials of one node in flight at once, from the connect to the end of the
#: handshake: a node that starts (or heals) among hundreds dials them this
#: many at a time, so its own handshakes and its peers' stay few enough to
#: end within the handshake timeout on a loaded machine (issue 40: 200 nodes
#: dialling every peer at once timed out ~640 handshakes per node, each
#: redialled)
DIALS_IN_FLIGHT = 16
#: addresses with a backoff kept at most (gossip, seeds and the nodes file
#: name them; each entry is one failed address): past it the entries due
#: longest ago go, so an address not dialled for long starts afresh
MAX_BACKOFF = 4096
#: a backoff entry not dialled again this long after it was due is forgotten
#: (the address is no longer wanted: a peer forgotten, a seed expired)
BACKOFF_FORGET_MS = 60_000


class Dialer:
    """Dials peers' bus addresses: at most ``in_flight`` at a time (a dial
    counts until its handshake ends), one per address, never our own; a dial
    that fails, to connect or in its handshake, is retried after an
    exponential backoff with full jitter (AWS architecture blog "Exponential
    Backoff And Jitter": delay = rand(0.5, 1) * min(cap, base * 2^attempt);
    Valkey throttles its cluster bus reconnects the same way,
    valkey-io/valkey#2154). Time comes from ``clock`` (ms).

    A dial frees its place whatever its connect raises (issue 49: a host the
    resolver refuses raised UnicodeError or ValueError, and its address
    stayed in ``dialing`` for good; 16 of them and the node never dialled
    again): anything but a refused or timed-out connect is counted in
    ``dial_errors`` (CLUSTER INFO ``cluster_stats_dial_errors``), logged at
    most once a minute per address, and backed off like any failure."""

    #: dials whose connect raised something other than OSError / TimeoutError
    dial_errors = 0
    #: their log lines, at most one a minute per address
    _dial_warnings = RateLimitedLog(logger=log)

    def __init__(
        self,
        make_link: Callable[[Address], asyncio.Protocol],
        node_timeout_ms: int,
        *,
        clock: Callable[[], int] = now_ms,
        rng: random.Random | None = None,
        in_flight: int = DIALS_IN_FLIGHT,
    ) -> None:
        self._make_link = make_link
        self.node_timeout_ms = node_timeout_ms
        self.clock = clock
        self.in_flight = in_flight
        self.backoff: dict[Address, tuple[int, int]] = {}  # -> (attempt, next dial ms)
        self.myself: set[Address] = set()
        #: addresses dialled whose handshake has not ended (connected / failed)
        self.dialing: set[Address] = set()
        self._rng = rng or random.Random()
        self.stopping = False

    def dial(self, key: Address) -> None:
        if key in self.dialing or self.stopping:
            return
        self.dialing.add(key)
        asyncio.get_running_loop().create_task(self._dial(key))

    def due(self, key: Address, now: int) -> bool:
        """Whether ``key`` may be dialled now: its backoff passed, no dial of it
        under way, and fewer than ``in_flight`` dials under way."""
        _, next_ms = self.backoff.get(key, (0, 0))
        if now < next_ms or key in self.dialing or key in self.myself:
            return False
        return len(self.dialing) < self.in_flight

    def connected(self, key: Address) -> None:
        """The handshake of our dial to ``key`` completed."""
        self.backoff.pop(key, None)
        self.dialing.discard(key)

    def failed(self, key: Address, why: object = "closed in its handshake") -> None:
        """Our dial to ``key`` failed (connect, or the link closed before its
        handshake completed): retry after the backoff."""
        if key not in self.dialing:
            return
        self.dialing.discard(key)
        attempt, _ = self.backoff.get(key, (0, 0))
        cap = min(2000, max(200, self.node_timeout_ms // 2))
        delay = min(cap, BACKOFF_BASE_MS * 2**attempt) * self._rng.uniform(0.5, 1.0)
        self.backoff[key] = (attempt + 1, self.clock() + int(delay))
        if len(self.backoff) > MAX_BACKOFF:
            self.expire(self.clock())
        log.debug("dial %s:%d failed (%s); retry in %d ms", key[0], key[1], why, delay)

    def expire(self, now: int) -> int:
        """Forget backoffs due more than ``BACKOFF_FORGET_MS`` ago, then, when
        still over ``MAX_BACKOFF``, those due longest ago down to half of it
        (so a flood of addresses sorts once per ``MAX_BACKOFF / 2``); how many
        went."""
        before = len(self.backoff)
        stale = [k for k, (_, due) in self.backoff.items() if now - due > BACKOFF_FORGET_MS]
        for key in stale:
            del self.backoff[key]
        if len(self.backoff) > MAX_BACKOFF:
            over = len(self.backoff) - MAX_BACKOFF // 2
            oldest = sorted(self.backoff, key=lambda k: self.backoff[k][1])[:over]
            for key in oldest:
                del self.backoff[key]
        return before - len(self.backoff)

    def listening(self, key: Address, now: int) -> None:
        """The node announcing ``key`` just reached us (its MEET): it is up, so
        the backoff our dials there built while it was starting no longer
        applies; dial it now. Once per MEET (one per link it makes to us),
        so an address we cannot reach is not dialled in a loop."""
        self.backoff.pop(key, None)
        if self.due(key, now):
            self.dial(key)

    async def _dial(self, key: Address) -> None:
        host, port = key
        loop = asyncio.get_running_loop()
        connected = False
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: self._make_link(key), host, port),
                max(1.0, self.node_timeout_ms / 2000),
            )
            connected = True  # its place is held until the handshake ends
        except (TimeoutError, OSError) as exc:
            self.failed(key, exc)
        except Exception as exc:  # a host the resolver cannot take, ...
            self.dial_errors += 1
            where = f"{host[:64]!r}:{port}"
            self._dial_warnings.warn(
                "dial", where, f"bus dial of {where} failed: {exc!r}; retried after a backoff"
            )
            self.failed(key, exc)
        finally:
            if not connected:  # whatever it raised (cancelled too): the place is free
                self.dialing.discard(key)
