"""router/pubsub.py's subscriptions in three kinds and router/registry.py's
counting filters that summarise them, and the FilterChange lists handed to
the cluster link. Every change is checked against the exported bits before
and after it."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloom import CountingBloomFilter, PatternFilter
from cluster_bus.api import FilterChange
from router.config import NodeConfig
from router.kinds import ALL_KINDS, PATTERNS, kind_of
from router.node import Node
from router.subscriptions import Bulk
from tests.router.fakes import FakeSubscriber, RecordingLink


def _sets(table: dict[bytes, object]) -> dict[bytes, set[object]]:
    """A table with each name's subscribers as a set (one is kept bare)."""
    return {n: set(s) if type(s) is set else {s} for n, s in table.items()}  # type: ignore[call-overload]


class SubscriptionFilters:
    """A node's subscriptions and filters, called one name at a time."""

    def __init__(self, capacity: int, fp_rate: float) -> None:
        self.node = Node(NodeConfig(port=0, filter_capacity=capacity, filter_fp_rate=fp_rate))
        self.link = RecordingLink()
        self.node.set_link(self.link)
        self.pubsub = self.node.pubsub
        self.filters = self.node.registry

    @property
    def channel_filter(self) -> CountingBloomFilter:
        return self.filters.channel_filter

    @property
    def pattern_filter(self) -> PatternFilter:
        return self.filters.pattern_filter

    @property
    def filter_epoch(self) -> int:
        return self.filters.filter_epoch

    def rebuild_channel_filter(self, m: int) -> None:
        self.filters.rebuild_channel_filter(m)

    @property
    def channels(self) -> dict[bytes, set[object]]:
        return _sets(self.pubsub.channels)

    @property
    def shard_channels(self) -> dict[bytes, set[object]]:
        return _sets(self.pubsub.shard_channels)

    @property
    def patterns(self) -> list[bytes]:
        return list(self.pubsub.patterns)

    def subscribe(self, sub, name: bytes, shard: bool = False) -> list[FilterChange]:
        return self.pubsub.add(kind_of(shard), sub, name)

    def psubscribe(self, sub, name: bytes) -> list[FilterChange]:
        return self.pubsub.add(PATTERNS, sub, name)

    def unsubscribe(self, sub, name: bytes, shard: bool = False) -> list[FilterChange]:
        return self._remove(kind_of(shard).own, kind_of(shard), sub, name)

    def punsubscribe(self, sub, name: bytes) -> list[FilterChange]:
        return self._remove("patterns", PATTERNS, sub, name)

    def _remove(self, own, kind, sub, name: bytes) -> list[FilterChange]:
        if name not in getattr(sub, own):
            return []
        del getattr(sub, own)[name]
        return self.pubsub.remove(kind, sub, name)

    def drop_client(self, sub) -> list[FilterChange]:
        """The one unsubscribe-all, run whole; the changes it announced."""
        self.link.calls.clear()
        Bulk(self.pubsub, sub, ALL_KINDS, None, adding=False, confirm=False).step(1 << 40)
        return [change for call in self.link.calls for change in call]


def exported_bits(reg: SubscriptionFilters) -> dict[str, list[int]]:
    return {
        "channels": list(reg.channel_filter.to_bloom().bits),
        "patterns": list(reg.pattern_filter.to_bloom().bits),
    }


def checked(reg: SubscriptionFilters, op: Callable[[], list[FilterChange]]) -> list[FilterChange]:
    """Run ``op``. Replaying its changes in order on the exported bits from before
    it must flip only bits that were the other way and give the bits after it;
    the last change of each filter carries that filter's fingerprint after it."""
    before = exported_bits(reg)
    pattern_shape = (reg.pattern_filter.prefix_lengths, reg.pattern_filter.match_all)
    changes = op()
    after = exported_bits(reg)
    fingerprints = {
        "channels": reg.channel_filter.fingerprint(),
        "patterns": reg.pattern_filter.fingerprint(),
    }
    for name in ("channels", "patterns"):
        mine = [c for c in changes if c.filter == name]
        bits = before[name][:]
        for change in mine:
            for j in change.set_positions:
                assert bits[j] == 0, (name, j)
                bits[j] = 1
            for j in change.cleared_positions:
                assert bits[j] == 1, (name, j)
                bits[j] = 0
        assert bits == after[name], name
        if mine:
            assert mine[-1].fingerprint == fingerprints[name], name
    if not any(c.filter == "patterns" for c in changes):
        assert pattern_shape == (reg.pattern_filter.prefix_lengths, reg.pattern_filter.match_all)
    return changes


def channel_counters(f: CountingBloomFilter) -> list[int]:
    return [f.count_at(j) for j in range(f.m)]


def holds_each_name_once(reg: SubscriptionFilters) -> bool:
    """The channel filter's counters are those of every subscribed name added once."""
    names = set(reg.channels) | set(reg.shard_channels)
    f = reg.channel_filter
    return channel_counters(f) == channel_counters(CountingBloomFilter.from_keys(names, f.m, f.k))


@pytest.fixture
def reg() -> SubscriptionFilters:
    return SubscriptionFilters(capacity=64, fp_rate=0.01)


