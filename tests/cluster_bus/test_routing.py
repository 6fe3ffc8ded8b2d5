"""cluster_bus.routing.PeerTable against a per-peer reference: no false
negatives, fail open for unknown or unverifiable filters, patterns by prefix
length, match-all, shard channels skip patterns."""

import random

from bitarray import bitarray
from hypothesis import given, settings
from hypothesis import strategies as st

from bloom import crc64, key_positions
from cluster_bus.frames import FilterKind
from cluster_bus.routing import PeerTable, filter_fingerprint

K = 7


def bits_for(keys, m):
    arr = bitarray(m, endian="big")
    arr.setall(0)
    for key in keys:
        for h in key_positions(key, K):
            arr[h & (m - 1)] = 1
    return arr


def install(table, node, kind, keys, m, prefix_mask=0, match_all=False):
    arr = bits_for(keys, m)
    raw = arr.tobytes()
    fp = filter_fingerprint(kind, raw, prefix_mask, match_all)
    assert table.set_filter(node, kind, m, K, raw, fp, 1, prefix_mask, match_all)
    return arr


def mask_of(table, nodes):
    out = 0
    for n in nodes:
        out |= 1 << table._slot[n]
    return out


channel_sets = st.lists(
    st.lists(st.binary(min_size=1, max_size=8), max_size=30), min_size=1, max_size=12
)


@settings(max_examples=60, deadline=None)
@given(channel_sets, st.lists(st.binary(min_size=1, max_size=8), max_size=40), st.data())
def test_route_never_misses_a_subscribed_peer(per_peer, probes, data):
    table = PeerTable()
    sizes = [64, 256, 1024]
    peers = {}
    for i, chans in enumerate(per_peer):
        node = f"{i:040x}"
        table.add_peer(node)
        m = data.draw(st.sampled_from(sizes))  # mixed filter sizes
        arr = install(table, node, FilterKind.CHANNELS, chans, m)
        install(table, node, FilterKind.PATTERNS, [], 64)
        peers[node] = (set(chans), arr, m)
    for ch in probes + [c for chans in per_peer for c in chans]:
        routed = table.route(ch)
        for node, (chans, arr, m) in peers.items():
            bit = 1 << table._slot[node]
            exact = ch in chans
            bloom_says = all(arr[h & (m - 1)] for h in key_positions(ch, K))
            assert bool(routed & bit) == bloom_says  # same answer as the peer's own filter
            if exact:
                assert routed & bit


def test_unknown_peers_get_everything_until_verified():
    table = PeerTable()
    a, b = "a" * 40, "b" * 40
    table.add_peer(a)
    table.add_peer(b)
    assert table.route(b"x") == mask_of(table, [a, b])  # both unknown: fail open
    install(table, a, FilterKind.CHANNELS, [b"news"], 256)
    install(table, a, FilterKind.PATTERNS, [], 64)
    assert table.route(b"x") == mask_of(table, [b])
    assert table.route(b"news") == mask_of(table, [a, b])
    assert table.route(b"x", shard=True) == mask_of(table, [b])
    # a filter whose CRC64 does not match is refused and the peer stays open
    raw = bits_for([b"y"], 256).tobytes()
    assert not table.set_filter(b, FilterKind.CHANNELS, 256, K, raw, crc64(raw) ^ 1, 1)
    assert table.route(b"x") & mask_of(table, [b])


def test_delta_applies_and_verifies():
    table = PeerTable()
    a = "a" * 40
    table.add_peer(a)
    arr = install(table, a, FilterKind.CHANNELS, [], 256)
    install(table, a, FilterKind.PATTERNS, [], 64)
    base = crc64(arr.tobytes())
    new = bits_for([b"news"], 256)
    positions = tuple(new.search(1))
    new_fp = crc64(new.tobytes())
    assert table.apply_delta(a, FilterKind.CHANNELS, 256, base, new_fp, positions, (), 2)
    assert table.route(b"news") == mask_of(table, [a])
    # idempotent: the same delta again changes nothing and still verifies
    assert table.apply_delta(a, FilterKind.CHANNELS, 256, base, new_fp, positions, (), 2)
    # a delta that does not lead to its fingerprint: refused (the bus then fails open)
    assert not table.apply_delta(a, FilterKind.CHANNELS, 256, new_fp, 12345, (), (), 3)
    # clearing the bits stops the route
    assert table.apply_delta(a, FilterKind.CHANNELS, 256, new_fp, base, (), positions, 4)
    assert table.route(b"news") == 0


