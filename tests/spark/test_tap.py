"""TrafficTap: real files in a temp spool, a real asyncio loop."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import pytest

from spark.events import SCHEMA_FIELDS, TrafficEvent
from spark.tap import TrafficTap, event_line, sampled, spool_file_name

NODE = "a" * 40
PEER = "b" * 40


def event(seq: int, node: str = NODE, role: str = "origin", origin: str = NODE) -> TrafficEvent:
    return TrafficEvent(
        event_id=f"{origin}-{seq}",
        time=1_700_000_000.0 + seq / 1000,
        node=node,
        role=role,  # type: ignore[arg-type]
        channel=f"news.{seq % 7}",
        bytes=100 + seq % 13,
        receivers=seq % 3,
        forwarded=0 if role == "receiver" else seq % 4,
        peers=5,
        false_positive=role == "receiver" and seq % 3 == 0,
    )


def spool_names(directory) -> list[str]:
    """The spool's event files (``.ndjson`` and ``.ndjson.tmp``), sorted."""
    return sorted(n for n in os.listdir(directory) if ".ndjson" in n)


def read_spool(directory) -> list[dict]:
    rows = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".ndjson"):
            with open(os.path.join(directory, name)) as fh:
                rows.extend(json.loads(line) for line in fh)
    return rows


def test_events_roundtrip_through_files(tmp_path):
    async def main():
        tap = TrafficTap(tmp_path, flush_interval=0.01)
        tap.start()
        for i in range(500):
            tap.record(event(i))
        await asyncio.sleep(0.1)
        assert tap.written == 500  # flushed by the timer, before close
        tap.close()
        return tap

    tap = asyncio.run(main())
    rows = read_spool(tmp_path)
    assert [r["event_id"] for r in rows] == [f"{NODE}-{i}" for i in range(500)]
    assert list(rows[0]) == [name for name, _ in SCHEMA_FIELDS]
    assert TrafficEvent.from_dict(rows[42]) == event(42)
    assert tap.files == 1 and tap.dropped == 0
    assert not list(tmp_path.glob("*.tmp"))
    assert spool_names(tmp_path) == [spool_file_name(NODE, 0)]
    assert (tmp_path / f"{NODE}.seq").read_text() == "1\n"  # the next file number


def test_rotation_by_size(tmp_path):
    line_len = len(event(0).to_json()) + 1
    tap = TrafficTap(tmp_path, max_file_bytes=line_len * 10, node=NODE)
    for i in range(95):
        tap.record(event(i))
    tap.flush()
    tap.close()
    files = sorted(p.name for p in tmp_path.glob("*.ndjson"))
    assert len(files) == tap.files >= 10
    for p in tmp_path.glob("*.ndjson"):
        assert p.stat().st_size <= line_len * 10
    assert [r["event_id"] for r in read_spool(tmp_path)] == [f"{NODE}-{i}" for i in range(95)]


def test_rotation_by_time_without_new_events(tmp_path):
    async def main():
        tap = TrafficTap(tmp_path, rotate_seconds=0.15, flush_interval=0.02)
        tap.start()
        tap.record(event(1))
        await asyncio.sleep(0.05)
        assert list(tmp_path.glob("*.ndjson.tmp")) and not list(tmp_path.glob("*.ndjson"))
        await asyncio.sleep(0.4)
        # a quiet node's events become visible within rotate_seconds + flush_interval
        assert len(list(tmp_path.glob("*.ndjson"))) == 1
        tap.record(event(2))
        await asyncio.sleep(0.4)
        assert len(list(tmp_path.glob("*.ndjson"))) == 2
        tap.close()

    asyncio.run(main())


def test_reader_never_sees_partial_ndjson(tmp_path):
    """A concurrent reader polling *.ndjson only ever sees complete, final files."""
    seen: dict[str, bytes] = {}
    problems: list[str] = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            for p in tmp_path.glob("*.ndjson"):
                try:
                    data = p.read_bytes()
                except FileNotFoundError:
                    continue
                if not data.endswith(b"\n"):
                    problems.append(f"{p.name} ends mid-line")
                for line in data.splitlines():
                    json.loads(line)
                if p.name in seen and seen[p.name] != data:
                    problems.append(f"{p.name} changed after it appeared")
                seen[p.name] = data

    async def main():
        tap = TrafficTap(tmp_path, max_file_bytes=4000, rotate_seconds=0.05, flush_interval=0.005)
        tap.start()
        for i in range(3000):
            tap.record(event(i))
            if i % 50 == 0:
                await asyncio.sleep(0.002)
        tap.close()
        return tap

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        tap = asyncio.run(main())
    finally:
        stop.set()
        t.join(timeout=10)
    assert problems == []
    assert len(seen) >= 5
    assert tap.written == 3000 and len(read_spool(tmp_path)) == 3000


