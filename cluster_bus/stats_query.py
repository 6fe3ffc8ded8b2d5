"""Statistics fetched from every peer on demand (issue 51: BLOOMCAST.HOTCHANNELS
CLUSTER): one STATS_REQUEST to each live peer, their STATS_REPLYs gathered
until all answered or :data:`TIMEOUT_SECONDS` passed.

The bus carries the query and the answers as bytes the node defines
(:mod:`router.commands.hot` writes and reads them); it answers a peer's
request with what the node's source returns (:meth:`StatsQueries.serve`), cut
to :data:`REPLY_BYTES`. Bytes moved per call: one request (14-byte header,
4-byte id, the query: under 300 bytes) and one reply (at most
``14 + 4 + REPLY_BYTES``) per live peer; both sides count them (CLUSTER
INFO ``cluster_stats_stats_bytes_sent`` / ``_received``, headers included:
``bench.hot_channels --cluster`` reads them). A peer that does not answer in time,
or answers empty, is counted (CLUSTER INFO ``cluster_stats_stats_unanswered``)
and the call goes on with the answers it got.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from cluster_bus.codec import HEADER_SIZE, STATS_QUERY_BYTES, STATS_REPLY_BYTES
from cluster_bus.frames import StatsReply, StatsRequest

if TYPE_CHECKING:
    from cluster_bus.info import BusStats
    from cluster_bus.link import Link
    from cluster_bus.membership import Membership
    from cluster_bus.mesh import Mesh

#: how long a call waits for its peers' answers
TIMEOUT_SECONDS = 1.0
#: an answer's most bytes (the decoder refuses a longer one)
REPLY_BYTES = STATS_REPLY_BYTES
#: a STATS frame's bytes beside its query or answer: the header and the request id
FRAME_BYTES = HEADER_SIZE + 4
#: calls waiting at once; a further one waits for nobody (answers only this node)
MAX_PENDING = 64


class _Call:
    __slots__ = ("answers", "future", "timer", "waiting")

    def __init__(self, future: asyncio.Future[list[bytes]], waiting: set[str]) -> None:
        self.future = future
        self.waiting = waiting
        self.answers: list[bytes] = []
        self.timer: asyncio.TimerHandle | None = None


class StatsQueries:
    """The asking and the answering side of STATS_REQUEST / STATS_REPLY."""

    def __init__(self, mesh: Mesh, membership: Membership, stats: BusStats) -> None:
        self.mesh = mesh
        self.membership = membership
        self.stats = stats
        #: what answers a peer's query (the node's); None: an empty answer
        self.source: Callable[[bytes], bytes] | None = None
        self._calls: dict[int, _Call] = {}
        self._next_id = 0

    def serve(self, source: Callable[[bytes], bytes]) -> None:
        self.source = source

    def ask(self, query: bytes) -> asyncio.Future[list[bytes]]:
        """Every live peer's answer to ``query`` (the ones that came in time)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[bytes]] = loop.create_future()
        peers = self.mesh.live(self.membership)
        if not peers or len(self._calls) >= MAX_PENDING or len(query) > STATS_QUERY_BYTES:
            self.stats.stats_unanswered += len(peers)
            future.set_result([])
            return future
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        request_id = self._next_id
        call = _Call(future, {peer for peer, _ in peers})
        self._calls[request_id] = call
        for _peer, link in peers:
            self.mesh.send(link, StatsRequest(request_id, query))
        self.stats.stats_bytes_sent += len(peers) * (FRAME_BYTES + len(query))
        call.timer = loop.call_later(TIMEOUT_SECONDS, self._expire, request_id)
        return future

    def _expire(self, request_id: int) -> None:
        call = self._calls.pop(request_id, None)
        if call is None:
            return
        self.stats.stats_unanswered += len(call.waiting)
        if not call.future.done():
            call.future.set_result(call.answers)

    def on_request(self, link: Link, peer: str, msg: StatsRequest) -> None:
        body = self.source(msg.query) if self.source is not None else b""
        body = body[:REPLY_BYTES]
        self.mesh.send_to(peer, StatsReply(msg.request_id, body), link)
        self.stats.stats_bytes_received += FRAME_BYTES + len(msg.query)
        self.stats.stats_bytes_sent += FRAME_BYTES + len(body)

    def on_reply(self, link: Link, peer: str, msg: StatsReply) -> None:
        self.stats.stats_bytes_received += FRAME_BYTES + len(msg.body)
        call = self._calls.get(msg.request_id)
        if call is None or peer not in call.waiting:
            return  # late (the call ended) or not asked
        call.waiting.discard(peer)
        if msg.body:
            call.answers.append(msg.body)
        else:
            self.stats.stats_unanswered += 1
        if not call.waiting:
            del self._calls[msg.request_id]
            if call.timer is not None:
                call.timer.cancel()
            if not call.future.done():
                call.future.set_result(call.answers)

    def close(self) -> None:
        """The bus stops: every waiting call ends with what it has."""
        for request_id in list(self._calls):
            self._expire(request_id)
