"""TrafficTap: the node's traffic events -> NDJSON spool files, never blocking PUBLISH.

The node calls :meth:`TrafficTap.record` once per PUBLISH it handles. ``record``
only samples and appends to an in-memory batch (O(1), no I/O, never raises).
A timer on the node's asyncio loop hands the batch every ``flush_interval``
seconds to the tap's writer thread (one thread, one batch at a time), which
serialises it and writes it with plain ``os.write`` into
``<dir>/<node>-<n>.ndjson.tmp``; a file is renamed to ``<node>-<n>.ndjson`` when
it is complete (``max_file_bytes`` reached, ``rotate_seconds`` elapsed, or
:meth:`close`). ``rename`` is atomic on POSIX within one directory, so a reader
globbing ``*.ndjson`` (the Spark file source) never sees a partial file. Every
file operation (writes, renames, the orphan scans, measuring the spool) runs
in that thread: the event loop never waits on the disk (issue 41).

Crash recovery and file naming: :mod:`spark.spool_files`. The ``.tmp`` files a
killed writer left are completed by the writer thread as soon as the tap
starts (:meth:`TrafficTap.start`), then every ``rotate_seconds``, traffic or
not (issue 49).

Back-pressure is never applied to publishers: when this tap's share of the
spool (its completed files still present + the open file) reaches
``max_spool_bytes``, when the in-memory batch is full (``max_buffer_events``
events or ``max_buffer_bytes`` of their strings: a disk slower than the
traffic, the writer still busy with the last batch), or when a disk write
fails, events are dropped and counted in ``dropped``. The writer turns a
batch into lines :data:`SERIALISE_BYTES` at a time, so the escaped lines
(up to 6 bytes per channel byte) never sit whole in memory either.
A failed disk operation is counted in ``disk_errors`` and logged at most once
a minute per cause (:class:`netutil.rate_limited_log.RateLimitedLog`); anything else
that goes wrong in the tap in ``errors``, logged the same way: an exception
in the writer thread ends that batch's job, never the thread.

Shutdown (:meth:`TrafficTap.aclose`) hands the last batch to the writer thread
and waits at most a given time with the loop free (a second SIGINT can act);
a disk that does not answer by then loses that batch, counted and logged.

Sampling is decided per event id: ``mmh3(event_id) / 2**32 < sample``. The
origin and every receiver event of one PUBLISH share the event id, so they are
kept or dropped together on every node.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import mmh3

from netutil.rate_limited_log import RateLimitedLog
from spark.events import TrafficEvent
from spark.spool_files import (
    create_locked,
    next_number,
    recover_orphans,
    spool_file_name,
    write_seq,
    writer_bytes,
)

__all__ = ["TrafficTap", "event_line", "sampled", "spool_file_name"]

_BOOL = ("false", "true")
_encode_str = json.encoder.encode_basestring

DEFAULT_MAX_FILE_BYTES = 8 * 1024 * 1024
DEFAULT_ROTATE_SECONDS = 5.0
DEFAULT_MAX_SPOOL_BYTES = 1024 * 1024 * 1024
DEFAULT_MAX_BUFFER_EVENTS = 200_000
DEFAULT_MAX_BUFFER_BYTES = 64 * 1024 * 1024
#: what one queued event costs beyond its strings (the object, the list slot)
EVENT_OVERHEAD = 160
#: bytes of lines the writer builds before writing them
SERIALISE_BYTES = 1024 * 1024

log = logging.getLogger("bloomcast.tap")


def sampled(event_id: str, sample: float) -> bool:
    """True when the event with this id is kept at sampling rate ``sample`` (0..1).

    Deterministic in ``event_id`` (MurmurHash3 x86 32-bit, unsigned), so every
    node makes the same choice for one PUBLISH.
    """
    if sample >= 1.0:
        return True
    if sample <= 0.0:
        return False
    return mmh3.hash(event_id, signed=False) < sample * 4294967296.0


def event_line(event: TrafficEvent) -> bytes:
    """One NDJSON line (with the trailing newline) for ``event``, keys in schema order.

    Formatted by hand rather than through ``json.dumps(dict)``: the flush runs on
    the node's loop, and this is ~4x cheaper. Strings go through the json
    module's own (C) string encoder, so the line is JSON that
    :meth:`TrafficEvent.from_dict` (and Spark's ``from_json``) reads back.
    """
    s = _encode_str
    return (
        f'{{"event_id":{s(event.event_id)},"time":{float(event.time)!r},'
        f'"node":{s(event.node)},"role":{s(event.role)},"channel":{s(event.channel)},'
        f'"bytes":{int(event.bytes)},"receivers":{int(event.receivers)},'
        f'"forwarded":{int(event.forwarded)},"peers":{int(event.peers)},'
        f'"false_positive":{_BOOL[bool(event.false_positive)]},'
        f'"shard":{_BOOL[bool(event.shard)]}}}\n'
    ).encode()


class TrafficTap:
    """Batches traffic events into rotated, atomically renamed NDJSON files.

    ``directory``: the spool (created if missing). ``sample``: share of
    PUBLISH events kept, 0..1. ``max_file_bytes``/``rotate_seconds``: a file is
    completed when it reaches this size or age. ``max_spool_bytes``: this tap's
    files (completed ones still present + the open one) may not grow beyond it;
    a consumer that deletes processed files frees room. ``flush_interval``:
    seconds between flushes. ``node``: the node id used in file names (default:
    the ``node`` field of the first event recorded). ``address``: the node's
    announced ``host:port``; when given, the tap writes ``<node>.node.json``
    next to its files with its first file (:mod:`spark.nodes`).

    Counters (for INFO): ``written`` events written to disk, ``dropped`` events
    lost to a limit or a disk error, ``files`` completed files, ``sampled_out``
    events skipped by sampling.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        sample: float = 1.0,
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        rotate_seconds: float = DEFAULT_ROTATE_SECONDS,
        max_spool_bytes: int = DEFAULT_MAX_SPOOL_BYTES,
        flush_interval: float = 0.2,
        max_buffer_events: int = DEFAULT_MAX_BUFFER_EVENTS,
        max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
        node: str | None = None,
        address: str | None = None,
    ) -> None:
        if not 0.0 <= sample <= 1.0:
            raise ValueError("traffic sample must be between 0 and 1")
        if max_file_bytes <= 0 or rotate_seconds <= 0 or flush_interval <= 0:
            raise ValueError("max_file_bytes, rotate_seconds, flush_interval must be > 0")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.sample = sample
        self.max_file_bytes = max_file_bytes
        self.rotate_seconds = rotate_seconds
        self.max_spool_bytes = max_spool_bytes
        self.flush_interval = flush_interval
        self.max_buffer_events = max_buffer_events
        self.max_buffer_bytes = max_buffer_bytes
        self._pending_bytes = 0  # strings of the events in _pending, + EVENT_OVERHEAD each
        self.node = node
        self.address = address  # announced host:port: written to <node>.node.json
        self._sidecar_written = False
        self.written = 0
        self._dropped_queued = 0  # by record() (the loop): a limit, or closed
        self._dropped_disk = 0  # by the writer: a failed write, no room, a bad event
        self.files = 0
        self.sampled_out = 0
        self.recovered = 0  # .tmp files a crashed writer left, completed by this tap
        self.committed = 0  # files deleted once Spark committed them (spark.spool_service)
        self._last_scan = 0.0  # time.monotonic() of the last orphan scan
        self._pending: list[TrafficEvent] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        # the writer thread (start()) and the batch it is writing
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._job: concurrent.futures.Future[None] | None = None
        self._remeasure = False  # a consumer deleted files: measure the spool again
        self.disk_errors = 0
        self.errors = 0
        self._warnings = RateLimitedLog(logger=log)
        self._warn_lock = threading.Lock()
        self._next_n: int | None = None  # next file number, found on first open
        self._fd: int | None = None
        self._file_n = 0
        self._file_size = 0  # bytes confirmed written to the open file
        self._file_opened = 0.0  # time.monotonic() when the open file was created
        self._done_bytes = 0  # completed files of this tap still in the spool
        self._spool_bytes = 0  # _done_bytes + _file_size, checked by record()

    # -- the PUBLISH path -------------------------------------------------------------

    def record(self, event: TrafficEvent) -> None:
        """Queue one event. O(1), no I/O, never blocks, never raises."""
        try:
            if self._closed:
                self._dropped_queued += 1
                return
            if self.sample < 1.0 and not sampled(event.event_id, self.sample):
                self.sampled_out += 1
                return
            size = len(event.channel) + len(event.event_id) + len(event.node) + EVENT_OVERHEAD
            if (
                self._spool_bytes >= self.max_spool_bytes
                or len(self._pending) >= self.max_buffer_events
                or self._pending_bytes + size > self.max_buffer_bytes
            ):
                self._dropped_queued += 1
                return
            if self.node is None:
                self.node = event.node
            self._pending.append(event)
            self._pending_bytes += size
        except Exception as exc:  # the tap must never break PUBLISH: counted, logged
            self._dropped_queued += 1
            self.failed("record", exc)

    @property
    def dropped(self) -> int:
        """Events lost: to a limit, a closed tap, a failed write or a bad event."""
        return self._dropped_queued + self._dropped_disk

    def keeps(self, event_id: str) -> bool:
        """Whether sampling keeps the event with this id: a hot path may skip
        building a TrafficEvent that :meth:`record` would discard anyway."""
        return self.sample >= 1.0 or sampled(event_id, self.sample)

    # -- lifecycle --------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start the periodic flush on ``loop`` (default: the running loop), its
        batches written by the tap's writer thread."""
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "bloomcast-tap")
        # a killed writer's .tmp completed now, not at the first event (issue 49)
        self._submit(self._start_job)
        self._schedule()

    def _start_job(self) -> None:
        """(In the writer thread.) The orphan scan, and the spool measured."""
        self._last_scan = time.monotonic()
        self.recover_orphans()
        self._refresh_spool_bytes()

    def _submit(self, work: Callable[..., None], *args: object) -> concurrent.futures.Future[None]:
        assert self._executor is not None
        job = self._executor.submit(work, *args)
        self._job = job
        job.add_done_callback(self._job_done)
        return job

    def close(self) -> None:
        """Stop the timer, write what is queued, complete (rename) the open file.
        It waits for the writer thread: the one call that does (shutdown)."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
        self._complete_file()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    async def aclose(self, timeout: float) -> bool:
        """:meth:`close` for the node's loop: the last batch written and the open
        file completed by the writer thread, waited for at most ``timeout``
        seconds with the loop free. False when the disk did not answer in
        time: that batch is counted dropped and logged, the thread left behind."""
        if self._closed:
            return True
        if self._executor is None:
            self.close()
            return True
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending, self._pending_bytes = self._pending, [], 0
        job = self._submit(self._final_job, batch)
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(job)), timeout)
        except TimeoutError:
            self._dropped_queued += len(batch)
            with self._warn_lock:  # the writer thread may count meanwhile
                self.errors += 1
            log.warning(
                "traffic tap: the disk did not answer in %g s at shutdown: "
                "%d events not written, %s left as .tmp (completed by the next start)",
                timeout,
                len(batch),
                self.directory,
            )
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
            return False
        self._executor.shutdown(wait=True)
        self._executor = None
        return True

    def _final_job(self, batch: list[TrafficEvent]) -> None:
        """(In the writer thread.) The last batch, then the open file completed."""
        self._write_events(batch)
        self._complete_file()

    def info_fields(self) -> dict[str, int]:
        """Counters for the node's INFO output."""
        return {
            "traffic_events_written": self.written,
            "traffic_events_dropped": self.dropped,
            "traffic_events_sampled_out": self.sampled_out,
            "traffic_files": self.files,
            "traffic_files_recovered": self.recovered,
            "traffic_files_committed": self.committed,
            "traffic_spool_bytes": self._spool_bytes,
            "traffic_events_pending": len(self._pending),
            "traffic_events_pending_bytes": self._pending_bytes,
            "traffic_disk_errors": self.disk_errors,
            "traffic_errors": self.errors,
        }

    # -- the flush: the loop hands batches to the writer thread ---------------------

    def _schedule(self) -> None:
        if self._loop is not None and not self._closed:
            self._timer = self._loop.call_later(self.flush_interval, self._tick)

    def _tick(self) -> None:
        """A batch for the writer thread, unless it is still writing the last
        one (the disk is slower than the traffic): then the events wait in
        the batch, bounded by ``max_buffer_events``, and the next tick tries
        again."""
        self._timer = None
        try:
            executor = self._executor
            if executor is not None and (self._job is None or self._job.done()):
                batch, self._pending, self._pending_bytes = self._pending, [], 0
                self._submit(self._write_job, batch, time.monotonic())
        except Exception as exc:  # keep the timer alive whatever happens
            self.failed("tick", exc)
        finally:
            self._schedule()

    def _job_done(self, job: concurrent.futures.Future[None]) -> None:
        """A batch that raised is counted and logged (in the writer thread, or
        on the loop when the job was already done)."""
        if not job.cancelled() and job.exception() is not None:
            self.failed("writer", job.exception())  # type: ignore[arg-type]

    def _write_job(self, batch: list[TrafficEvent], now: float) -> None:
        """(In the writer thread.) One batch written, then what is due: the
        spool measured again after a commit, the open file completed by age,
        the orphan scan."""
        self._write_events(batch)
        if self._remeasure:
            self._remeasure = False
            self._refresh_spool_bytes()
        if self._fd is not None and now - self._file_opened >= self.rotate_seconds:
            self._complete_file()
        if now - self._last_scan >= self.rotate_seconds:
            self._last_scan = now
            self.recover_orphans()

    def _wait_writer(self) -> None:
        """Until the writer thread is idle (the caller then writes itself)."""
        job = self._job
        if job is not None:
            concurrent.futures.wait([job])

    def flush(self) -> None:
        """Write every queued event now, in the calling thread (rotating by size),
        once the writer thread is idle. Errors become drops. (The node calls it
        only at shutdown, through :meth:`close`.)"""
        self._wait_writer()
        while self._pending:
            batch, self._pending, self._pending_bytes = self._pending, [], 0
            self._write_events(batch)
        if self._remeasure:
            self._remeasure = False
            self._refresh_spool_bytes()

    def failed(self, cause: str, exc: BaseException) -> None:
        """Count a failure (``disk_errors`` for an OSError, else ``errors``) and
        log it, at most once a minute per cause. Either thread may call it."""
        with self._warn_lock:
            if isinstance(exc, OSError):
                self.disk_errors += 1
            else:
                self.errors += 1
            self._warnings.warn(
                cause, str(self.directory), f"traffic tap: {cause} in {self.directory}: {exc!r}"
            )

    def _write_events(self, batch: list[TrafficEvent]) -> None:
        """``batch`` written; whatever an unexpected exception leaves unwritten is
        counted dropped before it propagates (to :meth:`_job_done`: counted, logged)."""
        before = self.written + self._dropped_disk
        try:
            self._serialise_and_write(batch)
        except Exception:
            self._dropped_disk += len(batch) - (self.written + self._dropped_disk - before)
            raise

    def _serialise_and_write(self, batch: list[TrafficEvent]) -> None:
        """Lines written :data:`SERIALISE_BYTES` at a time (never the whole batch's)."""
        lines: list[bytes] = []
        size = 0
        for event in batch:
            try:
                line = event_line(event)
            except (TypeError, ValueError, AttributeError) as exc:
                self._dropped_disk += 1
                self.failed("event", exc)
                continue
            lines.append(line)
            size += len(line)
            if size >= SERIALISE_BYTES:
                self._write_lines(lines)
                lines, size = [], 0
        self._write_lines(lines)

    def _write_lines(self, lines: list[bytes]) -> None:
        start = 0
        while start < len(lines):
            if self._fd is None and not self._open_file():
                self._dropped_disk += len(lines) - start
                return
            room = self.max_file_bytes - self._file_size
            if self._file_size and len(lines[start]) > room:
                self._complete_file()
                continue
            # take lines until the file would pass max_file_bytes (at least one line)
            end, size = start, 0
            while end < len(lines) and (end == start or size + len(lines[end]) <= room):
                size += len(lines[end])
                end += 1
            chunk = b"".join(lines[start:end])
            if self._spool_bytes + len(chunk) > self.max_spool_bytes:
                self._dropped_disk += len(lines) - start
                return
            if self._write_all(chunk):
                self.written += end - start
                self._file_size += len(chunk)
                self._spool_bytes += len(chunk)
            else:
                self._dropped_disk += end - start
                self._complete_file()
            start = end
            if self._fd is not None and self._file_size >= self.max_file_bytes:
                self._complete_file()

    def _write_all(self, data: bytes) -> bool:
        assert self._fd is not None
        view = memoryview(data)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            return True
        except OSError as exc:
            self.failed("write", exc)
            # cut the partial batch so the file holds whole lines only
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._file_size)
            return False

    def _open_file(self) -> bool:
        if self.node is None:
            self.node = "node"
        try:
            if self._next_n is None:
                self._next_n = self._recover()
            self._file_n = self._next_n
            self._next_n += 1
            write_seq(self.directory, self.node, self._next_n)
            self._fd = create_locked(
                self.directory / spool_file_name(self.node, self._file_n, tmp=True)
            )
        except OSError as exc:
            self._fd = None
            self.failed("open", exc)
            return False
        self._file_size = 0
        self._file_opened = time.monotonic()
        if self.address and not self._sidecar_written:
            self._write_sidecar()
        return True

    def _write_sidecar(self) -> None:
        """``<node>.node.json``: the node id's address, for ``stats top`` (spark.nodes)."""
        from spark.nodes import write_sidecar

        assert self.node is not None and self.address is not None
        try:
            write_sidecar(self.directory, self.node, self.address)
            self._sidecar_written = True
        except OSError as exc:  # the statistics then show the id alone; events are unaffected
            self.failed("sidecar", exc)

    def _complete_file(self) -> None:
        """Close the open file and rename ``.tmp`` -> ``.ndjson`` (or remove it if empty)."""
        if self._fd is None or self.node is None:
            return
        fd, self._fd = self._fd, None
        tmp = self.directory / spool_file_name(self.node, self._file_n, tmp=True)
        try:  # renamed (or removed) while the lock is held: no other tap claims it meanwhile
            if self._file_size == 0:
                tmp.unlink()
            else:
                os.rename(tmp, self.directory / spool_file_name(self.node, self._file_n))
                self.files += 1
        except OSError as exc:  # left as .tmp: the next orphan scan completes it
            self.failed("rename", exc)
        with contextlib.suppress(OSError):
            os.close(fd)
        self._file_size = 0
        self._refresh_spool_bytes()

    def refresh(self) -> None:
        """A consumer deleted files (room for new events): the writer thread
        measures the spool again with its next batch."""
        self._remeasure = True

    def note_committed(self, deleted: int) -> None:
        """``deleted`` files Spark committed were deleted (:mod:`spark.spool_service`,
        from any thread): counted on the loop, and the spool measured again."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._add_committed(deleted)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._add_committed, deleted)

    def _add_committed(self, deleted: int) -> None:
        self.committed += deleted
        self.refresh()

    def _refresh_spool_bytes(self) -> None:
        """Re-measure this tap's completed files (a consumer may have deleted some)."""
        total = writer_bytes(self.directory, self.node)
        self._done_bytes = self._done_bytes if total is None else total
        self._spool_bytes = self._done_bytes + self._file_size

    def _recover(self) -> int:
        """Complete the ``.tmp`` files crashed writers left (:meth:`recover_orphans`) and
        return the next free number of this node id (:func:`next_number`)."""
        self.recover_orphans()
        self._refresh_spool_bytes()
        assert self.node is not None
        return next_number(self.directory, self.node)

    def recover_orphans(self) -> int:
        """Complete every ``.tmp`` in the spool whose writer is gone, whatever its node
        id (:func:`spark.spool_files.recover_orphans`); returns how many. Never raises."""
        own = None
        if self.node is not None and self._fd is not None:
            own = spool_file_name(self.node, self._file_n, tmp=True)
        done = recover_orphans(self.directory, own)
        self.recovered += done
        return done