def test_drops_and_counts_at_spool_limit(tmp_path):
    line_len = len(event(0).to_json()) + 1
    tap = TrafficTap(tmp_path, max_file_bytes=line_len * 5, max_spool_bytes=line_len * 20)
    for i in range(100):
        tap.record(event(i))
    tap.flush()
    tap.close()
    rows = read_spool(tmp_path)
    assert tap.written == len(rows)
    assert tap.written + tap.dropped == 100
    assert 15 <= tap.written <= 20
    assert sum(p.stat().st_size for p in tmp_path.glob("*.ndjson")) <= line_len * 20
    # once full, record() itself refuses new events without touching the disk
    before = tap.dropped
    tap2 = TrafficTap(tmp_path, max_spool_bytes=line_len * 20, node=NODE)
    tap2.record(event(1000))
    tap2.flush()
    tap2.close()
    assert tap.dropped == before


def test_room_freed_by_consumer_is_reused(tmp_path):
    line_len = len(event(0).to_json()) + 1
    tap = TrafficTap(tmp_path, max_file_bytes=line_len * 5, max_spool_bytes=line_len * 10)
    for i in range(30):
        tap.record(event(i))
    tap.flush()
    full = tap.written
    assert tap.dropped > 0
    for p in tmp_path.glob("*.ndjson"):
        p.unlink()  # a consumer deleted what it processed
    tap._complete_file()  # rotation re-measures the spool
    tap.record(event(99))
    tap.flush()
    tap.close()
    assert tap.written == full + 1


def test_disk_error_drops_never_raises(tmp_path, caplog):
    """Each failed open is counted (INFO traffic_disk_errors) and logged at most
    once a minute per cause, with how many were not logged."""
    spool = tmp_path / "spool"
    tap = TrafficTap(spool, node=NODE)
    spool.rmdir()
    spool.write_text("not a directory")  # every open() in the spool now fails
    with caplog.at_level("WARNING", logger="bloomcast.tap"):
        for i in range(10):
            tap.record(event(i))
            tap.flush()  # must not raise
        tap.close()
    assert tap.dropped == 10 and tap.written == 0
    info = tap.info_fields()
    assert (info["traffic_disk_errors"], info["traffic_errors"]) == (10, 0)
    lines = [r.getMessage() for r in caplog.records if r.name == "bloomcast.tap"]
    assert len(lines) == 1 and lines[0].startswith("traffic tap: open in ")


