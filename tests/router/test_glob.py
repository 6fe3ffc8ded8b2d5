"""router.glob against Redis's stringmatchlen rules: a direct recursive
transliteration of those rules (the reference), hypothesis-generated patterns,
and the CVE-shaped patterns. (valkey-server as the oracle for a sample:
tests/differential/test_glob_oracle.py.)"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.glob import literal_prefix, stringmatch

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