def test_first_subscriber_sets_bits_later_ones_change_nothing(reg):
    a, b = FakeSubscriber("a"), FakeSubscriber("b")
    (change,) = checked(reg, lambda: reg.subscribe(a, b"news"))
    assert change.filter == "channels"
    assert change.set_positions and not change.cleared_positions
    assert b"news" in reg.channel_filter
    assert set(a.channels) == {b"news"} and reg.channels == {b"news": {a}}
    assert checked(reg, lambda: reg.subscribe(a, b"news")) == []  # already subscribed
    assert checked(reg, lambda: reg.subscribe(b, b"news")) == []
    assert reg.channels == {b"news": {a, b}}
    assert holds_each_name_once(reg)


def test_last_unsubscribe_clears_what_the_first_subscribe_set(reg):
    a, b = FakeSubscriber("a"), FakeSubscriber("b")
    empty = reg.channel_filter.fingerprint()
    (added,) = checked(reg, lambda: reg.subscribe(a, b"news"))
    checked(reg, lambda: reg.subscribe(b, b"news"))
    assert checked(reg, lambda: reg.unsubscribe(a, b"news")) == []
    assert reg.channels == {b"news": {b}} and set(a.channels) == set()
    (removed,) = checked(reg, lambda: reg.unsubscribe(b, b"news"))
    assert sorted(removed.cleared_positions) == sorted(added.set_positions)
    assert not removed.set_positions
    assert removed.fingerprint == empty
    assert reg.channels == {} and b"news" not in reg.channel_filter


def test_unsubscribe_without_subscription_is_a_no_op(reg):
    a, b = FakeSubscriber("a"), FakeSubscriber("b")
    checked(reg, lambda: reg.subscribe(a, b"news"))
    assert checked(reg, lambda: reg.unsubscribe(b, b"news")) == []
    assert checked(reg, lambda: reg.unsubscribe(a, b"news", shard=True)) == []
    assert checked(reg, lambda: reg.punsubscribe(a, b"news")) == []
    assert reg.channels == {b"news": {a}} and set(a.channels) == {b"news"}
    assert b"news" in reg.channel_filter


@pytest.mark.parametrize("first_shard", [False, True])
@pytest.mark.parametrize("last_shard", [False, True])
def test_name_in_both_namespaces_enters_the_filter_once(reg, first_shard, last_shard):
    a, b = FakeSubscriber("a"), FakeSubscriber("b")
    (added,) = checked(reg, lambda: reg.subscribe(a, b"orders", shard=first_shard))
    assert checked(reg, lambda: reg.subscribe(b, b"orders", shard=not first_shard)) == []
    assert {reg.channel_filter.count_at(j) for j in added.set_positions} == {1}
    assert holds_each_name_once(reg)
    by_namespace = {first_shard: a, not first_shard: b}
    # the other namespace leaves first: the name stays in the filter
    leaves_first = by_namespace[not last_shard]
    assert checked(reg, lambda: reg.unsubscribe(leaves_first, b"orders", not last_shard)) == []
    assert b"orders" in reg.channel_filter
    leaves_last = by_namespace[last_shard]
    (removed,) = checked(reg, lambda: reg.unsubscribe(leaves_last, b"orders", last_shard))
    assert sorted(removed.cleared_positions) == sorted(added.set_positions)
    assert reg.channel_filter.set_bits == 0
    assert reg.channels == reg.shard_channels == {}


def test_shard_subscriptions_live_in_their_own_namespace(reg):
    a = FakeSubscriber("a")
    checked(reg, lambda: reg.subscribe(a, b"s1", shard=True))
    assert set(a.shard_channels) == {b"s1"} and set(a.channels) == set()
    assert reg.shard_channels == {b"s1": {a}} and reg.channels == {}
    assert b"s1" in reg.channel_filter


def test_pattern_changes_carry_prefix_bits_and_fingerprint(reg):
    a, b = FakeSubscriber("a"), FakeSubscriber("b")
    pf = reg.pattern_filter
    empty = pf.fingerprint()
    (added,) = checked(reg, lambda: reg.psubscribe(a, b"news.*"))
    assert added.filter == "patterns" and added.set_positions
    assert pf.prefix_lengths == 1 << len(b"news.")
    assert checked(reg, lambda: reg.psubscribe(b, b"news.*")) == []  # second subscriber
    # a new pattern with the same literal prefix flips no exported bit
    assert checked(reg, lambda: reg.psubscribe(a, b"news.?x")) == []
    assert len(reg.patterns) == 2 and set(a.patterns) == {b"news.*", b"news.?x"}
    assert checked(reg, lambda: reg.punsubscribe(a, b"news.?x")) == []
    assert checked(reg, lambda: reg.punsubscribe(a, b"news.*")) == []  # b still has it
    (removed,) = checked(reg, lambda: reg.punsubscribe(b, b"news.*"))
    assert sorted(removed.cleared_positions) == sorted(added.set_positions)
    assert removed.fingerprint == empty and pf.prefix_lengths == 0
    assert len(reg.patterns) == 0