def test_write_failure_on_full_disk_drops(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("/dev/full (a disk that is always full) is Linux-only")
    tap = TrafficTap(tmp_path, node=NODE)
    tap.record(event(0))
    tap.flush()
    tap._complete_file()
    tap._fd = os.open("/dev/full", os.O_WRONLY)  # next write fails with ENOSPC
    tap._file_size = 0
    tap._file_opened = time.monotonic()
    tap.record(event(1))
    tap.record(event(2))
    tap.flush()
    assert tap.dropped == 2 and tap.written == 1
    tap.record(event(3))
    tap.flush()
    tap.close()
    assert tap.written == 2
    assert [r["event_id"] for r in read_spool(tmp_path)] == [f"{NODE}-0", f"{NODE}-3"]


def test_record_never_raises_on_bad_event(tmp_path):
    tap = TrafficTap(tmp_path, sample=0.5)
    tap.record(None)  # type: ignore[arg-type]
    assert tap.dropped == 1 and tap.info_fields()["traffic_errors"] == 1
    tap.close()
    tap.record(event(1))  # after close: counted, not raised
    assert tap.dropped == 2


def test_sampling_is_deterministic_per_event_id(tmp_path):
    origin_dir, receiver_dir = tmp_path / "o", tmp_path / "r"
    a = TrafficTap(origin_dir, sample=0.3)
    b = TrafficTap(receiver_dir, sample=0.3)
    for i in range(4000):
        a.record(event(i))
        b.record(event(i, node=PEER, role="receiver"))
    a.close()
    b.close()
    kept_a = {r["event_id"] for r in read_spool(origin_dir)}
    kept_b = {r["event_id"] for r in read_spool(receiver_dir)}
    assert kept_a == kept_b  # origin and receiver events of one PUBLISH together
    # binomial(4000, 0.3): sd ~ 29; 5 sigma bounds
    assert abs(len(kept_a) - 1200) < 150
    assert a.sampled_out == 4000 - len(kept_a)
    assert kept_a == {f"{NODE}-{i}" for i in range(4000) if sampled(f"{NODE}-{i}", 0.3)}
    assert sampled("x", 1.0) and not sampled("x", 0.0)
    assert all(a.keeps(e) for e in kept_a) and not any(
        a.keeps(f"{NODE}-{i}") for i in range(4000) if f"{NODE}-{i}" not in kept_a
    )


def test_restart_recovers_tmp_and_continues_numbering(tmp_path):
    good = event(1).to_json() + "\n"
    (tmp_path / spool_file_name(NODE, 3, tmp=True)).write_text(good + '{"event_id": "tru')
    (tmp_path / spool_file_name(NODE, 1)).write_text(good)
    tap = TrafficTap(tmp_path)
    tap.record(event(2))
    tap.close()
    names = spool_names(tmp_path)
    assert names == [spool_file_name(NODE, n) for n in (1, 3, 4)]
    assert (tmp_path / spool_file_name(NODE, 3)).read_text() == good


@pytest.mark.parametrize(
    "channel",
    ["plain", 'quo"te', "back\\slash", "tab\tnew\nline", "ünïcødé ☃", "\x00\x1f", "a\\xff"],
)
def test_event_line_is_the_schema_json(channel):
    ev = TrafficEvent(
        f"{NODE}-7", 1_700_000_000.123456789, NODE, "receiver", channel, 5, 0, 0, 3, True, True
    )
    line = event_line(ev)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    raw = json.loads(line)
    assert list(raw) == [name for name, _ in SCHEMA_FIELDS]
    assert TrafficEvent.from_dict(raw) == ev
    assert raw == json.loads(ev.to_json())


def test_a_slow_disk_never_holds_the_loop_and_every_event_is_counted(tmp_path, monkeypatch):
    """Every write takes 0.3 s (a disk slower than the traffic): the loop's
    10 ms timer is never late by a write's time (half of it: a loaded machine
    adds its own delays), the events beyond the batch
    bound wait no longer but are dropped and counted, and every event
    recorded is written or counted as dropped (issue 41)."""
    write_all = TrafficTap._write_all

    def slow(self: TrafficTap, data: bytes) -> bool:
        time.sleep(0.3)
        return write_all(self, data)

    monkeypatch.setattr(TrafficTap, "_write_all", slow)

    async def main() -> tuple[TrafficTap, float, int]:
        tap = TrafficTap(tmp_path, flush_interval=0.01, max_buffer_events=50)
        tap.start()
        worst, recorded = 0.0, 0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            worst = max(worst, time.monotonic() - before - 0.01)
            for _ in range(20):
                tap.record(event(recorded))
                recorded += 1
            assert len(tap._pending) <= 50
        tap.close()
        return tap, worst, recorded

    tap, worst, recorded = asyncio.run(main())
    assert worst < 0.15
    assert tap.dropped > 0 and tap.written > 0
    assert tap.written + tap.dropped == recorded
    assert len(read_spool(tmp_path)) == tap.written


def test_tap_with_an_address_writes_the_node_sidecar(tmp_path):
    from spark.nodes import read_sidecars

    tap = TrafficTap(tmp_path / "with", node=NODE, address="10.0.0.5:7001")
    tap.record(event(0))
    tap.flush()
    tap.close()
    sidecar = tmp_path / "with" / f"{NODE}.node.json"
    assert json.loads(sidecar.read_text()) == {"node": NODE, "address": "10.0.0.5:7001"}
    assert not sidecar.name.endswith(".ndjson")  # the Spark file source never reads it
    assert read_sidecars(str(tmp_path / "with")) == {NODE: "10.0.0.5:7001"}
    plain = TrafficTap(tmp_path / "without", node=NODE)
    plain.record(event(0))
    plain.flush()
    plain.close()
    assert list((tmp_path / "without").glob("*.node.json")) == []
    assert read_sidecars(str(tmp_path / "without")) == {}


def test_the_batch_is_bounded_in_bytes_too(tmp_path):
    """Issue 49: 200,000 events of 64 KiB channel names fit the event bound;
    the byte bound drops them first, counted."""
    tap = TrafficTap(tmp_path, max_buffer_bytes=1024 * 1024)
    wide = TrafficEvent(f"{NODE}-1", 1.7e9, NODE, "origin", "c" * 65536, 1, 0, 0, 2, False)
    for _ in range(100):
        tap.record(wide)
    fields = tap.info_fields()
    assert fields["traffic_events_pending"] == 15  # 15 x (64 KiB + ids) <= 1 MiB
    assert 15 * 65536 < fields["traffic_events_pending_bytes"] <= 1024 * 1024
    assert fields["traffic_events_dropped"] == 85
    tap.close()
    assert tap.info_fields()["traffic_events_pending_bytes"] == 0
    assert len(read_spool(tmp_path)) == 15


def test_a_killed_writers_tmp_is_completed_at_start_with_no_event(tmp_path):
    """Issue 49 finding 7: the orphan scan runs in the writer thread as the tap
    starts, not with the first batch (here no tick ever comes: an hour apart)."""
    orphan = tmp_path / spool_file_name(PEER, 3, tmp=True)
    orphan.write_bytes(event_line(event(1, node=PEER)))

    async def main() -> TrafficTap:
        tap = TrafficTap(tmp_path, node=NODE, flush_interval=3600)
        tap.start()
        for _ in range(500):
            if tap.recovered:
                break
            await asyncio.sleep(0.02)
        tap.close()
        return tap

    tap = asyncio.run(main())
    assert tap.recovered == 1
    assert spool_names(tmp_path) == [spool_file_name(PEER, 3)]


def test_an_exception_in_the_writer_thread_is_counted_logged_once_and_the_thread_goes_on(
    tmp_path, monkeypatch, caplog
):
    import spark.tap as tap_module

    calls = []
    real = tap_module.recover_orphans

    def broken(directory, skip=None):
        calls.append(1)
        if len(calls) <= 2:  # the start's scan, and the one before the first file
            raise RuntimeError("a bug in the scan")
        return real(directory, skip)

    monkeypatch.setattr(tap_module, "recover_orphans", broken)

    async def main() -> TrafficTap:
        tap = TrafficTap(tmp_path, node=NODE, flush_interval=0.01, rotate_seconds=0.01)
        tap.start()
        for i in range(5):
            for j in range(10):
                tap.record(event(i * 10 + j))
            await asyncio.sleep(0.05)
        for _ in range(500):
            if tap.written + tap.dropped == 50:
                break
            await asyncio.sleep(0.01)
        tap.close()
        return tap

    caplog.set_level("WARNING", logger="bloomcast.tap")
    tap = asyncio.run(main())
    # the batch the failed open took is counted dropped; every later batch written
    assert tap.written + tap.dropped == 50 and tap.written >= 10 and tap.dropped >= 1
    assert tap.errors == 2
    assert len(read_spool(tmp_path)) == tap.written
    lines = [r for r in caplog.records if "a bug in the scan" in r.getMessage()]
    assert len(lines) == 1  # logged once a minute


def test_close_on_a_hung_disk_gives_up_after_its_timeout_and_counts_the_batch(
    tmp_path, monkeypatch
):
    import spark.tap as tap_module

    release = threading.Event()
    real_write = os.write

    def hung(fd, data):
        release.wait(30)
        return real_write(fd, data)

    async def main() -> tuple[bool, TrafficTap]:
        tap = TrafficTap(tmp_path, node=NODE, flush_interval=3600)
        tap.start()
        monkeypatch.setattr(tap_module.os, "write", hung)
        for i in range(7):
            tap.record(event(i))
        ended = await tap.aclose(0.3)
        return ended, tap

    try:
        ended, tap = asyncio.run(main())
    finally:
        release.set()
    assert ended is False
    assert tap.dropped == 7 and tap.errors == 1
