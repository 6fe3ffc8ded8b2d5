"""Completing the ``.tmp`` files crashed writers left (spark/spool_files.py), whatever
id wrote them, exactly once: real processes, real flock, real kill -9."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from spark.events import TrafficEvent
from spark.spool_files import claim_orphan, recover_orphans, spool_file_name
from spark.tap import TrafficTap, event_line

DEAD = "d" * 40
ALIVE = "a" * 40
NEW = "b" * 40


def event(seq: int, node: str = DEAD) -> TrafficEvent:
    t = 1_700_000_000.0 + seq
    return TrafficEvent(f"{node}-{seq}", t, node, "origin", "c", 1, 0, 0, 2, False)


def lines(node: str, seqs: range) -> bytes:
    return b"".join(event_line(event(i, node)) for i in seqs)


def spool_names(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if ".ndjson" in n)


def test_a_new_id_completes_the_dead_ids_tmp_once_whole_lines_only(tmp_path: Path) -> None:
    orphan = tmp_path / spool_file_name(DEAD, 4, tmp=True)
    orphan.write_bytes(lines(DEAD, range(3)) + b'{"event_id": "cut-in-the-mi')
    empty = tmp_path / spool_file_name(DEAD, 5, tmp=True)
    empty.write_bytes(b'{"no newline at all')
    tap = TrafficTap(tmp_path, node=NEW, flush_interval=0.05)
    tap.record(event(0, NEW))
    tap.close()
    assert spool_names(tmp_path) == [spool_file_name(NEW, 0), spool_file_name(DEAD, 4)]
    assert (tmp_path / spool_file_name(DEAD, 4)).read_bytes() == lines(DEAD, range(3))
    assert tap.recovered == 1 and tap.info_fields()["traffic_files_recovered"] == 1
    # nothing left to recover: a second tap finds no orphan
    assert recover_orphans(tmp_path) == 0


def test_a_live_writers_tmp_is_never_taken(tmp_path: Path) -> None:
    alive = TrafficTap(tmp_path, node=ALIVE)
    alive.record(event(0, ALIVE))
    alive.flush()  # its .tmp is open (and locked) now
    open_name = spool_file_name(ALIVE, 0, tmp=True)
    assert spool_names(tmp_path) == [open_name]
    other = TrafficTap(tmp_path, node=NEW)
    assert other.recover_orphans() == 0
    assert claim_orphan(tmp_path / open_name) is None
    alive.record(event(1, ALIVE))
    alive.close()
    assert (tmp_path / spool_file_name(ALIVE, 0)).read_bytes() == lines(ALIVE, range(2))


def _recover_in_process(directory: str, start: multiprocessing.synchronize.Event, out) -> None:
    start.wait()
    out.put(recover_orphans(Path(directory)))


def test_racing_taps_complete_each_orphan_exactly_once(tmp_path: Path) -> None:
    want = {}
    for n in range(150):
        data = lines(DEAD, range(n * 3, n * 3 + 3))
        (tmp_path / spool_file_name(DEAD, n, tmp=True)).write_bytes(data + b'{"half')
        want[spool_file_name(DEAD, n)] = data
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    args = (str(tmp_path), start, out)
    procs = [ctx.Process(target=_recover_in_process, args=args) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    counts = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert sum(counts) == 150, counts
    assert spool_names(tmp_path) == sorted(want)
    for name, data in want.items():
        assert (tmp_path / name).read_bytes() == data


def test_numbers_are_never_reused_after_a_consumer_deleted_every_file(tmp_path: Path) -> None:
    tap = TrafficTap(tmp_path, node=ALIVE)
    for n in range(3):
        tap.record(event(n, ALIVE))
        tap.flush()
        tap._complete_file()
    tap.close()
    assert spool_names(tmp_path) == [spool_file_name(ALIVE, n) for n in range(3)]
    for name in spool_names(tmp_path):
        (tmp_path / name).unlink()  # Spark committed them and the node deleted them
    again = TrafficTap(tmp_path, node=ALIVE)  # the same id, restarted
    again.record(event(9, ALIVE))
    again.close()
    assert spool_names(tmp_path) == [spool_file_name(ALIVE, 3)]


WRITER = """
import asyncio, sys
from spark.events import TrafficEvent
from spark.tap import TrafficTap

async def main():
    tap = TrafficTap(sys.argv[1], node=sys.argv[2], flush_interval=0.02, rotate_seconds=3600)
    tap.start()
    n = 0
    while True:
        for _ in range(50):
            tap.record(TrafficEvent(f"{sys.argv[2]}-{n}", 1.7e9 + n, sys.argv[2], "origin", "c",
                                    1, 0, 0, 2, False))
            n += 1
        if tap.written and n % 1000 == 0:
            print(tap.written, flush=True)
        await asyncio.sleep(0.005)

asyncio.run(main())
"""


def test_kill_9_mid_write_then_another_id_recovers_every_whole_line(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), DEAD],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        while int(proc.stdout.readline() or 0) < 2000:
            assert time.monotonic() < deadline and proc.poll() is None
        # alive: its open file is locked, nobody takes it
        assert recover_orphans(tmp_path) == 0
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert spool_names(tmp_path) == [spool_file_name(DEAD, 0, tmp=True)]
    tap = TrafficTap(tmp_path, node=NEW)
    tap.record(event(0, NEW))
    tap.close()
    assert tap.recovered == 1
    data = (tmp_path / spool_file_name(DEAD, 0)).read_bytes()
    assert data.endswith(b"\n")
    ids = [json.loads(line)["event_id"] for line in data.splitlines()]
    # whole lines only, in order, none lost before the last flush
    assert ids == [f"{DEAD}-{i}" for i in range(len(ids))] and len(ids) >= 2000


def test_the_seq_file_is_fsynced_with_its_directory(tmp_path: Path, monkeypatch) -> None:
    """Issue 49: ``write_seq`` did not fsync, so a power loss could lose the
    number while the file it numbers survived."""
    from spark import spool_files

    synced: list[str] = []
    fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    spool_files.write_seq(tmp_path, NEW, 7)
    assert (tmp_path / f"{NEW}.seq").read_text() == "7\n"
    assert synced == [str(tmp_path / f".{NEW}.seq.tmp"), str(tmp_path)]


def test_an_unreadable_seq_file_is_said_in_the_log(tmp_path: Path, caplog) -> None:
    """Issue 49: a ``.seq`` that does not read restarted numbering silently;
    numbering goes on above the spool's files, and the log says so."""
    from spark.spool_files import next_number

    (tmp_path / spool_file_name(NEW, 3)).write_bytes(lines(NEW, range(1)))
    (tmp_path / f"{NEW}.seq").write_bytes(b"\x00garbage")
    with caplog.at_level("WARNING", logger="bloomcast.tap"):
        assert next_number(tmp_path, NEW) == 4
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot read {tmp_path / f'{NEW}.seq'} (not a number): file numbers continue above "
        "this writer's files in the spool (4), and a number a consumer already deleted may "
        "be used again"
    ]
    caplog.clear()
    (tmp_path / f"{NEW}.seq").write_bytes(b"12\n")
    assert next_number(tmp_path, NEW) == 12 and not caplog.records
