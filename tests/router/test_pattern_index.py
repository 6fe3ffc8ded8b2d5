"""router/pattern_index.py: pattern subscriptions bucketed by literal prefix.
``matches`` must agree with a full scan through router.glob.stringmatch, and
must glob only the patterns whose literal prefix starts the channel."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from router.glob import Glob, literal_prefix, stringmatch
from router.pattern_index import PatternIndex
from tests.router.fakes import FakeSubscriber


def matched(index: PatternIndex[FakeSubscriber], channel: bytes) -> dict[bytes, set]:
    return {
        pattern: set(subs) if type(subs) is set else {subs}  # one subscriber is kept bare
        for pattern, subs in index.matches(channel)
    }


def test_add_is_true_only_for_the_first_subscriber():
    index: PatternIndex[FakeSubscriber] = PatternIndex()
    a, b = FakeSubscriber("a"), FakeSubscriber("b")
    assert index.add(b"news.*", a) is True
    assert index.add(b"news.*", b) is False
    assert index.add(b"news.*", a) is False  # again: still two subscribers
    assert index.subscribers(b"news.*") == {a, b}
    assert len(index) == 1 and b"news.*" in index and list(index) == [b"news.*"]
    assert b"news.?" not in index and index.subscribers(b"news.?") == set()


def test_remove_is_true_only_when_the_last_subscriber_goes():
    index: PatternIndex[FakeSubscriber] = PatternIndex()
    a, b, c = FakeSubscriber("a"), FakeSubscriber("b"), FakeSubscriber("c")
    index.add(b"news.*", a)
    index.add(b"news.*", b)
    assert index.remove(b"other.*", a) is False  # unknown pattern
    assert index.remove(b"news.*", c) is False  # not a subscriber
    assert index.remove(b"news.*", a) is False  # b remains
    assert index.subscribers(b"news.*") == {b}
    assert matched(index, b"news.x") == {b"news.*": {b}}
    assert index.remove(b"news.*", b) is True
    assert index.remove(b"news.*", b) is False  # already gone
    assert len(index) == 0 and b"news.*" not in index
    assert index.lengths == ()
    assert matched(index, b"news.x") == {}


def test_each_pattern_is_filed_under_its_longest_literal():
    index: PatternIndex[FakeSubscriber] = PatternIndex()
    a = FakeSubscriber("a")
    patterns = (b"abcde*", b"*", b"ab.*", b"xy.?", b"*.log", b"*12345*", b"a*67*")
    for pattern in patterns:
        index.add(pattern, a)
    # prefixes abcde, ab., xy. ('?': a prefix only); suffix .log; inner 12345
    # and 67 (longer than a); '*' has no literal: scanned
    assert index._lens == [(3, 5), (4,), (2, 5)]
    assert index.lengths == (3, 5)
    assert matched(index, b"x.log") == {b"*": {a}, b"*.log": {a}}
    # not all seven: "*", "*.log", and the two inner ones (scanned: cheaper
    # than looking up every substring of the channel)
    assert index.candidates(b"x.log") == 4
    assert matched(index, b"a1234567") == {b"*": {a}, b"*12345*": {a}, b"a*67*": {a}}
    for pattern in patterns:
        index.remove(pattern, a)
    assert index._lens == [(), (), ()] and not index._rest and index.lengths == ()


def test_many_inner_literals_are_looked_up_not_scanned():
    """100,000 patterns '*N*' (issue 28): a PUBLISH tests only those whose
    number is in the channel."""
    index: PatternIndex[FakeSubscriber] = PatternIndex()
    a = FakeSubscriber("a")
    for i in range(100_000):
        index.add(b"*%d*" % i, a)
    assert index.candidates(b"zz" * 20) == 0
    assert set(matched(index, b"x99999y")) == {
        b"*%d*" % i for i in range(100_000) if b"%d" % i in b"x99999y"
    }
    assert index.candidates(b"x99999y") < 20


def test_match_all_and_escaped_patterns():
    index: PatternIndex[FakeSubscriber] = PatternIndex()
    a, b, c = FakeSubscriber("a"), FakeSubscriber("b"), FakeSubscriber("c")
    index.add(b"*", a)
    index.add(b"a\\*b*", b)  # literal prefix b"a*b"
    index.add(b"plain", c)  # no glob: the whole name is the prefix
    assert matched(index, b"a*bc") == {b"*": {a}, b"a\\*b*": {b}}
    assert matched(index, b"axbc") == {b"*": {a}}
    assert matched(index, b"plain") == {b"*": {a}, b"plain": {c}}
    assert matched(index, b"plainer") == {b"*": {a}}
    assert matched(index, b"") == {}  # as Redis: "*" does not match b""


def test_an_escaped_pattern_without_a_star_keeps_one_unescaped_copy():
    """``\\a`` x 50,000 (issue 28's hostile row): the bytes it stands for are
    its only segment and its prefix key; one object serves both (two copies
    were 1 MB per ten such patterns), and it still matches and leaves."""
    index: PatternIndex[FakeSubscriber] = PatternIndex()
    sub = FakeSubscriber("a")
    pattern = b"\\a" * 1000 + b"7"
    index.add(pattern, sub)
    literal = b"a" * 1000 + b"7"
    (level,) = index._tables[0].values()
    (key,) = level
    segments = index._special[pattern]
    assert type(segments) is tuple and key == literal and key is segments[0]
    assert matched(index, literal) == {pattern: {sub}}
    assert index.remove(pattern, sub) and matched(index, literal) == {}
    assert index._tables[0] == {} and index._special == {}
    plain = b"news:" + b"x" * 100  # no glob, no escape: filed under itself, no copy
    index.add(plain, sub)
    ((key,),) = (level for level in index._tables[0].values())
    assert key is plain


def test_matches_globs_only_the_patterns_of_the_channels_prefixes(monkeypatch):
    index: PatternIndex[FakeSubscriber] = PatternIndex()
    a = FakeSubscriber("a")
    patterns = [b"p%d.*" % i for i in range(50)] + [b"p7*", b"p?.x", b"q*"]
    for pattern in patterns:
        index.add(pattern, a)
    globbed: list[bytes] = []

    real_match = PatternIndex._match

    def counting(self: PatternIndex[FakeSubscriber], pattern: bytes, channel: bytes) -> bool:
        globbed.append(pattern)
        return real_match(self, pattern, channel)

    monkeypatch.setattr(PatternIndex, "_match", counting)
    assert set(matched(index, b"p7.x")) == {b"p7.*", b"p7*", b"p?.x"}
    want = {p for p in patterns if b"p7.x".startswith(literal_prefix(p))}
    assert want == {b"p7.*", b"p7*", b"p?.x"}
    assert sorted(globbed) == sorted(want)  # each once, no other pattern


ALPHA = st.sampled_from(list(b"ab.*?[]^-\\"))
PATTERNS = st.lists(ALPHA, max_size=8).map(bytes)
CHANNELS = st.lists(st.sampled_from(list(b"ab.-]^*\\")), max_size=8).map(bytes)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(PATTERNS, st.integers(0, 2)), max_size=25),
    st.lists(CHANNELS, min_size=1, max_size=10),
    st.data(),
)
def test_matches_equals_a_full_scan_with_stringmatch(subscriptions, channels, data):
    subs = [FakeSubscriber(name) for name in "abc"]
    index: PatternIndex[FakeSubscriber] = PatternIndex()
    exact: dict[bytes, set[FakeSubscriber]] = {}
    for pattern, i in subscriptions:
        assert index.add(pattern, subs[i]) is (pattern not in exact)
        exact.setdefault(pattern, set()).add(subs[i])

    def agrees() -> None:
        assert set(index) == set(exact)
        for channel in channels:
            want = {p: s for p, s in exact.items() if stringmatch(p, channel)}
            assert matched(index, channel) == want, channel

    agrees()
    leaving = (
        data.draw(st.lists(st.sampled_from(subscriptions), unique=True)) if subscriptions else []
    )
    for pattern, i in leaving:
        exact[pattern].discard(subs[i])
        last = not exact[pattern]
        if last:
            del exact[pattern]
        assert index.remove(pattern, subs[i]) is last
    agrees()


def test_patterns_are_prepared_when_subscribed_never_at_publish(monkeypatch):
    """Issue 28: a PUBLISH compiles nothing. Plain patterns (literals, escapes,
    '*') are matched by segments; one with '?' or a class is compiled by add()."""
    index: PatternIndex[FakeSubscriber] = PatternIndex()
    a = FakeSubscriber("a")
    for i in range(200):
        index.add(b"*%d*" % i, a)
        index.add(b"\\a" * 100 + b"%d" % i, a)
        index.add(b"x?%d*" % i, a)
    compiled: list[bytes] = []
    real = Glob._compiled

    def counting(glob: Glob) -> object:
        if glob._regex is None:
            compiled.append(glob.pattern)
        return real(glob)

    monkeypatch.setattr(Glob, "_compiled", counting)
    got = matched(index, b"xy17z")
    assert set(got) == {b"*1*", b"*7*", b"*17*", b"x?1*", b"x?17*"}
    assert matched(index, b"a" * 100 + b"5") == {b"\\a" * 100 + b"5": {a}, b"*5*": {a}}
    assert compiled == []
