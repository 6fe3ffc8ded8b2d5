"""bloomcast/demo/workload.py: the demo's workload model, Redis delivery oracle and verifier."""

from __future__ import annotations

from collections import Counter

import pytest

from bloomcast.demo.workload import (
    Change,
    DeliveryVerifier,
    FilterGeometry,
    Publish,
    Subscriber,
    Subscription,
    SubscriptionState,
    Workload,
    WorkloadSpec,
    expected_deliveries,
    glob_match,
    interested_nodes,
    make_payload,
    parse_payload,
    peer_fp_rates,
    prefix_only_nodes,
    routing_expectation,
)

GLOB_CASES = [
    (b"alerts:*", b"alerts:cpu", True),
    (b"alerts:*", b"alerts:", True),
    (b"alerts:*", b"alert:cpu", False),
    (b"room:1?", b"room:12", True),
    (b"room:1?", b"room:1", False),
    (b"room:1?", b"room:123", False),
    (b"h[ae]llo", b"hello", True),
    (b"h[ae]llo", b"hillo", False),
    (b"h[^e]llo", b"hallo", True),
    (b"h[^e]llo", b"hello", False),
    (b"h[a-b]llo", b"hbllo", True),
    (b"h[b-a]llo", b"hallo", True),  # reversed range: Redis swaps the ends
    (b"h\\*llo", b"h*llo", True),
    (b"h\\*llo", b"hello", False),
    (b"*a*b*c", b"xxaxxbxxc", True),
    (b"*a*b*c", b"xxaxxcxxb", False),
    (b"a[bc", b"ab", True),  # unclosed class runs to the end
    (b"", b"", True),
    (b"*", b"", False),  # Redis: the match loop never runs on an empty subject
    (b"a*", b"a", True),  # ... but trailing stars match once the subject is used up
    (b"?", b"", False),
]


@pytest.mark.parametrize(("pattern", "subject", "want"), GLOB_CASES)
def test_glob_matches_redis_rules(pattern, subject, want):
    assert glob_match(pattern, subject) is want


def test_glob_no_exponential_blowup():
    # CVE-2022-36021 style pattern: must answer at once (no catastrophic backtracking)
    assert not glob_match(b"a*" * 40 + b"b", b"a" * 200)


def test_workload_is_seeded_and_consistent():
    spec = WorkloadSpec(nodes=4, subscribers=120, phases=6, publishes_per_phase=100, seed=7)
    a, b = Workload(spec), Workload(spec)
    assert a.phases == b.phases
    other = Workload(WorkloadSpec(nodes=4, subscribers=120, phases=6, publishes_per_phase=100))
    assert other.phases != a.phases
    state = SubscriptionState(a.subscribers)
    for phase in a.phases:
        for c in phase.changes:
            # every unsubscribe removes something subscribed, every subscribe adds
            held = c.target in state.targets[c.sub_id]
            assert held is (c.action == "unsubscribe") or c.action == "subscribe"
            state.apply(c)
        if phase.index > 0:
            kinds = Counter(c.action for c in phase.changes)
            assert kinds["subscribe"] > 0 and kinds["unsubscribe"] > 0
    # subscribers and publishers on every node, all four subscriber kinds present
    assert {s.node for s in a.subscribers} == set(range(4))
    assert {p.node for ph in a.phases for p in ph.publishes} == set(range(4))
    assert {s.kind for s in a.subscribers} == {"user", "room", "pattern", "shard"}
    ids = [p.msg_id for ph in a.phases for p in ph.publishes]
    assert len(ids) == len(set(ids)) == a.total_publishes() == 600


def test_rooms_follow_zipf():
    w = Workload(WorkloadSpec(rooms=40, zipf_s=1.2, phases=20, publishes_per_phase=500))
    rooms = Counter(
        p.channel for ph in w.phases for p in ph.publishes if p.channel.startswith("room:")
    )
    # rank 1 vs rank 10 weights 10^1.2 ~ 15.8: allow generous sampling noise
    assert rooms["room:1"] > 8 * max(1, rooms["room:10"])
    assert rooms["room:1"] > rooms["room:2"] > rooms["room:5"]
    assert any(p.shard for ph in w.phases for p in ph.publishes)


def test_a_cold_room_goes_viral_late():
    w = Workload(WorkloadSpec(rooms=40, phases=10, publishes_per_phase=300, trend_from=0.6))
    assert w.trend_room == "room:40"
    early = sum(p.channel == w.trend_room for ph in w.phases[:6] for p in ph.publishes)
    late = sum(p.channel == w.trend_room for ph in w.phases[6:] for p in ph.publishes)
    assert late > 20 * max(1, early)


