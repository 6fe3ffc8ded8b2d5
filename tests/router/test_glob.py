"""router.glob against Redis's stringmatchlen rules: a direct recursive
transliteration of those rules (the reference), hypothesis-generated patterns,
and the CVE-shaped patterns. (valkey-server as the oracle for a sample:
tests/differential/test_glob_oracle.py.)"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.glob import (
    MAX_STAR_NESTING,
    Glob,
    literal_prefix,
    match_segments,
    plain_segments,
    stringmatch,
)

pytestmark = pytest.mark.timeout(120)


def _signed(c: int) -> int:
    return c - 256 if c > 127 else c


def reference(p: bytes, s: bytes) -> bool:
    """Redis stringmatchlen, recursively and without the abuse guards."""
    while p and s:
        c = p[0]
        if c == ord("*"):
            while len(p) > 1 and p[1] == ord("*"):
                p = p[1:]
            if len(p) == 1:
                return True
            return any(reference(p[1:], s[i:]) for i in range(len(s)))
        if c == ord("?"):
            s = s[1:]
        elif c == ord("["):
            p = p[1:]
            negate = p[:1] == b"^"
            if negate:
                p = p[1:]
            match = False
            while True:
                if p[:1] == b"\\" and len(p) >= 2:
                    p = p[1:]
                    match |= p[0] == s[0]
                elif p[:1] == b"]":
                    break
                elif not p:
                    p = b"\x00"  # stands for the '[' Redis steps back to
                    break
                elif len(p) >= 3 and p[1] == ord("-"):
                    lo, hi = sorted((_signed(p[0]), _signed(p[2])))
                    match |= lo <= _signed(s[0]) <= hi
                    p = p[2:]
                else:
                    match |= p[0] == s[0]
                p = p[1:]
            if match == negate:
                return False
            s = s[1:]
        else:
            if c == ord("\\") and len(p) >= 2:
                p = p[1:]
            if p[0] != s[0]:
                return False
            s = s[1:]
        p = p[1:]
        if not s:
            p = p.lstrip(b"*")
            break
    return not p and not s


ALPHA = st.sampled_from([*list(b"ab*?[]^-\\"), 233])
PATTERNS = st.lists(ALPHA, max_size=10).map(bytes)
SUBJECTS = st.lists(st.sampled_from([*list(b"ab-]^*\\"), 233]), max_size=10).map(bytes)


@settings(max_examples=3000, deadline=None)
@given(PATTERNS, SUBJECTS)
def test_glob_equals_redis_rules(pattern, subject):
    assert stringmatch(pattern, subject) == reference(pattern, subject)


@settings(max_examples=500, deadline=None)
@given(PATTERNS, SUBJECTS)
def test_literal_prefix_starts_every_match(pattern, subject):
    if stringmatch(pattern, subject):
        assert subject.startswith(literal_prefix(pattern))


def test_abusive_patterns_answer_correctly():
    # CVE-2022-36021: many stars against a long non-matching subject
    assert not stringmatch(b"*a" * 50 + b"b", b"a" * 5000)
    assert stringmatch(b"*a" * 50, b"a" * 5000)
    # CVE-2024-31228: very long patterns; > 1000 nested stars give up (no match)
    assert not stringmatch(b"a*" * 1200 + b"b", b"a" * 1300 + b"b")
    assert stringmatch(b"[" * 100000, b"[")
    assert stringmatch(b"*" * 100000, b"x")


@settings(max_examples=1500, deadline=None)
@given(PATTERNS, st.lists(SUBJECTS, max_size=8))
def test_one_compiled_glob_answers_every_subject_as_redis(pattern, subjects):
    # a Glob reads its pattern lazily, as far as the longest subject so far:
    # asking short subjects first, then longer ones, must not change answers
    glob = Glob(pattern)
    for subject in subjects:
        assert glob.match(subject) == reference(pattern, subject)
    want = [s for s in subjects if reference(pattern, s)]
    assert Glob(pattern).filter(subjects) == want
    assert glob.filter(subjects) == want


LONG_ALPHA = st.sampled_from([*list(b"ab*?[]^-\\"), 0, 233, 255])


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(LONG_ALPHA, max_size=40).map(bytes),
    st.lists(st.sampled_from([*list(b"ab-]^[\\"), 0, 233, 255]), max_size=14).map(bytes),
)
def test_longer_patterns_equal_redis_rules(pattern, subject):
    if pattern.count(b"*") > 6 and len(subject) > 8:
        subject = subject[:8]  # keep the exponential reference quick
    assert stringmatch(pattern, subject) == reference(pattern, subject)


def test_the_nesting_limit_is_redis_7_0_15s():
    # redis-server 7.0.15: "*a" * 1000 matches "a" * 1100, "*a" * 1001 does
    # not (tests/differential/test_glob_hostile.py asks the server itself)
    subject = b"a" * (MAX_STAR_NESTING + 100)
    assert stringmatch(b"*a" * MAX_STAR_NESTING, subject)
    assert not stringmatch(b"*a" * (MAX_STAR_NESTING + 1), subject)
    assert not stringmatch(b"*a" * (MAX_STAR_NESTING + 1) + b"*", subject)
    # a trailing '*' is not a nesting level
    assert stringmatch(b"*a" * MAX_STAR_NESTING + b"*", subject)


def test_a_pattern_longer_than_every_subject_is_read_only_so_far():
    glob = Glob(b"a?" * 500_000)
    assert glob.filter([b"ab", b"axay"]) == []
    assert glob._regex is None  # never compiled: no subject is long enough
    assert glob.match(b"ab" * 500_000)


@settings(max_examples=3000, deadline=None)
@given(PATTERNS, SUBJECTS)
def test_plain_patterns_match_by_segments_as_redis(pattern, subject):
    """A pattern without '?' or a class is matched by its literal segments
    (router.pattern_index's way, no regex): Redis's answer every time."""
    segments = plain_segments(pattern)
    if segments is None:
        assert b"?" in pattern or b"[" in pattern
        return
    assert match_segments(segments, subject) == reference(pattern, subject)
    if b"\\" not in pattern and segments:
        assert match_segments(pattern.split(b"*"), subject) == reference(pattern, subject)


def test_plain_segments_keep_the_nesting_limit():
    subject = b"a" * (MAX_STAR_NESTING + 100)
    for pattern, want in (
        (b"*a" * MAX_STAR_NESTING, True),
        (b"*a" * (MAX_STAR_NESTING + 1), False),
        (b"*a" * MAX_STAR_NESTING + b"*", True),
        (b"*a" * (MAX_STAR_NESTING + 1) + b"*", False),
        (b"\\a" * 50_000, False),
    ):
        segments = plain_segments(pattern)
        assert segments is not None
        assert match_segments(segments, subject) is want, pattern[:20]
    assert match_segments(plain_segments(b"\\a" * 50_000) or (), b"a" * 50_000)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from([*list(b"a\\*?["), 0, 255]), max_size=16).map(bytes))
def test_literal_prefix_is_the_pattern_filters_uncapped(pattern):
    from bloom import literal_prefix as bloom_prefix

    assert literal_prefix(pattern) == bloom_prefix(pattern, len(pattern))


def test_literal_prefix_of_long_escapes_and_every_byte_value():
    from bloom import literal_prefix as bloom_prefix

    every = bytes(range(256)).replace(b"*", b"").replace(b"?", b"").replace(b"[", b"")
    for pattern in (
        b"\\a" * 50_000,
        b"\\\\" * 1000 + b"\\",
        every + b"\\\\\\a" + every + b"\\",
        b"ab\\",
    ):
        assert literal_prefix(pattern) == bloom_prefix(pattern, len(pattern))
