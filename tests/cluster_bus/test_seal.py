"""Sealed frames (cluster_bus.seal): what the handshake's keys protect after it."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster_bus.codec import encode, short_id
from cluster_bus.decoder import FrameDecoder
from cluster_bus.frames import Ping, Publish, Session
from cluster_bus.handshake import Handshake
from cluster_bus.seal import MAX_BATCH, SMALL_BATCH, SealedDecoder, Sealer, SealError

A, B = "a" * 40, "b" * 40
SECRET = b"cluster secret"


def handshake_pair(secret: bytes | None = SECRET) -> tuple[Handshake, Handshake]:
    dialer, acceptor = Handshake(A, secret, True), Handshake(B, secret, False)
    reply = acceptor.receive(dialer.hello()).send
    assert reply is not None
    auth = dialer.receive(reply)
    assert auth.done and auth.send is not None
    assert acceptor.receive(auth.send).done
    return dialer, acceptor


def receiver(key: bytes) -> SealedDecoder:
    """B's side of a link from A, as Link.authenticate builds it."""
    return SealedDecoder(key, FrameDecoder(4096), FrameDecoder(1 << 20, short_id(A)))


def frames(n: int) -> list[bytes]:
    pub = [encode(Publish(i + 1, i, False, b"ch", b"x" * i), short_id(A)) for i in range(n)]
    return [encode(Session(7, 1, n + 1), short_id(A)), *pub]


def test_keys_match_across_the_two_ends_and_differ_per_link():
    dialer, acceptor = handshake_pair()
    d_send, d_recv = dialer.frame_keys()
    a_send, a_recv = acceptor.frame_keys()
    assert d_send == a_recv and a_send == d_recv and d_send != d_recv
    again, _ = handshake_pair()  # new nonces: new keys
    assert again.frame_keys()[0] != d_send
    assert handshake_pair(None)[0].frame_keys() is None  # no secret: nothing sealed


@given(st.integers(0, 40), st.lists(st.integers(1, 200), max_size=30))
def test_sealed_batches_decode_in_any_split(n, cuts):
    dialer, acceptor = handshake_pair()
    sealer = Sealer(dialer.frame_keys()[0], short_id(A))
    sent = frames(n)
    wire = sealer.seal(b"".join(sent[:3])) + sealer.seal(b"".join(sent[3:]))
    dec = receiver(acceptor.frame_keys()[1])
    got, pos = [], 0
    for cut in cuts:
        got += dec.feed(wire[pos : pos + cut])
        pos += cut
    got += dec.feed(wire[pos:])
    want = FrameDecoder(1 << 20).feed(b"".join(sent))
    assert got == want


def test_a_frame_larger_than_one_seal_spans_two():
    dialer, acceptor = handshake_pair()
    big = encode(Publish(1, 1, False, b"big", os.urandom(MAX_BATCH + 1000)), short_id(A))
    wire = Sealer(dialer.frame_keys()[0], short_id(A)).seal(big)
    dec = SealedDecoder(
        acceptor.frame_keys()[1], FrameDecoder(4096), FrameDecoder(2 * MAX_BATCH, short_id(A))
    )
    (msg,) = dec.feed(wire)
    assert isinstance(msg, Publish) and len(msg.payload) == MAX_BATCH + 1000


def sealed_link():
    dialer, acceptor = handshake_pair()
    return Sealer(dialer.frame_keys()[0], short_id(A)), receiver(acceptor.frame_keys()[1])


@pytest.mark.parametrize("n", [3, 200])  # a small batch (BLAKE2s tag), a large one (HMAC)
def test_an_altered_byte_is_refused(n):
    sealer, dec = sealed_link()
    batch = b"".join(frames(n))
    assert (len(batch) < SMALL_BATCH) == (n == 3)
    wire = bytearray(sealer.seal(batch))
    wire[-1] ^= 1
    with pytest.raises(SealError, match="MAC"):
        dec.feed(bytes(wire))


def test_a_replayed_batch_is_refused():
    sealer, dec = sealed_link()
    first = sealer.seal(b"".join(frames(2)))
    assert len(dec.feed(first)) == 3
    with pytest.raises(SealError, match="expected 2"):
        dec.feed(first)


def test_a_batch_sealed_for_another_link_is_refused():
    sealer, _ = sealed_link()
    _, other = sealed_link()
    with pytest.raises(SealError, match="MAC"):
        other.feed(sealer.seal(b"".join(frames(1))))


def test_an_unsealed_frame_is_refused():
    _, dec = sealed_link()
    with pytest.raises(SealError, match="unsealed PING frame"):
        dec.feed(encode(Ping(A, "127.0.0.1", 1, 2, 0, 0, 0, 0, False), short_id(A)))
