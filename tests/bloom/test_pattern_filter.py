"""bloom/pattern.py: literal prefixes, PatternFilter, probe positions."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloom import (
    BloomFilter,
    PatternFilter,
    RemotePatternFilter,
    key_positions,
    literal_prefix,
    mask_lengths,
    pattern_probe_positions,
)

SETTINGS = settings(max_examples=60, deadline=None)


@pytest.mark.parametrize(
    "pattern,want",
    [
        (b"news.*", b"news."),
        (b"news.?x", b"news."),
        (b"news.[ab]*", b"news."),
        (b"*", b""),
        (b"?abc", b""),
        (b"[a-z]*", b""),
        (b"", b""),
        (b"plain", b"plain"),
        (b"a\\*b*", b"a*b"),
        (b"a\\[b\\?c*", b"a[b?c"),
        (b"\\*", b"*"),
        (b"ab\\", b"ab\\"),  # trailing lone backslash: a literal backslash (stringmatchlen)
        (b"0123456789abcdefXYZ*", b"0123456789abcdef"),
    ],
)
def test_literal_prefix(pattern, want):
    assert literal_prefix(pattern) == want


def test_literal_prefix_max_len():
    assert literal_prefix(b"abcdef*", 3) == b"abc"
    assert literal_prefix(b"a\\bcdef*", 2) == b"ab"


literal_st = st.binary(min_size=1, max_size=24).filter(lambda b: not set(b) & set(b"*?[\\"))
glob_tail_st = st.sampled_from([b"*", b"?*", b"[abc]*", b"*x*", b"?"])


def _escape(raw: bytes) -> bytes:
    out = bytearray()
    for c in raw:
        if c in b"*?[\\":
            out.append(0x5C)
        out.append(c)
    return bytes(out)


@given(
    st.lists(st.tuples(st.binary(min_size=1, max_size=24), glob_tail_st), min_size=1, max_size=40),
    st.binary(max_size=10),
    st.sampled_from([8, 256, 4096]),
)
@SETTINGS
def test_pattern_filter_never_rejects_a_matching_channel(patterns, suffix, m):
    f = PatternFilter(m)
    pats = []
    for raw, tail in patterns:
        pat = _escape(raw) + tail
        if pat not in pats:
            pats.append(pat)
            f.add(pat)
    remote = PatternFilter.from_bytes(f.to_bytes())
    for raw, tail in patterns:
        # a channel the pattern matches under Redis glob rules: the literal text,
        # then something the glob tail accepts
        filler = {
            b"*": suffix,
            b"?*": b"a" + suffix,
            b"[abc]*": b"b" + suffix,
            b"*x*": b"x" + suffix,
            b"?": b"q",
        }[tail]
        channel = raw + filler
        assert f.may_match(channel), (raw, tail, channel)
        assert remote.may_match(channel)


def test_match_all_flag_counts_and_clears():
    f = PatternFilter(64)
    assert not f.may_match(b"anything")
    f.add(b"*")
    f.add(b"?x")
    assert f.match_all and f.may_match(b"anything") and f.may_match(b"")
    f.remove(b"*")
    assert f.match_all
    f.remove(b"?x")
    assert not f.match_all and not f.may_match(b"anything")
    with pytest.raises(KeyError):
        f.remove(b"*")


def test_prefix_lengths_mask_maintained_with_counts():
    f = PatternFilter(1024)
    f.add(b"news.*")  # 5
    f.add(b"sport*")  # 5
    f.add(b"ab?")  # 2
    assert f.prefix_lengths == (1 << 5) | (1 << 2)
    assert f.lengths == (2, 5)
    f.remove(b"news.*")
    assert f.prefix_lengths == (1 << 5) | (1 << 2)
    f.remove(b"sport*")
    assert f.prefix_lengths == 1 << 2
    assert not f.may_match(b"sport.x")
    f.remove(b"ab?")
    assert f.prefix_lengths == 0 and f.set_bits == 0
    with pytest.raises(KeyError):
        f.remove(b"zz*")


def test_add_remove_report_flipped_positions():
    f = PatternFilter(1 << 12)
    set_pos = f.add(b"orders.*")
    assert set_pos and f.last_set == set_pos
    assert all(f.to_bloom().bits[j] for j in set_pos)
    assert f.add(b"orders.?x") == ()  # same prefix: no new bit
    assert f.remove(b"orders.*") == ()
    cleared = f.remove(b"orders.?x")
    assert sorted(cleared) == sorted(set_pos) and f.set_bits == 0


def test_fingerprint_covers_bits_mask_and_flag():
    f = PatternFilter(1 << 10)
    seen = {f.fingerprint()}
    f.add(b"a.*")
    seen.add(f.fingerprint())
    f.add(b"*")  # only the flag changes
    seen.add(f.fingerprint())
    assert len(seen) == 3
    bits_fp = f.bits_fingerprint()
    assert bits_fp == f.to_bloom().fingerprint()
    f.remove(b"*")
    assert f.bits_fingerprint() == bits_fp
    # a mask-only change: same bits, different lengths mask
    g = PatternFilter(1 << 10)
    g.add(b"a.*")
    r = RemotePatternFilter(g.to_bloom(), g.prefix_lengths | (1 << 7), False, 16)
    assert r.fingerprint() != g.fingerprint()
    assert PatternFilter.from_bytes(g.to_bytes()).fingerprint() == g.fingerprint()


def test_serialisation_round_trip_and_rejects_malformed():
    f = PatternFilter(1 << 12, k=5, max_prefix=8)
    for p in (b"a*", b"bcd*", b"efghijklmnop*", b"*"):
        f.add(p)
    r = PatternFilter.from_bytes(f.to_bytes())
    assert isinstance(r, RemotePatternFilter)
    assert r.bloom == f.to_bloom() and r.prefix_lengths == f.prefix_lengths
    assert r.match_all and r.max_prefix == 8 and r.bloom.k == 5
    assert f.snapshot().fingerprint() == f.fingerprint()
    data = f.to_bytes()
    for bad in (b"", data[:5], b"\x09" + data[1:], data[:-1]):
        with pytest.raises(ValueError):
            PatternFilter.from_bytes(bad)


@given(st.binary(max_size=40), st.integers(0, (1 << 17) - 1))
@SETTINGS
def test_probe_positions(channel, mask):
    probes = pattern_probe_positions(channel, mask)
    want = [L for L in mask_lengths(mask) if len(channel) >= L]
    assert [L for L, _ in probes] == want
    for L, pos in probes:
        assert pos == key_positions(channel[:L])


def test_probe_positions_route_like_may_match():
    """A router's use: probe once, test each remote filter by its own mask."""
    peers: list[RemotePatternFilter] = []
    for pats in ([b"news.*"], [b"n*", b"orders.eu.*"], [b"x?"]):
        f = PatternFilter(1 << 10)
        for pat in pats:
            f.add(pat)
        peers.append(PatternFilter.from_bytes(f.to_bytes()))
    union = 0
    for p in peers:
        union |= p.prefix_lengths
    for channel in (b"news.today", b"nope", b"orders.eu.1", b"xy", b"zzz"):
        probes = pattern_probe_positions(channel, union)
        for p in peers:
            hit = any(
                (p.prefix_lengths >> L) & 1 and p.bloom.contains_positions(pos) for L, pos in probes
            )
            assert hit == p.may_match(channel)
    assert peers[0].may_match(b"news.today") and peers[1].may_match(b"nope")


def test_bad_max_prefix():
    with pytest.raises(ValueError):
        PatternFilter(64, max_prefix=0)
    with pytest.raises(ValueError):
        PatternFilter(48)
    assert isinstance(PatternFilter.for_capacity(100, 0.01).to_bloom(), BloomFilter)
