"""bloom/: crc64, hashing, BloomFilter, CountingBloomFilter, OppositeBloomFilter."""

import contextlib
import math

import pytest
from bitarray import bitarray
from hypothesis import given, settings
from hypothesis import strategies as st

from bloom import (
    DEFAULT_K,
    BloomFilter,
    CountingBloomFilter,
    OppositeBloomFilter,
    crc64,
    key_positions,
    m_for_capacity,
    theoretical_fp_rate,
)

SETTINGS = settings(max_examples=60, deadline=None)
keys_st = st.lists(st.binary(min_size=0, max_size=24), max_size=200)

# -- crc64 -------------------------------------------------------------------------------


def test_crc64_check_value_redis_test_vector():
    # Redis src/crc64.c: crc64(0, "123456789", 9) == 0xe9c6d914c4b8d9ca
    assert crc64(b"123456789") == 0xE9C6D914C4B8D9CA


def test_crc64_is_not_crcmods_predefined_jones():
    import crcmod.predefined

    other = crcmod.predefined.mkCrcFun("crc-64-jones")
    assert other(b"123456789") != crc64(b"123456789")


def test_crc64_uses_crcmod_c_extension():
    import sys

    import bloom.crc64  # noqa: F401  (imports crcmod)

    assert sys.modules["crcmod.crcmod"]._usingExtension


@given(st.binary(max_size=64), st.binary(max_size=64))
@SETTINGS
def test_crc64_continues(a, b):
    assert crc64(b, crc64(a)) == crc64(a + b)


def test_crc64_empty_is_zero():
    assert crc64(b"") == 0


# -- hashing -------------------------------------------------------------------------------