def _state():
    subs = [
        Subscriber("a", 0, "user", 1),
        Subscriber("b", 1, "pattern"),
        Subscriber("c", 2, "shard"),
        Subscriber("d", 2, "room"),
    ]
    st = SubscriptionState(subs)
    for c in [
        Change("a", "subscribe", Subscription("channel", "room:12")),
        Change("a", "subscribe", Subscription("pattern", "room:1?")),
        Change("b", "subscribe", Subscription("pattern", "room:1?")),
        Change("c", "subscribe", Subscription("shard", "room:12")),
        Change("d", "subscribe", Subscription("channel", "user:9")),
    ]:
        st.apply(c)
    return st


def test_oracle_follows_redis_delivery_rules():
    st = _state()
    got = {(d.sub_id, d.via) for d in expected_deliveries(st, Publish("m1", 2, "room:12"))}
    # a channel subscriber that also has a matching pattern gets message AND pmessage;
    # the shard subscriber of the same name gets nothing from PUBLISH
    assert got == {("a", "message"), ("a", "pmessage:room:1?"), ("b", "pmessage:room:1?")}
    shard = expected_deliveries(st, Publish("m2", 0, "room:12", shard=True))
    assert [(d.sub_id, d.via) for d in shard] == [("c", "smessage")]
    assert interested_nodes(st, Publish("m3", 0, "room:12")) == {0, 1}
    assert expected_deliveries(st, Publish("m4", 0, "room:123")) == []
    st.apply(Change("a", "unsubscribe", Subscription("channel", "room:12")))
    got = {(d.sub_id, d.via) for d in expected_deliveries(st, Publish("m5", 2, "room:12"))}
    assert got == {("a", "pmessage:room:1?"), ("b", "pmessage:room:1?")}


def test_prefix_only_nodes_and_routing_expectation():
    st = _state()
    # room:123 starts with the pattern prefix room:1 but does not match room:1?
    assert prefix_only_nodes(st, Publish("m", 2, "room:123")) == {0, 1}
    assert prefix_only_nodes(st, Publish("m", 2, "room:12")) == set()
    geometry = {n: FilterGeometry.for_capacity(1024, 0.01) for n in range(3)}
    rates = peer_fp_rates(st, geometry)
    assert 0 < rates[0] < 1e-6 and 0 < rates[2] < 1e-6
    assert rates[1] == 0.0  # node 1 holds only a pattern: its channel filter is empty
    e = routing_expectation(st, Publish("m", 2, "user:9"), rates)
    assert (e.exact_minimum, e.broadcast, e.prefix_forwards) == (0, 2, 0)
    assert e.bloom_fp_expected == pytest.approx(rates[0])
    assert e.exposure == Counter({0: 1, 1: 1})
    e = routing_expectation(st, Publish("m", 2, "room:123"), rates)
    assert (e.exact_minimum, e.prefix_forwards, e.bloom_fp_expected) == (0, 2, 0.0)


def test_payload_roundtrip():
    p = make_payload("m42", 64, now_ns=123456789)
    assert len(p) == 64
    assert parse_payload(p) == ("m42", 123456789)
    with pytest.raises(ValueError):
        parse_payload(b"hello")


def test_verifier_reports_lost_duplicated_unexpected():
    st = _state()
    v = DeliveryVerifier()
    pub = Publish("m1", 2, "room:12")
    v.expect(expected_deliveries(st, pub))
    payload = make_payload("m1", 32)
    assert v.outstanding() == 3
    v.observe("a", "message", "room:12", payload)
    v.observe("a", "pmessage", "room:12", payload, pattern="room:1?")
    assert v.outstanding() == 1
    assert not v.result().ok  # b's pmessage is still missing
    v.observe("b", "pmessage", "room:12", payload, pattern="room:1?")
    ok = v.result()
    assert ok.ok and (ok.expected, ok.delivered, ok.lost) == (3, 3, 0)
    assert len(ok.latencies_ms) == 3 and all(x >= 0 for x in ok.latencies_ms)
    v.observe("b", "pmessage", "room:12", payload, pattern="room:1?")  # duplicate
    v.observe("d", "message", "room:12", payload)  # not subscribed
    v.observe("a", "message", "room:13", payload)  # wrong channel
    v.observe("a", "message", "room:12", b"garbage")  # foreign payload
    r = v.result()
    assert (r.duplicated, r.unexpected, r.lost) == (1, 3, 0)
    assert not r.ok
    lost = DeliveryVerifier()
    lost.expect(expected_deliveries(st, Publish("m9", 0, "user:9")))
    assert lost.result().lost == 1 and not lost.result().ok
