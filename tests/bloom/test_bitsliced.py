"""bloom/bitsliced.py: BitSlicedIndex answers exactly as the per-peer filters."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloom import BitSlicedIndex, BloomFilter, CountingBloomFilter, key_positions

SETTINGS = settings(max_examples=40, deadline=None)

peers_st = st.dictionaries(
    st.integers(0, 70), st.lists(st.integers(0, 200), max_size=30), max_size=12
)


def _naive(filters, positions):
    out = 0
    for peer, f in filters.items():
        if f.contains_positions(positions):
            out |= 1 << peer
    return out


@given(peers_st, st.sampled_from([64, 512]))
@SETTINGS
def test_index_query_equals_per_filter_membership(peers, m):
    index = BitSlicedIndex(m)
    filters = {}
    for peer, keys in peers.items():
        f = BloomFilter(m)
        for i in keys:
            f.add(b"c%d" % i)
        filters[peer] = f
        index.set(peer, f)
    assert index.peers == sum(1 << p for p in peers) and len(index) == len(peers)
    for i in range(220):
        pos = key_positions(b"c%d" % i)
        assert index.query(pos) == _naive(filters, pos)
        for peer, keys in peers.items():
            if i in keys:  # no false negatives
                assert index.query(pos) >> peer & 1


@given(st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.integers(0, 40)), max_size=150))
@SETTINGS
def test_index_follows_counting_filter_deltas(ops):
    m = 256
    counting = {p: CountingBloomFilter(m) for p in range(6)}
    present: dict[int, set[int]] = {p: set() for p in range(6)}
    index = BitSlicedIndex(m)
    for p, c in counting.items():
        index.set(p, c.to_bloom())
    for peer, add, i in ops:
        key = b"k%d" % i
        if add and i not in present[peer]:
            present[peer].add(i)
            index.apply_delta(peer, counting[peer].add(key), ())
        elif not add and i in present[peer]:
            present[peer].discard(i)
            index.apply_delta(peer, (), counting[peer].remove(key))
    for p, c in counting.items():
        assert index.filter_of(p) == c.to_bloom()
    for i in range(41):
        pos = key_positions(b"k%d" % i)
        assert index.query(pos) == _naive({p: c.to_bloom() for p, c in counting.items()}, pos)


def test_remove_and_replace_peer():
    index = BitSlicedIndex(128)
    a, b = BloomFilter(128), BloomFilter(128)
    a.add(b"x")
    b.add(b"y")
    index.set(3, a)
    index.set(9, a)
    pos_x, pos_y = key_positions(b"x"), key_positions(b"y")
    assert index.query(pos_x) == (1 << 3) | (1 << 9)
    index.set(3, b)  # replace
    assert index.query(pos_x) == 1 << 9 and index.query(pos_y) == 1 << 3
    index.remove(9)
    index.remove(9)  # no-op
    assert index.query(pos_x) == 0 and index.peers == 1 << 3 and 9 not in index
    assert all(row & ~(1 << 3) == 0 for row in index._rows)


def test_larger_filter_is_folded_smaller_rejected():
    index = BitSlicedIndex(128)
    big = BloomFilter(1024)
    for i in range(20):
        big.add(b"f%d" % i)
    index.set(1, big)
    assert index.filter_of(1) == big.fold(128)
    for i in range(20):
        assert index.query(key_positions(b"f%d" % i)) == 2
    index.apply_delta(1, [5], ())  # setting is fine
    with pytest.raises(ValueError):
        index.apply_delta(1, (), [5])  # clearing in a folded filter is not
    with pytest.raises(ValueError):
        index.set(2, BloomFilter(64))
    with pytest.raises(ValueError):
        index.set(2, BloomFilter(128, k=3))
    with pytest.raises(KeyError):
        index.apply_delta(7, [1], ())


def test_query_uses_only_first_k_positions():
    index = BitSlicedIndex(64, k=3)
    f = BloomFilter(64, k=3)
    f.add(b"z")
    index.set(0, f)
    assert index.query(key_positions(b"z", 10)) == 1


def test_nbytes_counts_rows_and_peer_copies():
    index = BitSlicedIndex(1024)
    empty = index.nbytes
    assert empty >= 1024 * 8  # the row list alone holds m pointers
    f = BloomFilter(1024)
    for i in range(50):
        f.add(b"n%d" % i)
    index.set(500, f)  # rows now hold ints of ~501 bits, plus a 128-byte copy
    grown = index.nbytes
    assert grown - empty >= f.set_bits * (500 // 8) + 1024 // 8
    index.remove(500)
    assert index.nbytes < grown