def test_key_positions_formula():
    import mmh3

    h1, h2 = mmh3.hash64(b"news.sport", signed=False)
    want = tuple((h1 + i * h2 + (i**3 - i) // 6) % 2**64 for i in range(DEFAULT_K))
    assert key_positions(b"news.sport") == want


@given(st.binary(max_size=32), st.integers(1, 20))
@SETTINGS
def test_key_positions_prefix_property_any_k(key, k):
    import mmh3

    h1, h2 = mmh3.hash64(key, signed=False)
    want = tuple((h1 + i * h2 + (i**3 - i) // 6) % 2**64 for i in range(k))
    assert key_positions(key, k) == want
    assert all(0 <= p < 2**64 for p in want)


def test_key_positions_rejects_k0():
    with pytest.raises(ValueError):
        key_positions(b"x", 0)


# -- BloomFilter ------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [0, 3, 12, 4, 100, -8])
def test_m_must_be_power_of_two(m):
    with pytest.raises(ValueError, match="power of two"):
        BloomFilter(m)


@given(keys_st, st.sampled_from([8, 64, 1024, 1 << 14]))
@SETTINGS
def test_no_false_negatives(keys, m):
    f = BloomFilter(m)
    for key in keys:
        f.add(key)
    for key in keys:
        assert key in f
        assert f.contains_positions(key_positions(key))


def test_empty_filter_contains_nothing():
    f = BloomFilter(1024)
    assert b"x" not in f
    assert f.set_bits == 0 and f.fill_ratio == 0.0 and f.estimated_fp_rate == 0.0


@given(keys_st, st.sampled_from([8, 64, 256]))
@SETTINGS
def test_fold_keeps_members_and_equals_direct_build(keys, m2):
    big = BloomFilter(1 << 12)
    small = BloomFilter(m2)
    for key in keys:
        big.add(key)
        small.add(key)
    folded = big.fold(m2)
    assert folded == small  # same positions reduced by the smaller mask
    for key in keys:
        assert key in folded


def test_fold_rejects_growth_and_bad_sizes():
    f = BloomFilter(64)
    with pytest.raises(ValueError):
        f.fold(128)
    with pytest.raises(ValueError):
        f.fold(48)


@given(keys_st, keys_st)
@SETTINGS
def test_union_contains_both_and_equals_build_of_both(a, b):
    fa, fb, fab = BloomFilter(2048), BloomFilter(2048), BloomFilter(2048)
    for key in a:
        fa.add(key)
        fab.add(key)
    for key in b:
        fb.add(key)
        fab.add(key)
    u = fa | fb
    assert u == fab
    for key in a + b:
        assert key in u


def test_union_rejects_other_geometry():
    with pytest.raises(ValueError):
        BloomFilter(64) | BloomFilter(128)
    with pytest.raises(ValueError):
        BloomFilter(64, 3) | BloomFilter(64, 4)


@given(keys_st, st.sampled_from([8, 1024, 1 << 16]))
@SETTINGS
def test_serialisation_round_trip(keys, m):
    f = BloomFilter(m, 5)
    for key in keys:
        f.add(key)
    data = f.to_bytes()
    g = BloomFilter.from_bytes(data)
    assert g == f and g.m == m and g.k == 5
    assert g.fingerprint() == f.fingerprint()
    for key in keys:
        assert key in g


def test_serialisation_compresses_sparse_filters():
    f = BloomFilter(1 << 16)
    f.add(b"only")
    assert len(f.to_bytes()) < 100  # raw bits would be 8 KiB
    assert BloomFilter.from_bytes(f.to_bytes()) == f


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01",
        b"\x02\x00\x07" + (64).to_bytes(8, "big") + bytes(8),
        b"\x01\x00\x07" + (48).to_bytes(8, "big") + bytes(6),
        b"\x01\x00\x07" + (64).to_bytes(8, "big") + bytes(7),
        b"\x01\x08\x07" + (64).to_bytes(8, "big") + bytes(8),
        b"\x01\x01\x07" + (64).to_bytes(8, "big") + b"\xff\xff",
    ],
)
def test_from_bytes_rejects_malformed(data):
    with pytest.raises(ValueError):
        BloomFilter.from_bytes(data)


@given(keys_st, st.integers(0, 4095))
@SETTINGS
def test_fingerprint_changes_iff_a_bit_changes(keys, j):
    f = BloomFilter(4096)
    for key in keys:
        f.add(key)
    before = f.fingerprint()
    assert before == crc64(f.bits.tobytes())
    # re-adding members changes no bit and so not the fingerprint
    for key in keys:
        f.add(key)
    assert f.fingerprint() == before
    # flipping any one bit changes it (CRC detects every single-bit error)
    f.bits[j] = not f.bits[j]
    assert f.fingerprint() != before
    f.bits[j] = not f.bits[j]
    assert f.fingerprint() == before


def test_estimates_track_the_truth():
    f = BloomFilter(1 << 15)
    for i in range(2000):
        f.add(b"k%d" % i)
    assert abs(f.estimated_count - 2000) < 60
    assert f.estimated_fp_rate == pytest.approx(f.fill_ratio**7)
    assert f.estimated_fp_rate == pytest.approx(theoretical_fp_rate(1 << 15, 7, 2000), rel=0.3)
    full = BloomFilter(8, 1, bitarray("11111111", endian="big"))
    assert full.estimated_count == math.inf


@pytest.mark.parametrize("n,p", [(1000, 0.01), (10_000, 0.001), (100, 1e-5), (0, 0.5)])
def test_for_capacity_meets_p_with_smallest_power_of_two(n, p):
    f = BloomFilter.for_capacity(n, p)
    assert f.k == DEFAULT_K and f.m & (f.m - 1) == 0
    assert theoretical_fp_rate(f.m, f.k, n) <= p
    if f.m > 8:
        assert theoretical_fp_rate(f.m // 2, f.k, n) > p
    assert m_for_capacity(n, p) == f.m


def test_for_capacity_rejects_bad_p():
    for p in (0, 1, -0.1, 2):
        with pytest.raises(ValueError):
            BloomFilter.for_capacity(10, p)


# -- measured false-positive rate vs theory ----------------------------------------------


# m is a power of two, so for n = 10,000 the geometries whose theoretical rate is
# nearest 1% and 0.1% use k = 3: (m=2^17: 0.86%) and (m=2^18: 0.126%). Also the
# cluster default k = 7 as for_capacity sizes it for p = 1% (m = 2^17: 0.21%).
@pytest.mark.parametrize(
    "m,k,target", [(1 << 17, 3, 0.01), (1 << 18, 3, 0.001), (1 << 17, DEFAULT_K, 0.01)]
)
def test_measured_fp_rate_matches_theory(m, k, target):
    n, trials = 10_000, 200_000
    f = BloomFilter(m, k)
    for i in range(n):
        f.add(b"member:%d" % i)
    theory = theoretical_fp_rate(m, k, n)
    assert theory <= target * 1.3
    fps = sum(1 for i in range(trials) if b"other:%d" % i in f)
    measured = fps / trials
    assert 0.7 * theory <= measured <= 1.3 * theory, (measured, theory)


# -- CountingBloomFilter ------------------------------------------------------------------------


ops_st = st.lists(st.tuples(st.booleans(), st.integers(0, 60)), max_size=250)


@given(ops_st, st.sampled_from([8, 64, 512]))
@SETTINGS
def test_counting_matches_exact_set_under_add_remove(ops, m):
    c = CountingBloomFilter(m)
    exact: set[bytes] = set()
    mirror = bitarray(m, endian="big")  # rebuilt from the reported deltas only
    mirror.setall(0)
    for add, i in ops:
        key = b"chan:%d" % i
        fp_before = c.fingerprint()
        if add and key not in exact:
            flipped = c.add(key)
            exact.add(key)
            assert c.last_set == flipped and c.last_cleared == ()
            for j in flipped:
                assert not mirror[j]
                mirror[j] = 1
        elif not add and key in exact:
            flipped = c.remove(key)
            exact.discard(key)
            assert c.last_cleared == flipped and c.last_set == ()
            for j in flipped:
                assert mirror[j]
                mirror[j] = 0
        else:
            continue
        assert (c.fingerprint() != fp_before) == bool(flipped)
        for key in exact:
            assert key in c
        exported = c.to_bloom()
        assert exported.bits == mirror
        assert exported.bits == bitarray([c.count_at(j) > 0 for j in range(m)], endian="big")
        assert c.fingerprint() == exported.fingerprint()
    if not exact:
        assert c.set_bits == 0


def test_counting_remove_of_absent_key_raises_and_changes_nothing():
    c = CountingBloomFilter(1024)
    c.add(b"a")
    before = c.to_bloom()
    with pytest.raises(KeyError):
        c.remove(b"never-added")
    assert c.to_bloom() == before and b"a" in c


def test_counting_saturated_counter_is_never_decremented():
    c = CountingBloomFilter(8, 1)
    keys: list[bytes] = []
    i = 0
    while len(keys) < 300:  # every key of k=1 lands on one of 8 counters
        key = b"s%d" % i
        if key_positions(key, 1)[0] & 7 == 0:
            keys.append(key)
        i += 1
    for key in keys:
        c.add(key)
    assert c.count_at(0) == 255
    for key in keys:
        c.remove(key)
    assert c.count_at(0) == 255 and keys[0] in c  # stays set: no false negative possible


def test_counting_to_bloom_is_a_snapshot():
    c = CountingBloomFilter(64)
    snap = c.to_bloom()
    c.add(b"x")
    assert snap.set_bits == 0 and c.to_bloom().set_bits > 0


def test_counting_for_capacity_and_estimates():
    c = CountingBloomFilter.for_capacity(500, 0.01)
    assert c.m == m_for_capacity(500, 0.01)
    for i in range(500):
        c.add(b"c%d" % i)
    assert abs(c.estimated_count - 500) < 40
    assert c.estimated_fp_rate == pytest.approx(c.fill_ratio**c.k)


# -- OppositeBloomFilter ----------------------------------------------------------------------


@given(st.lists(st.binary(max_size=8), max_size=300), st.integers(1, 64))
@SETTINGS
def test_opposite_never_reports_unseen(items, size):
    f = OppositeBloomFilter(size)
    seen: set[bytes] = set()
    for item in items:
        if f.contains_and_add(item):
            assert item in seen
        seen.add(item)


def test_opposite_catches_immediate_duplicate_and_discard_forgets():
    f = OppositeBloomFilter(1024)
    assert not f.contains_and_add(b"evt-1")
    assert f.contains_and_add(b"evt-1")
    f.discard(b"evt-1")
    assert not f.contains_and_add(b"evt-1")
    f.discard(b"not-there")  # no error


def test_opposite_size_for_formula_and_measured_catch_rate():
    n = OppositeBloomFilter.size_for(0.9, 100)
    assert (1 - 1 / n) ** 100 >= 0.9 > (1 - 1 / (n - 1)) ** 100
    # measured: a duplicate arriving after 100 other distinct items is caught ~90%
    f = OppositeBloomFilter(n)
    caught = 0
    rounds = 2000
    for r in range(rounds):
        f.contains_and_add(b"dup:%d" % r)
        for i in range(100):
            f.contains_and_add(b"filler:%d:%d" % (r, i))
        caught += f.contains_and_add(b"dup:%d" % r)
    assert 0.87 <= caught / rounds <= 0.93
    with pytest.raises(ValueError):
        OppositeBloomFilter.size_for(1.0, 10)
    with pytest.raises(ValueError):
        OppositeBloomFilter(0)


# -- decoder fuzz smoke (untrusted bytes from peers) -----------------------------------


@given(st.binary(max_size=64))
@settings(max_examples=300, deadline=None)
def test_from_bytes_random_input_only_raises_valueerror(data):
    from bloom import PatternFilter

    for decode in (BloomFilter.from_bytes, PatternFilter.from_bytes):
        with contextlib.suppress(ValueError):
            decode(data)


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 255)), min_size=1, max_size=6))
@settings(max_examples=300, deadline=None)
def test_from_bytes_mutated_encodings_only_raise_valueerror(edits):
    f = BloomFilter(1 << 12)
    f.add(b"a")
    for data in (f.to_bytes(), BloomFilter(64).to_bytes()):
        buf = bytearray(data)
        for i, v in edits:
            buf[i % len(buf)] = v
        try:
            g = BloomFilter.from_bytes(bytes(buf))
        except ValueError:
            continue
        assert g.m <= 1 << 28 and len(g.bits) == g.m


