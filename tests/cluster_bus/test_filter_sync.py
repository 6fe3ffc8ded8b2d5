"""Filter synchronisation as pure state: what we announce, what we hold of
peers, when we ask again. Time is passed in; nothing touches a socket."""

from __future__ import annotations

from bloom import CountingBloomFilter
from cluster_bus.api import FilterChange, FilterSnapshot
from cluster_bus.codec import encode
from cluster_bus.decoder import FrameDecoder
from cluster_bus.filter_sync import REQUEST_RETRY_MAX_MS, REQUEST_RETRY_MS, FilterSync
from cluster_bus.frames import FilterDelta, FilterFull, FilterKind, FilterRequest, Ping
from cluster_bus.routing import PeerTable, filter_fingerprint

PEER = "cd" * 20


def snapshot(f: CountingBloomFilter) -> FilterSnapshot:
    return FilterSnapshot.of_channels(f)


def started(chan: CountingBloomFilter) -> FilterSync:
    sync = FilterSync(PeerTable())
    sync.start(FilterKind.CHANNELS, snapshot(chan))
    empty = bytes(32)
    sync.start(
        FilterKind.PATTERNS,
        FilterSnapshot(256, 7, empty, filter_fingerprint(FilterKind.PATTERNS, empty, 0, False)),
    )
    return sync


def ping(cfp: int, pfp: int, epoch: int) -> Ping:
    return Ping(PEER, "", 1, 2, cfp, pfp, epoch, 0, False)


def test_deltas_chain_on_the_announced_fingerprint_under_one_epoch():
    chan = CountingBloomFilter(1024)
    sync = started(chan)
    base = chan.fingerprint()
    a = FilterChange("channels", chan.add(b"a"), (), chan.fingerprint(), chan.m)
    b = FilterChange("channels", chan.add(b"b"), (), chan.fingerprint(), chan.m)
    (da, db), whole = sync.announce([a, b])
    assert whole == []
    assert (da.base_fp, da.new_fp) == (base, a.fingerprint)
    assert (db.base_fp, db.new_fp) == (a.fingerprint, b.fingerprint)
    assert da.epoch == db.epoch == sync.epoch == 1
    assert db.delta_id == da.delta_id + 1
    assert sync.heartbeat_fields()[0] == chan.fingerprint()


def test_a_new_m_is_announced_whole_with_a_new_epoch():
    chan = CountingBloomFilter(1024)
    sync = started(chan)
    bigger = CountingBloomFilter.from_keys([b"a"], 2048, chan.k)
    deltas, whole = sync.announce(
        [FilterChange("channels", (), (), bigger.fingerprint(), bigger.m)]
    )
    assert deltas == [] and whole == [FilterKind.CHANNELS] and sync.epoch == 0
    full = sync.full(FilterKind.CHANNELS, snapshot(bigger), announce=True)
    assert (full.m, full.fingerprint, full.epoch) == (2048, bigger.fingerprint(), 1)
    assert sync.heartbeat_fields()[0] == bigger.fingerprint()
    # an answer to a FILTER_REQUEST announces nothing new
    sync.full(FilterKind.CHANNELS, snapshot(bigger), announce=False)
    assert sync.epoch == 1


def test_heartbeat_mismatch_fails_open_and_requests_at_most_once_per_retry():
    sync = started(CountingBloomFilter(1024))
    routing = sync.routing
    routing.add_peer(PEER)
    theirs = CountingBloomFilter(1024)
    theirs.add(b"x")
    snap = snapshot(theirs)
    routing.set_filter(PEER, FilterKind.CHANNELS, snap.m, snap.k, snap.bits, snap.fingerprint, 1)
    assert routing.fingerprint(PEER, FilterKind.CHANNELS) == snap.fingerprint
    other = snap.fingerprint ^ 1
    out = sync.on_heartbeat(PEER, ping(other, 0, 2), now=10_000)
    assert FilterRequest(FilterKind.CHANNELS) in out
    assert routing.fingerprint(PEER, FilterKind.CHANNELS) is None  # fail open
    assert FilterRequest(FilterKind.CHANNELS) not in sync.on_heartbeat(
        PEER, ping(other, 0, 2), now=10_000 + REQUEST_RETRY_MS - 1
    )
    assert FilterRequest(FilterKind.CHANNELS) in sync.on_heartbeat(
        PEER, ping(other, 0, 2), now=10_000 + REQUEST_RETRY_MS
    )


