"""cluster_bus codec: round trips (hypothesis), framing under arbitrary splits,
every rejection rule, and a short mutational fuzz smoke run."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_bus.codec import (
    HEADER,
    HEADER_SIZE,
    MAGIC,
    PUBLISH_HEADER_SIZE,
    VERSION,
    BusProtocolError,
    encode,
    short_id,
)
from cluster_bus.decoder import FrameDecoder
from cluster_bus.frames import (
    Ack,
    Fail,
    FilterDelta,
    FilterFull,
    FilterKind,
    FilterRequest,
    GossipEntry,
    Hello,
    HelloAuth,
    Leave,
    Meet,
    MsgType,
    Ping,
    Pong,
    ProbeAck,
    ProbeReq,
    Publish,
    Resend,
    Session,
)

node_ids = st.binary(min_size=20, max_size=20).map(bytes.hex)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 2**64 - 1)
hosts = st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255)
gossip = st.builds(GossipEntry, node_ids, hosts, u16, u16, u16, u32, u64, u64, u64)


def heartbeat(cls):
    return st.builds(
        cls,
        node_ids,
        hosts,
        u16,
        u16,
        u64,
        u64,
        u64,
        u64,
        st.booleans(),
        u16,
        st.lists(gossip, max_size=4).map(tuple),
        u32,
    )


@st.composite
def filter_full(draw):
    m = 2 ** draw(st.integers(3, 14))
    dense = draw(st.booleans())
    if dense:
        bits = draw(st.binary(min_size=m // 8, max_size=m // 8))
    else:
        arr = bytearray(m // 8)
        for p in draw(st.lists(st.integers(0, m - 1), max_size=5)):
            arr[p // 8] |= 0x80 >> (p % 8)
        bits = bytes(arr)
    return FilterFull(
        draw(st.sampled_from(FilterKind)),
        m,
        draw(st.integers(1, 20)),
        bits,
        draw(u64),
        draw(u64),
        draw(u64),
        draw(st.booleans()),
    )


@st.composite
def filter_delta(draw):
    m = 2 ** draw(st.integers(3, 20))
    pos = st.lists(st.integers(0, m - 1), max_size=20).map(tuple)
    return FilterDelta(
        draw(st.sampled_from(FilterKind)),
        draw(u32),
        m,
        draw(u64),
        draw(u64),
        draw(pos),
        draw(pos),
        draw(u64),
        draw(u64),
        draw(st.booleans()),
    )


messages = st.one_of(
    st.builds(
        Hello,
        node_ids,
        st.binary(min_size=16, max_size=16),
        st.sampled_from([b"", b"x" * 32]),
        st.booleans(),
    ),
    st.builds(HelloAuth, st.sampled_from([b"", b"y" * 32])),
    heartbeat(Meet),
    heartbeat(Ping),
    heartbeat(Pong),
    st.builds(FilterRequest, st.sampled_from(FilterKind)),
    filter_full(),
    filter_delta(),
    st.builds(Publish, u32, u64, st.booleans(), st.binary(max_size=40), st.binary(max_size=200)),
    st.builds(Fail, node_ids, u32),
    st.builds(ProbeReq, node_ids),
    st.builds(ProbeAck, node_ids),
    st.just(Leave()),
    st.builds(Ack, u32),
    st.builds(Session, u64, u32, u32),
    st.builds(Resend, u64, u32),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, min_size=1, max_size=6), st.data())
def test_round_trip_any_split(msgs, data):
    """Any message sequence decodes back to itself however the stream is cut."""
    stream = b"".join(encode(m, sender=7) for m in msgs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=5)))
    dec = FrameDecoder(expect_sender=7)
    out = []
    prev = 0
    for c in [*cuts, len(stream)]:
        out += dec.feed(stream[prev:c])
        prev = c
    assert out == msgs
    assert dec.buffered == 0


def test_publish_header_is_at_most_32_bytes():
    frame = encode(Publish(1, 2, False, b"", b""))
    assert len(frame) == PUBLISH_HEADER_SIZE == 30
    frame = encode(Publish(1, 2, True, b"news", b"hello"))
    assert len(frame) == 30 + 4 + 5


def test_sparse_filter_is_compressed():
    m = 1 << 16
    bits = bytearray(m // 8)
    bits[10] = 1
    msg = FilterFull(FilterKind.CHANNELS, m, 7, bytes(bits), 5, 1)
    frame = encode(msg)
    assert len(frame) < 64  # raw would be 8 KiB
    assert FrameDecoder().feed(frame) == [msg]


def _header(mtype=MsgType.PING, length=0, magic=MAGIC, version=VERSION, sender=0):
    return HEADER.pack(magic, version, mtype, 0, length, sender)


@pytest.mark.parametrize(
    "frame, reason",
    [
        (_header(magic=b"xx"), "bad magic"),
        (_header(version=9), "unknown protocol version"),
        (HEADER.pack(MAGIC, VERSION, 200, 0, 0, 0), "unknown message type"),
        (_header(length=10**9), "above limit"),
        (_header(MsgType.PUBLISH, length=3) + b"abc", "truncated PUBLISH"),
        (_header(MsgType.PING, length=4) + b"abcd", "bad PING body"),
        (_header(MsgType.ACK, length=5) + b"abcde", "trailing bytes"),
        (_header(MsgType.FILTER_REQUEST, length=1) + b"\x09", "bad FILTER_REQUEST"),
        (_header(MsgType.FILTER_DELTA, length=len(b"")), "bad FILTER_DELTA"),
    ],
)
def test_rejections(frame, reason):
    dec = FrameDecoder(max_body=1 << 20)
    with pytest.raises(BusProtocolError, match=reason):
        dec.feed(frame)
    with pytest.raises(BusProtocolError):  # stays broken
        dec.feed(encode(Leave()))


def test_delta_position_beyond_m_rejected():
    good = encode(FilterDelta(FilterKind.CHANNELS, 1, 64, 0, 0, (63,), (), 0))
    bad = good[:-4] + (64).to_bytes(4, "big")
    with pytest.raises(BusProtocolError, match="position >= m"):
        FrameDecoder().feed(bad)


def test_compressed_filter_length_bomb_rejected():
    m = 1 << 10
    bits = bytes(m // 8)
    frame = bytearray(encode(FilterFull(FilterKind.CHANNELS, m, 7, bits, 0, 0)))
    # the sc header declares m bits; claim 2^40 instead
    body_at = HEADER_SIZE + 3 + 32
    assert frame[body_at] & 0x0F == 2
    frame[body_at : body_at + 3] = bytes([0x16]) + (1 << 40).to_bytes(6, "little")[:2]
    frame[body_at + 3 : body_at + 3] = (1 << 40).to_bytes(6, "little")[2:]
    frame[6:10] = (len(frame) - HEADER_SIZE).to_bytes(4, "big")
    with pytest.raises(BusProtocolError, match="compressed filter"):
        FrameDecoder().feed(bytes(frame))


def test_sender_checked_after_handshake():
    nid = "ab" * 20
    dec = FrameDecoder(expect_sender=short_id(nid))
    assert dec.feed(encode(Leave(), sender=short_id(nid))) == [Leave()]
    with pytest.raises(BusProtocolError, match="not the link's peer"):
        dec.feed(encode(Leave(), sender=1))


def test_partial_frame_buffer_bounded_by_frame():
    dec = FrameDecoder(max_body=100)
    frame = encode(Publish(1, 1, False, b"c", b"x" * 50))
    assert dec.feed(frame[:20]) == []
    assert dec.buffered == 20
    assert dec.feed(frame[20:]) == [Publish(1, 1, False, b"c", b"x" * 50)]
    with pytest.raises(BusProtocolError, match="above limit"):
        FrameDecoder(max_body=100).feed(encode(Publish(1, 1, False, b"c", b"x" * 200)))


def test_a_limited_feed_leaves_the_later_frames_undecoded_for_new_limits():
    """``feed(data, 1)`` decodes one frame and keeps the rest as bytes: a
    frame above the current ``max_body`` behind it is no error yet, and is
    decoded once the limit is raised (a link's handshake, issue 40)."""
    big = encode(Publish(1, 1, False, b"c", b"x" * 500))
    dec = FrameDecoder(max_body=100)
    assert dec.feed(encode(Leave()) + encode(Ack(3)) + big, 1) == [Leave()]
    assert dec.feed(b"", 1) == [Ack(3)]
    assert dec.buffered == len(big)
    dec.max_body = 1000
    assert dec.feed(b"", 1) == [Publish(1, 1, False, b"c", b"x" * 500)]
    assert dec.buffered == 0 and dec.feed(b"", 1) == []
    with pytest.raises(BusProtocolError, match="above limit"):  # without the limit: at once
        FrameDecoder(max_body=100).feed(encode(Leave()) + big)


def _fault(frame: bytes, fast: bool, **kw: int) -> str | list[object]:
    try:
        return list(FrameDecoder(fast=fast, **kw).feed(frame))  # type: ignore[arg-type]
    except BusProtocolError as exc:
        return str(exc)


def test_publish_fast_path_faults_are_the_reference_ones():
    """Each check of the PUBLISH fast path, on a frame long enough to take it:
    the same frames, or the same error, as the reference decoder."""
    good = encode(Publish(7, 9, True, b"news", b"x" * 20), sender=5)
    body_len = len(good) - 14
    cases = {
        "ok": (good, {}),
        "bad magic": (b"xx" + good[2:], {}),
        "bad version": (good[:2] + b"\x09" + good[3:], {}),
        "over max_body": (good, {"max_body": body_len - 1}),
        "other sender": (good, {"expect_sender": 6}),
        "short body": (good[:6] + (15).to_bytes(4, "big") + good[10:], {}),
        "channel past the body": (good[:26] + (999).to_bytes(4, "big") + good[30:], {}),
        "incomplete": (good[:-1], {}),
    }
    for name, (frame, kw) in cases.items():
        fast, ref = _fault(frame, True, **kw), _fault(frame, False, **kw)
        assert fast == ref, name
        if name == "ok":
            assert fast == [Publish(7, 9, True, b"news", b"x" * 20)]
        elif name == "incomplete":
            assert fast == []
        else:
            assert isinstance(fast, str), name


def test_fuzz_smoke():
    """2,000 mutated inputs: only BusProtocolError, ever, and the PUBLISH fast
    path agrees with the reference decoder (full run: tests/fuzz/fuzz_bus.py)."""
    from tests.fuzz.fuzz_bus import run

    stats = run(2000, seed=random.Random(4).randrange(2**32))
    assert stats["inputs"] == 2000
    assert stats["errors"] + stats["decoded_ok"] == 2000