def test_patterns_by_prefix_length_and_match_all():
    table = PeerTable()
    a, b, c = "a" * 40, "b" * 40, "c" * 40
    for n in (a, b, c):
        table.add_peer(n)
        install(table, n, FilterKind.CHANNELS, [], 256)
    # a: PSUBSCRIBE news.*  -> prefix "news." (length 5); b: "log" (length 3); c: "*"
    # (bit L of the mask = length L in use, as bloom.PatternFilter.prefix_lengths)
    install(table, a, FilterKind.PATTERNS, [b"news."], 128, prefix_mask=1 << 5)
    install(table, b, FilterKind.PATTERNS, [b"log"], 128, prefix_mask=1 << 3)
    install(table, c, FilterKind.PATTERNS, [], 128, match_all=True)
    assert table.route(b"news.sport") == mask_of(table, [a, c])
    assert table.route(b"logins") == mask_of(table, [b, c])
    assert table.route(b"new") == mask_of(table, [c])  # shorter than every prefix
    assert table.route(b"news.sport", shard=True) == 0  # patterns never see SPUBLISH
    table.set_pattern_meta(c, 0, False, 5)
    assert table.route(b"weather") == 0


def test_pattern_fingerprint_covers_mask_and_match_all():
    from bloom import PatternFilter

    pf = PatternFilter(128)
    pf.add(b"news.*")
    raw = pf.to_bloom().bits.tobytes()
    assert filter_fingerprint(FilterKind.PATTERNS, raw, pf.prefix_lengths, pf.match_all) == (
        pf.fingerprint()
    )
    pf.add(b"*")
    assert filter_fingerprint(FilterKind.PATTERNS, raw, pf.prefix_lengths, True) == (
        pf.fingerprint()
    )
    assert filter_fingerprint(FilterKind.CHANNELS, raw, 0, False) == crc64(raw)


def test_remove_peer_frees_its_slot_and_routes():
    table = PeerTable()
    nodes = [f"{i:040x}" for i in range(5)]
    rng = random.Random(3)
    for n in nodes:
        table.add_peer(n)
        install(table, n, FilterKind.CHANNELS, [b"all"], rng.choice([64, 128]))
        install(table, n, FilterKind.PATTERNS, [], 64)
    assert table.nodes_of(table.route(b"all")) == tuple(nodes)
    table.remove_peer(nodes[2])
    assert nodes[2] not in table.nodes_of(table.route(b"all"))
    table.add_peer("f" * 40)  # reuses the free slot, unknown -> gets everything
    assert "f" * 40 in table.nodes_of(table.route(b"nothing"))
    assert table.peer_count == 5


def test_a_new_node_in_a_freed_slot_is_routed_to_after_the_cache_was_primed():
    """Regression (kill -9 + restart with a new id): the mask -> node ids cache
    must not keep the dead node's id for the slot the new node takes."""
    table = PeerTable()
    table.add_peer("a" * 40)
    table.add_peer("b" * 40)
    mask = table.route(b"news")  # both unknown: fail open to both
    assert set(table.nodes_of(mask)) == {"a" * 40, "b" * 40}  # primes the cache
    table.remove_peer("b" * 40)
    table.add_peer("c" * 40)  # takes b's slot
    assert set(table.nodes_of(table.route(b"news"))) == {"a" * 40, "c" * 40}


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(list(FilterKind)),
    deltas=st.lists(
        st.tuples(
            st.lists(st.integers(0, 2047), max_size=12),
            st.lists(st.integers(0, 2047), max_size=12),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_a_copys_fingerprint_kept_from_the_flips_is_its_crc64(kind, deltas):
    """A copy's fingerprint after deltas is updated from the bits that flip
    (bloom.crc64.bit_flips), not recomputed: it must equal the CRC64 of the
    bits, whatever the delta (positions set again, cleared when clear,
    repeated, in both lists), and a delta whose announced fingerprint is
    not that is refused."""
    m = 2048
    table = PeerTable()
    a = "a" * 40
    table.add_peer(a)
    reference = install(table, a, kind, [b"x", b"y"], m, 0b110, False)
    for set_positions, cleared in deltas:
        for p in set_positions:
            reference[p] = 1
        for p in cleared:
            reference[p] = 0
        want = filter_fingerprint(kind, reference.tobytes(), 0b110, False)
        delta = (tuple(set_positions), tuple(cleared), 2, 0b110, False)
        assert not table.apply_delta(a, kind, m, 0, want ^ 1, *delta)  # refused, yet applied
        assert table.apply_delta(a, kind, m, 0, want, *delta)  # idempotent: verifies now
        assert table.fingerprint(a, kind) == want
