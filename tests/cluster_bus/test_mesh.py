"""cluster_bus.mesh.Dialer on an injected clock: how many dials run at once,
when a failed one is tried again (no socket is opened: ``dial`` is not called)."""

import asyncio
import random

from cluster_bus.mesh import BACKOFF_BASE_MS, Dialer


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def dialer(in_flight: int = 3, node_timeout_ms: int = 15_000) -> tuple[Dialer, Clock]:
    clock = Clock()
    d = Dialer(
        lambda key: None,  # type: ignore[arg-type,return-value]
        node_timeout_ms,
        clock=clock,
        rng=random.Random(7),
        in_flight=in_flight,
    )
    return d, clock


def test_at_most_in_flight_dials_until_their_handshakes_end():
    d, clock = dialer(in_flight=3)
    keys = [("127.0.0.1", 20000 + i) for i in range(5)]
    for key in keys[:3]:
        assert d.due(key, clock())
        d.dialing.add(key)  # what dial() does before its connect
    assert not d.due(keys[0], clock())  # one dial per address
    assert not d.due(keys[3], clock())  # three under way
    d.connected(keys[0])  # a handshake completed: a place is free
    assert d.due(keys[3], clock())
    d.failed(keys[1])  # a link closed in its handshake: a place is free too
    assert d.due(keys[4], clock())
    assert not d.due(keys[1], clock())  # but that address backs off


def test_a_failed_dial_backs_off_exponentially_with_jitter_to_a_cap():
    d, clock = dialer(node_timeout_ms=15_000)
    key = ("127.0.0.1", 20000)
    cap = 2000  # min(2000, node timeout / 2)
    for attempt in range(8):
        d.dialing.add(key)
        d.failed(key, "refused")
        got, next_ms = d.backoff[key]
        assert got == attempt + 1
        base = min(cap, BACKOFF_BASE_MS * 2**attempt)
        assert base / 2 <= next_ms - clock() <= base
        assert not d.due(key, next_ms - 1) and d.due(key, next_ms)
    d.connected(key)
    assert key not in d.backoff  # reached: the next failure starts over


def test_a_failure_of_a_dial_not_under_way_changes_nothing():
    d, clock = dialer()
    key = ("127.0.0.1", 20000)
    d.failed(key)  # e.g. the link to our own address, closed quietly
    assert key not in d.backoff and d.due(key, clock())


def test_a_meet_from_the_address_ends_its_backoff():
    d, clock = dialer()
    key = ("127.0.0.1", 20000)
    d.dialing.add(key)
    d.failed(key)
    assert not d.due(key, clock())
    d.dialing.update({("127.0.0.1", 1), ("127.0.0.1", 2), ("127.0.0.1", 3)})
    d.listening(key, clock())  # no place free: not dialled, but due when one is
    assert key not in d.backoff and key not in d.dialing


def test_a_dial_frees_its_place_whatever_its_connect_raises(caplog):
    """Issue 49: hosts the resolver refuses (a label over 63 characters:
    UnicodeError; an empty label; a NUL: ValueError; an unencodable
    character) each raised out of the dial and kept its place in
    ``dialing`` for good: 16 of them and the node never dialled again. Now
    each frees its place, is counted, backs off, and is logged once a minute."""

    async def main() -> Dialer:
        d, clock = dialer(in_flight=16)
        bad = [(f"n{i}.{'a' * 64}", 17001) for i in range(13)]
        bad += [("a..b", 17001), ("a\x00b", 17001), ("\udcff", 17001)]
        for key in bad:
            assert d.due(key, clock())
            d.dial(key)
        assert len(d.dialing) == 16 and not d.due(("127.0.0.1", 17002), clock())
        for _ in range(200):
            if not d.dialing:
                break
            await asyncio.sleep(0.01)
        assert d.dialing == set()  # every place free again
        assert d.dial_errors == 16 and all(d.backoff[key][0] == 1 for key in bad)
        assert d.due(("127.0.0.1", 17002), clock())  # the node dials again
        return d

    with caplog.at_level("WARNING", logger="bloomcast.bus"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if "bus dial of" in r.getMessage()]
    assert len(lines) == 16 and any("label too long" in line for line in lines)