def test_an_unanswered_request_is_retried_after_a_growing_jittered_wait():
    """Retries of a FILTER_REQUEST left unanswered: the first after
    REQUEST_RETRY_MS, then REQUEST_RETRY_MS x 2^(n-1) x rand(1, 2), at most
    REQUEST_RETRY_MAX_MS; an answer ends it (the next mismatch asks at once)."""
    sync = started(CountingBloomFilter(1024))
    sync.routing.add_peer(PEER)
    now = 10_000
    request, _ = sync.on_delta(
        PEER, FilterDelta(FilterKind.CHANNELS, 9, 1024, 1, 2, (3,), (), 1), now
    )
    assert request is not None
    waits = []
    for n in range(8):
        at = now
        while not (sent := sync.retry(now)):
            now += 1
        assert sent == [(PEER, FilterRequest(FilterKind.CHANNELS))]
        waits.append(now - at)
        low = REQUEST_RETRY_MS * 2 ** max(0, n - 1) if n else REQUEST_RETRY_MS
        assert min(low, REQUEST_RETRY_MAX_MS) <= waits[-1] <= min(2 * low, REQUEST_RETRY_MAX_MS)
    assert waits[-1] == REQUEST_RETRY_MAX_MS
    theirs = CountingBloomFilter(1024)
    snap = snapshot(theirs)
    full = FilterFull(FilterKind.CHANNELS, snap.m, snap.k, snap.bits, snap.fingerprint, 1)
    assert sync.on_full(PEER, full, now) == []  # answered
    assert sync.on_heartbeat(PEER, ping(snap.fingerprint ^ 1, 0, 2), now + 1)  # asks at once


def test_the_retry_wait_stops_at_half_the_node_timeout():
    """The bus gives its node timeout / 2 as the longest wait (2 s at a node
    timeout of 4 s): a healed link gets its filters within that."""
    sync = FilterSync(PeerTable(), max_retry_ms=2000)
    sync.routing.add_peer(PEER)
    now = 10_000
    sync.on_delta(PEER, FilterDelta(FilterKind.CHANNELS, 9, 1024, 1, 2, (3,), (), 1), now)
    waits = []
    for _ in range(6):
        at = now
        while not sync.retry(now):
            now += 1
        waits.append(now - at)
    assert waits[0] == REQUEST_RETRY_MS and max(waits) == 2000


def test_a_delta_on_a_stale_base_is_acked_and_requested():
    sync = started(CountingBloomFilter(1024))
    sync.routing.add_peer(PEER)  # we hold no copy yet
    delta = FilterDelta(FilterKind.CHANNELS, 9, 1024, 1, 2, (3,), (), 1)
    assert sync.on_delta(PEER, delta, now=5_000) == (FilterRequest(FilterKind.CHANNELS), 9)


def test_a_full_filter_that_does_not_verify_is_counted():
    sync = started(CountingBloomFilter(1024))
    sync.routing.add_peer(PEER)
    f = CountingBloomFilter(1024)
    snap = snapshot(f)
    bad = sync.full(FilterKind.CHANNELS, FilterSnapshot(snap.m, snap.k, snap.bits, 123), False)
    assert sync.on_full(PEER, bad, now=50_000) == [FilterRequest(FilterKind.CHANNELS)]
    assert sync.verify_failures == 1
    assert sync.on_full(PEER, bad, now=50_001) == []  # asked again, but not in a loop
    assert sync.verify_failures == 2
    assert sync.routing.fingerprint(PEER, FilterKind.CHANNELS) is None
    good = sync.full(FilterKind.CHANNELS, snap, False)
    assert sync.on_full(PEER, good, now=50_002) == []
    assert sync.routing.fingerprint(PEER, FilterKind.CHANNELS) == snap.fingerprint


def test_a_bogus_huge_epoch_does_not_silence_later_heartbeats():
    """A FILTER_FULL with epoch 2^63 (spoofed or corrupt) must not make every
    later heartbeat look older: the first mismatching heartbeat asks again."""
    sync = started(CountingBloomFilter(1024))
    routing = sync.routing
    routing.add_peer(PEER)
    bogus = snapshot(CountingBloomFilter(1024))  # all zeros: routes the peer nothing
    huge = FilterFull(FilterKind.CHANNELS, bogus.m, bogus.k, bogus.bits, bogus.fingerprint, 2**63)
    sync.on_full(PEER, huge, now=1_000)
    assert routing.epoch(PEER, FilterKind.CHANNELS) == 2**63
    real = CountingBloomFilter(1024)
    real.add(b"payroll")
    out = sync.on_heartbeat(PEER, ping(real.fingerprint(), 0, 5), now=2_000)
    assert FilterRequest(FilterKind.CHANNELS) in out
    snap = snapshot(real)
    sync.on_full(PEER, sync.full(FilterKind.CHANNELS, snap, False), now=2_010)
    assert routing.fingerprint(PEER, FilterKind.CHANNELS) == real.fingerprint()
    assert routing.nodes_of(routing.route(b"payroll")) == (PEER,)


def test_a_batch_of_two_filters_is_acked_once_by_its_last_delta():
    """A batch changing both filters: two deltas, the first flagged ``more``
    (on the wire too); the peer acks only the last, which stands for both."""
    ours = started(CountingBloomFilter(1024))
    changes = [
        FilterChange("channels", (3, 9), (), 11, 1024),
        FilterChange("patterns", (5,), (), 12, 256),
    ]
    deltas, whole = ours.announce(changes)
    assert whole == [] and [d.more for d in deltas] == [True, False]
    wire = FrameDecoder().feed(b"".join(encode(d, 1) for d in deltas))
    assert [d.more for d in wire if isinstance(d, FilterDelta)] == [True, False]
    theirs = started(CountingBloomFilter(1024))
    theirs.routing.add_peer(PEER)
    replies = [theirs.on_delta(PEER, d, now=1_000) for d in wire]  # type: ignore[arg-type]
    assert [ack for _, ack in replies if ack is not None] == [deltas[1].delta_id]
