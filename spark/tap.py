"""TrafficTap: the node's traffic events -> NDJSON spool files, never blocking PUBLISH.

The node calls :meth:`TrafficTap.record` once per PUBLISH it handles. ``record``
only samples and appends to an in-memory batch (O(1), no I/O, never raises).
A timer on the node's asyncio loop (``loop.call_later``, no threads) flushes the
batch every ``flush_interval`` seconds with plain ``os.write`` into
``<dir>/<node>-<n>.ndjson.tmp``; a file is renamed to ``<node>-<n>.ndjson`` when
it is complete (``max_file_bytes`` reached, ``rotate_seconds`` elapsed, or
:meth:`close`). ``rename`` is atomic on POSIX within one directory, so a reader
globbing ``*.ndjson`` (the Spark file source) never sees a partial file.

Crash recovery and file naming: :mod:`spark.spool_files`.

Back-pressure is never applied to publishers: when this tap's share of the
spool (its completed files still present + the open file) reaches
``max_spool_bytes``, when the in-memory batch is full, or when a disk write
fails, events are dropped and counted in ``dropped``.

Sampling is decided per event id: ``mmh3(event_id) / 2**32 < sample``. The
origin and every receiver event of one PUBLISH share the event id, so they are
kept or dropped together on every node.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

import mmh3

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

#: events serialised per loop turn by the periodic flush (~10 ms of work)
FLUSH_SLICE_EVENTS = 5_000


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
        self.node = node
        self.address = address  # announced host:port: written to <node>.node.json
        self._sidecar_written = False
        self.written = 0
        self.dropped = 0
        self.files = 0
        self.sampled_out = 0
        self.recovered = 0  # .tmp files a crashed writer left, completed by this tap
        self.committed = 0  # files deleted once Spark committed them (spark.spool_service)
        self._last_scan = 0.0  # time.monotonic() of the last orphan scan
        self._pending: list[TrafficEvent] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
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
                self.dropped += 1
                return
            if self.sample < 1.0 and not sampled(event.event_id, self.sample):
                self.sampled_out += 1
                return
            if (
                self._spool_bytes >= self.max_spool_bytes
                or len(self._pending) >= self.max_buffer_events
            ):
                self.dropped += 1
                return
            if self.node is None:
                self.node = event.node
            self._pending.append(event)
        except Exception:  # the tap must never break PUBLISH
            self.dropped += 1

    def keeps(self, event_id: str) -> bool:
        """Whether sampling keeps the event with this id: a hot path may skip
        building a TrafficEvent that :meth:`record` would discard anyway."""
        return self.sample >= 1.0 or sampled(event_id, self.sample)

    # -- lifecycle --------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start the periodic flush on ``loop`` (default: the running loop)."""
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._schedule()

    def close(self) -> None:
        """Stop the timer, write what is queued, complete (rename) the open file."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
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
        }

    # -- the flush (a loop callback, off the PUBLISH path) ----------------------------

    def _schedule(self) -> None:
        if self._loop is not None and not self._closed:
            self._timer = self._loop.call_later(self.flush_interval, self._tick)

    def _tick(self) -> None:
        try:
            self._flush_slice()
            now = time.monotonic()
            if self._fd is not None and now - self._file_opened >= self.rotate_seconds:
                self._complete_file()
            if now - self._last_scan >= self.rotate_seconds:
                self._last_scan = now
                self.recover_orphans()
        except Exception:  # keep the timer alive whatever happens on disk
            pass
        finally:
            self._schedule()

    def _flush_slice(self) -> None:
        """Write at most ``FLUSH_SLICE_EVENTS``; the rest in a later loop turn
        (``call_soon``), so one flush never holds the loop for long."""
        if len(self._pending) <= FLUSH_SLICE_EVENTS:
            self.flush()
            return
        head = self._pending[:FLUSH_SLICE_EVENTS]
        del self._pending[:FLUSH_SLICE_EVENTS]
        self._write_events(head)
        if self._loop is not None and not self._closed:
            self._loop.call_soon(self._continue_flush)

    def _continue_flush(self) -> None:
        with contextlib.suppress(Exception):  # never raise into the loop
            self._flush_slice()

    def flush(self) -> None:
        """Write every queued event now (rotating by size). Errors become drops."""
        while self._pending:
            batch, self._pending = self._pending, []
            self._write_events(batch)

    def _write_events(self, batch: list[TrafficEvent]) -> None:
        lines: list[bytes] = []
        for event in batch:
            try:
                lines.append(event_line(event))
            except (TypeError, ValueError, AttributeError):
                self.dropped += 1
        self._write_lines(lines)

    def _write_lines(self, lines: list[bytes]) -> None:
        start = 0
        while start < len(lines):
            if self._fd is None and not self._open_file():
                self.dropped += len(lines) - start
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
                self.dropped += len(lines) - start
                return
            if self._write_all(chunk):
                self.written += end - start
                self._file_size += len(chunk)
                self._spool_bytes += len(chunk)
            else:
                self.dropped += end - start
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
        except OSError:
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
        except OSError:
            self._fd = None
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
        except OSError:
            pass  # the statistics then show the id alone; events are unaffected

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
        except OSError:
            pass
        with contextlib.suppress(OSError):
            os.close(fd)
        self._file_size = 0
        self._refresh_spool_bytes()

    def refresh(self) -> None:
        """Re-measure the spool now (a consumer deleted files: room for new events)."""
        self._refresh_spool_bytes()

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