def test_forged_compressed_length_is_refused_before_decoding():
    # header says m = 2^20 and the sc stream claims 2^40 bits
    head = b"\x01\x01\x07" + (1 << 20).to_bytes(8, "big")
    forged = bytes([0x16]) + (1 << 40).to_bytes(6, "little") + b"\x00"
    with pytest.raises(ValueError, match="length"):
        BloomFilter.from_bytes(head + forged)
    with pytest.raises(ValueError, match="limit"):
        BloomFilter.from_bytes(b"\x01\x01\x07" + (1 << 40).to_bytes(8, "big") + forged)


def test_counting_from_keys_equals_incremental_build():
    keys = [b"r%d" % i for i in range(300)]
    inc = CountingBloomFilter(2048)
    for key in keys:
        inc.add(key)
    rebuilt = CountingBloomFilter.from_keys(keys, 4096)
    assert rebuilt.m == 4096 and all(key in rebuilt for key in keys)
    assert CountingBloomFilter.from_keys(keys, 2048).to_bloom() == inc.to_bloom()
    assert rebuilt.estimated_fp_rate < inc.estimated_fp_rate


def test_bit_flip_table_is_the_crc64_change_of_each_bit():
    """Redis's CRC64 is linear: flipping bit j changes it by bit_flips(n)[j]."""
    from bloom.crc64 import bit_flips

    raw = bytearray(bytes(range(256)) * 2)
    table = bit_flips(len(raw))
    assert table is not None and len(table) == 8 * len(raw)
    for j in (0, 1, 7, 8, 1000, 8 * len(raw) - 1):
        flipped = bytearray(raw)
        flipped[j >> 3] ^= 0x80 >> (j & 7)
        assert crc64(bytes(flipped)) == crc64(bytes(raw)) ^ table[j]
    assert bit_flips(1 << 20) is None  # too big: fingerprints computed whole


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=60))
def test_counting_filters_kept_fingerprint_is_its_crc64(ops):
    """The fingerprint kept from the flips of each add and remove (read
    between them, so the kept value is what is updated) equals the CRC64 of
    the exported bits computed whole."""
    f = CountingBloomFilter(1024)
    held: list[bytes] = []
    for adding, i in ops:
        key = b"key%d" % i
        if adding:
            f.add(key)
            held.append(key)
        elif key in held:
            f.remove(key)
            held.remove(key)
        assert f.fingerprint() == crc64(f.exported.bits.tobytes())