def test_new_prefix_length_sets_its_mask_bit(reg):
    a = FakeSubscriber("a")
    pf = reg.pattern_filter
    checked(reg, lambda: reg.psubscribe(a, b"ab*"))
    (change,) = checked(reg, lambda: reg.psubscribe(a, b"abcd*"))
    assert pf.prefix_lengths == (1 << 2) | (1 << 4)
    assert change.fingerprint == pf.fingerprint()
    checked(reg, lambda: reg.punsubscribe(a, b"ab*"))
    assert pf.prefix_lengths == 1 << 4


def test_match_all_pattern_is_a_change_without_positions(reg):
    a = FakeSubscriber("a")
    pf = reg.pattern_filter
    empty = pf.fingerprint()
    (on,) = checked(reg, lambda: reg.psubscribe(a, b"*"))
    assert on.filter == "patterns"
    assert on.set_positions == on.cleared_positions == ()
    assert pf.match_all and on.fingerprint != empty
    (off,) = checked(reg, lambda: reg.punsubscribe(a, b"*"))
    assert off.set_positions == off.cleared_positions == ()
    assert not pf.match_all and off.fingerprint == empty


def test_drop_client_removes_every_subscription_and_only_its_own(reg):
    a, b = FakeSubscriber("a"), FakeSubscriber("b")
    for op in (
        lambda: reg.subscribe(a, b"c1"),
        lambda: reg.subscribe(a, b"c2"),
        lambda: reg.subscribe(b, b"c1"),
        lambda: reg.subscribe(a, b"s1", shard=True),
        lambda: reg.psubscribe(a, b"p.*"),
        lambda: reg.psubscribe(b, b"q.*"),
    ):
        checked(reg, op)
    changes = checked(reg, lambda: reg.drop_client(a))
    assert {c.filter for c in changes} == {"channels", "patterns"}
    assert a.channels == a.shard_channels == a.patterns == {}
    assert reg.channels == {b"c1": {b}} and reg.shard_channels == {}
    assert list(reg.patterns) == [b"q.*"]
    assert holds_each_name_once(reg)
    only_b = PatternFilter(reg.pattern_filter.m, reg.pattern_filter.k)
    only_b.add(b"q.*")
    assert reg.pattern_filter.fingerprint() == only_b.fingerprint()
    assert checked(reg, lambda: reg.drop_client(a)) == []


def test_rebuild_keeps_every_subscribed_name_a_member(reg):
    a, b = FakeSubscriber("a"), FakeSubscriber("b")
    names = [b"chan:%d" % i for i in range(40)]
    for i, name in enumerate(names):
        reg.subscribe(a, name, shard=i % 3 == 0)
    reg.subscribe(b, names[0])  # names[0] in both namespaces
    old_m, epoch = reg.channel_filter.m, reg.filter_epoch
    reg.rebuild_channel_filter(old_m * 2)
    assert reg.channel_filter.m == old_m * 2
    assert reg.filter_epoch == epoch + 1
    assert all(name in reg.channel_filter for name in names)
    assert holds_each_name_once(reg)
    # counts survive: every name can leave again, and the filter ends empty
    for sub in (a, b):
        checked(reg, functools.partial(reg.drop_client, sub))
    assert reg.channel_filter.set_bits == 0


OPS: dict[str, Callable[[SubscriptionFilters, FakeSubscriber, bytes], list[FilterChange]]] = {
    "sub": lambda reg, sub, name: reg.subscribe(sub, name),
    "unsub": lambda reg, sub, name: reg.unsubscribe(sub, name),
    "ssub": lambda reg, sub, name: reg.subscribe(sub, name, shard=True),
    "sunsub": lambda reg, sub, name: reg.unsubscribe(sub, name, shard=True),
    "psub": lambda reg, sub, name: reg.psubscribe(sub, name),
    "punsub": lambda reg, sub, name: reg.punsubscribe(sub, name),
    "drop": lambda reg, sub, name: reg.drop_client(sub),
}
ops_st = st.lists(
    st.tuples(
        st.sampled_from(sorted(OPS)),
        st.integers(0, 2),
        st.sampled_from([b"n1", b"n2", b"n3.x", b"n*", b"n3.*", b"*", b"?1"]),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops_st)
def test_filters_follow_any_sequence_of_operations(ops):
    reg = SubscriptionFilters(capacity=64, fp_rate=0.01)
    subs = [FakeSubscriber(name) for name in "abc"]
    for kind, i, name in ops:
        checked(reg, functools.partial(OPS[kind], reg, subs[i], name))
        # the registry's tables are the union of the clients' own sets
        for table, attr in ((reg.channels, "channels"), (reg.shard_channels, "shard_channels")):
            assert table == {
                n: {s for s in subs if n in getattr(s, attr)}
                for n in set().union(*(getattr(s, attr) for s in subs))
            }
        assert set(reg.patterns) == set().union(*(s.patterns for s in subs))
        assert holds_each_name_once(reg)
        want = PatternFilter(reg.pattern_filter.m, reg.pattern_filter.k)
        for p in reg.patterns:
            want.add(p)
        assert reg.pattern_filter.fingerprint() == want.fingerprint()
