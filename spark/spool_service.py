"""The node's spool over HTTP: list, read and commit completed files (the protocol is
in :mod:`spark.spool_client`), served on the node's ``--metrics-port`` server.

Offsets: Spark keeps, per node and per writer id, the highest file number it
has read (file numbers of one writer only grow, :mod:`spark.spool_files`). A
writer's files are listed only below its lowest ``.tmp`` (a file still open,
or a crashed writer's file not yet completed), so a file can never appear
below a number a reader has already passed.

Retention: a commit deletes exactly the files Spark's checkpoint holds as
read and applied (each writer's files up to the committed number), nothing
else. Bounded without Spark: the tap stops writing once its files reach
``max_spool_bytes`` (1 GiB), dropping new events and counting them in INFO
``traffic_events_dropped``; a file is never deleted unread.

Nothing here runs on the node's loop: :meth:`SpoolService.answer` is called
in the loop's executor (bloomcast/metrics.py, ``MetricsServer.answer_async``:
a listing is one ``scandir`` and a ``stat`` per file, at most
:data:`LISTING_LIMIT` files listed; a commit one ``scandir`` and the
unlinks), and a file is sent by the HTTP server in bounded chunks, each read
in the executor too (a :class:`~pathlib.Path` body, bloomcast/http_server.py).
A spool directory that cannot be read is counted in the tap's INFO
``traffic_disk_errors`` and logged at most once a minute.
"""

from __future__ import annotations

import json
import math
import os
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

from spark.nodes import read_sidecars
from spark.spool_files import parse_spool_name

if TYPE_CHECKING:
    from spark.tap import TrafficTap

#: files listed at most per ``GET /spool`` (oldest first); a reader asks again
LISTING_LIMIT = 10000
FILES_PREFIX = "/spool/files/"
NDJSON = "application/x-ndjson"

Answer = tuple[str, str, bytes | Path]


def _json(status: str, value: object) -> Answer:
    return status, "application/json", json.dumps(value, sort_keys=True).encode()


class SpoolService:
    """Answers ``/spool`` requests for the spool ``directory``; ``tap``: the node's
    :class:`~spark.tap.TrafficTap`, told when committed files free room."""

    def __init__(self, directory: str | os.PathLike[str], tap: TrafficTap | None = None) -> None:
        self.directory = Path(directory)
        self.tap = tap

    def answer(self, method: str, path: str, query: str) -> Answer:
        """(status line, content type, body) of one request; a Path body is a file."""
        reading = method in ("GET", "HEAD")
        if path == "/spool" and reading:
            return _json("200 OK", self.listing())
        if path.startswith(FILES_PREFIX) and reading:
            name = urllib.parse.unquote(path[len(FILES_PREFIX) :])
            parsed = parse_spool_name(name)
            if parsed is None or parsed[2] or "/" in name or name.startswith("."):
                return "404 Not Found", "text/plain", b"no such spool file\n"
            return "200 OK", NDJSON, self.directory / name
        if path == "/spool/commit":
            if method != "POST":
                return "405 Method Not Allowed", "text/plain", b"POST /spool/commit\n"
            try:
                pairs = urllib.parse.parse_qsl(query, strict_parsing=True)
                positions = {w: int(n) for w, n in pairs}
            except ValueError:
                return "400 Bad Request", "text/plain", b"expected ?<writer id>=<file number>\n"
            return _json("200 OK", {"deleted": self.commit(positions)})
        return "404 Not Found", "text/plain", b"try /spool, /spool/files/<name>, /spool/commit\n"

    def listing(self) -> dict[str, object]:
        """The completed files a reader may take, oldest first (see the module doc)."""
        done: list[tuple[int, str, str, int, int]] = []  # (mtime ms, name, writer, n, size)
        lowest_open: dict[str, int] = {}
        writers: set[str] = set()
        try:
            entries = list(os.scandir(self.directory))
        except OSError as exc:
            self._failed("spool listing", exc)
            entries = []
        for entry in entries:
            parsed = parse_spool_name(entry.name)
            if parsed is None:
                continue
            writer, n, is_open = parsed
            writers.add(writer)
            if is_open:
                lowest_open[writer] = min(n, lowest_open.get(writer, n))
                continue
            try:
                st = entry.stat()
            except OSError:
                continue  # deleted meanwhile
            done.append((st.st_mtime_ns // 1_000_000, entry.name, writer, n, st.st_size))
        done.sort(key=lambda f: (f[0], f[1]))
        takeable = [f for f in done if f[3] < lowest_open.get(f[2], math.inf)][:LISTING_LIMIT]
        return {
            "node": self.tap.node if self.tap is not None else None,
            "files": [[name, size, mtime] for mtime, name, _w, _n, size in takeable],
            "open": sorted([w, n] for w, n in lowest_open.items()),
            "writers": sorted(writers),
            "nodes": read_sidecars(str(self.directory)),
        }

    def _failed(self, cause: str, exc: OSError) -> None:
        if self.tap is not None:
            self.tap.failed(cause, exc)

    def commit(self, positions: dict[str, int]) -> int:
        """Delete each writer's completed files numbered up to ``positions[writer]``."""
        deleted = 0
        names: list[str] = []
        try:
            with os.scandir(self.directory) as entries:
                names = [e.name for e in entries]
        except OSError as exc:
            self._failed("spool commit", exc)
        for name in names:
            parsed = parse_spool_name(name)
            if parsed is None or parsed[2] or parsed[1] > positions.get(parsed[0], -1):
                continue
            try:
                (self.directory / name).unlink()
                deleted += 1
            except FileNotFoundError:
                pass  # deleted meanwhile (another job's commit)
            except OSError as exc:
                self._failed("spool commit", exc)
        if self.tap is not None and deleted:
            self.tap.note_committed(deleted)
        return deleted