@SETTINGS
@given(st.binary(max_size=32), st.integers(1, 20), st.integers(3, 40))
def test_key_indexes_are_the_reduced_key_positions(key, k, log_m):
    """The positions reduced from halves reduced first (small ints) are the
    64-bit positions reduced, for any k and filter size."""
    from bloom.hashing import key_indexes

    mask = (1 << log_m) - 1
    assert key_indexes(key, mask, k) == tuple(p & mask for p in key_positions(key, k))


@settings(max_examples=20, deadline=None)
@given(reads=st.lists(st.integers(0, 300), max_size=6), seed=st.integers(0, 1000))
def test_counting_fingerprint_read_rarely_is_its_crc64(reads, seed):
    """Flips left unread, a few or past PENDING_FLIPS (then computed whole
    when read), still give the CRC64 of the exported bits."""
    from bloom.counting import PENDING_FLIPS

    f = CountingBloomFilter(2048)
    assert f.fingerprint() == crc64(f.exported.bits.tobytes())
    held: list[bytes] = []
    i = 0
    for changes in [*reads, PENDING_FLIPS + 1]:
        for _ in range(changes):
            i += 1
            if held and (i + seed) % 3 == 0:
                f.remove(held.pop())
            else:
                held.append(b"k%d:%d" % (seed, i))
                f.add(held[-1])
        assert f.fingerprint() == crc64(f.exported.bits.tobytes())
