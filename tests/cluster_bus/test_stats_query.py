"""STATS_REQUEST / STATS_REPLY (issue 51): encoded and decoded on both data
planes' decoders, bounded (a longer query or reply is a bad frame), and the
exchange: answers gathered, a silent peer counted once the call times out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cluster_bus import stats_query
from cluster_bus.codec import STATS_QUERY_BYTES, STATS_REPLY_BYTES, BusProtocolError, encode
from cluster_bus.frames import StatsReply, StatsRequest
from cluster_bus.info import BusStats


def decoders() -> list[Any]:
    from cluster_bus.decoder import FrameDecoder

    out: list[Any] = [FrameDecoder]
    try:
        from cluster_bus._decoder import FrameDecoder as Compiled  # type: ignore[import-not-found]

        out.append(Compiled)
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("decoder", decoders())
def test_round_trip_and_bounds(decoder: Any) -> None:
    msgs = [
        StatsRequest(7, b"HOT1" + b"\0" * 8),
        StatsReply(7, b"x" * STATS_REPLY_BYTES),
        StatsReply(2**32 - 1, b""),
    ]
    assert decoder(max_body=1 << 20).feed(b"".join(encode(m, 5) for m in msgs)) == msgs
    with pytest.raises(BusProtocolError, match="query above 256 bytes"):
        decoder(max_body=1 << 20).feed(encode(StatsRequest(1, b"q" * (STATS_QUERY_BYTES + 1))))
    with pytest.raises(BusProtocolError, match="above 68 KiB"):
        decoder(max_body=1 << 20).feed(encode(StatsReply(1, b"r" * (STATS_REPLY_BYTES + 1))))


class FakeLink:
    authenticated = True
    closed = False


class Mesh:
    """Records what is sent; every listed peer is live."""

    def __init__(self, peers: list[str]) -> None:
        self.peers = peers
        self.sent: list[tuple[Any, Any]] = []

    def live(self, ms: Any) -> list[tuple[str, Any]]:
        return [(p, FakeLink()) for p in self.peers]

    def send(self, link: Any, msg: Any) -> None:
        self.sent.append((link, msg))

    def send_to(self, node_id: str, msg: Any, fallback: Any = None) -> None:
        self.sent.append((node_id, msg))


def test_answers_are_gathered_and_a_silent_peer_is_counted(monkeypatch) -> None:
    monkeypatch.setattr(stats_query, "TIMEOUT_SECONDS", 0.05)

    async def scenario() -> None:
        stats = BusStats()
        mesh = Mesh(["a", "b"])
        q = stats_query.StatsQueries(mesh, None, stats)  # type: ignore[arg-type]
        future = q.ask(b"query")
        request = mesh.sent[0][1]
        assert isinstance(request, StatsRequest) and request.query == b"query"
        q.on_reply(FakeLink(), "a", StatsReply(request.request_id, b"from a"))  # type: ignore[arg-type]
        q.on_reply(FakeLink(), "z", StatsReply(request.request_id, b"not asked"))  # type: ignore[arg-type]
        assert await asyncio.wait_for(future, 5) == [b"from a"]
        assert stats.stats_unanswered == 1  # b never answered
        # both answer: the call ends at once
        future = q.ask(b"again")
        rid = mesh.sent[-1][1].request_id
        for peer in ("a", "b"):
            q.on_reply(FakeLink(), peer, StatsReply(rid, peer.encode()))  # type: ignore[arg-type]
        assert future.done() and future.result() == [b"a", b"b"]
        # the answering side: the source's bytes, cut to the reply's bound
        q.serve(lambda query: query * (STATS_REPLY_BYTES // 2))
        q.on_request(FakeLink(), "a", StatsRequest(9, b"abc"))  # type: ignore[arg-type]
        reply = mesh.sent[-1][1]
        assert isinstance(reply, StatsReply) and reply.request_id == 9
        assert len(reply.body) == STATS_REPLY_BYTES
        # the bytes each side counts are the frames' (CLUSTER INFO
        # cluster_stats_stats_bytes_*): every frame sent, every one received
        assert stats.stats_bytes_sent == sum(len(encode(m, 0)) for _, m in mesh.sent)
        got = [b"from a", b"not asked", b"a", b"b"]
        received = sum(len(encode(StatsReply(1, body), 0)) for body in got)
        received += len(encode(StatsRequest(9, b"abc"), 0))
        assert stats.stats_bytes_received == received

    asyncio.run(scenario())
