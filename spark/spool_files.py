"""Spool file names, and completing the ``.tmp`` a crashed writer left.

Names: ``<node>-<n:08d>.ndjson.tmp`` while its tap writes it,
``<node>-<n:08d>.ndjson`` once complete (an atomic rename within one
directory), ``<node>.seq`` the writer's next file number, ``<node>.node.json``
its address (:mod:`spark.nodes`).

Crash recovery (any writer, once): the tap holds an exclusive ``flock`` on
its open ``.tmp`` from its creation (made under a hidden name, locked, then
renamed into place) until it is renamed, so the lock is free only once its
writer is gone; the kernel drops it when a process dies, kill -9 included.
Every ``rotate_seconds`` (and before its first file) a tap claims each
``.tmp`` in its spool whose lock it can take, whatever node id wrote it: it
checks the name still points at the file it locked, cuts it to whole lines
and renames it to ``.ndjson`` while holding the lock. Two taps sharing a spool
can both try; one wins, the other finds the name gone. The completed file
keeps its writer's name, so a reader that saw it once sees the same name.
File numbers are never reused: ``<node>.seq`` holds the next number (written
before each file is created), so a node that restarts with its id after a
consumer deleted every file it wrote continues above them.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from pathlib import Path

log = logging.getLogger("bloomcast.tap")

_FILE_RE = re.compile(r"^(?P<node>.+)-(?P<n>\d+)\.ndjson(?P<tmp>\.tmp)?$")
SEQ_SUFFIX = ".seq"
#: bytes read per step when looking for the last whole line of a crashed file
_TAIL_CHUNK = 65536


def spool_file_name(node: str, n: int, *, tmp: bool = False) -> str:
    """``<node>-<n>.ndjson`` (``n`` zero-padded to 8 digits so names sort), ``.tmp`` if open."""
    return f"{node}-{n:08d}.ndjson" + (".tmp" if tmp else "")


def parse_spool_name(name: str) -> tuple[str, int, bool] | None:
    """(writer node id, file number, still open) of a spool file name, else None."""
    m = _FILE_RE.match(name)
    return (m["node"], int(m["n"]), bool(m["tmp"])) if m else None


def whole_lines_end(fd: int, size: int) -> int:
    """Offset just past the last newline of the first ``size`` bytes of ``fd`` (0: none),
    read backwards in bounded chunks."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        chunk = os.pread(fd, end - start, start)
        at = chunk.rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def claim_orphan(path: Path) -> bool | None:
    """Complete ``path`` (a ``.tmp``) if no live writer holds its lock: cut it to whole
    lines and rename it to ``.ndjson`` (or remove it when it holds none), under the
    lock. True: completed, False: removed, None: locked, gone, or not ours to take."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # its writer is alive (or another tap is completing it)
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except OSError:
            return None  # completed by another tap since we opened it
        if not same:
            return None
        size = os.fstat(fd).st_size
        cut = whole_lines_end(fd, size)
        if cut == 0 or not path.name.endswith(".tmp"):
            os.unlink(path)
            return False
        if cut < size:
            os.ftruncate(fd, cut)
        os.rename(path, path.with_name(path.name[: -len(".tmp")]))
        return True
    except OSError:
        return None
    finally:
        os.close(fd)


def create_locked(path: Path) -> int:
    """Open a new ``path`` for appending, already locked: made under a hidden name,
    ``flock``-ed, then renamed, so no other tap ever finds it unlocked while its
    writer lives. The lock goes with the descriptor (closed: released)."""
    hidden = path.with_name(f".{path.name}.new")
    fd = os.open(hidden, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(hidden, path)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            hidden.unlink()
        raise
    return fd


def write_seq(directory: Path, node: str, n: int) -> None:
    """``<node>.seq`` = ``n``, the writer's next file number: written, fsynced,
    renamed into place and the directory fsynced, so after a power loss the
    number is there before the file it numbers (issue 49)."""
    tmp = directory / f".{node}{SEQ_SUFFIX}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"%d\n" % n)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, directory / f"{node}{SEQ_SUFFIX}")
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def next_number(directory: Path, node: str) -> int:
    """The next file number of writer ``node``: above each of its files still in the
    spool, and at least ``<node>.seq`` (so numbers are never reused)."""
    highest = -1
    with os.scandir(directory) as entries:
        for entry in entries:
            parsed = parse_spool_name(entry.name)
            if parsed is not None and parsed[0] == node:
                highest = max(highest, parsed[1])
    seq = 0
    path = directory / f"{node}{SEQ_SUFFIX}"
    try:
        seq = int(path.read_bytes())
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:  # not silently: numbers may be used again
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a number"
        log.warning(
            "cannot read %s (%s): file numbers continue above this writer's files in the "
            "spool (%d), and a number a consumer already deleted may be used again",
            path,
            why,
            highest + 1,
        )
    return max(highest + 1, seq)


def writer_bytes(directory: Path, node: str | None) -> int | None:
    """Bytes of writer ``node``'s completed files in the spool (None: unreadable)."""
    total = 0
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                parsed = parse_spool_name(entry.name)
                if parsed is not None and parsed[0] == node and not parsed[2]:
                    with contextlib.suppress(OSError):
                        total += entry.stat().st_size
    except OSError:
        return None
    return total


def recover_orphans(directory: Path, skip: str | None = None) -> int:
    """Complete every ``.tmp`` in ``directory`` whose writer is gone, whatever its node
    id (:func:`claim_orphan`), and remove the hidden file a writer died creating;
    ``skip``: the caller's own open file. Returns how many files were completed."""
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries]
    except OSError:
        return 0
    done = 0
    for name in names:
        if name.startswith(".") and name.endswith(".ndjson.tmp.new"):
            claim_orphan(directory / name)  # unlocked: its writer died before writing
            continue
        parsed = parse_spool_name(name)
        if parsed is not None and parsed[2] and name != skip and claim_orphan(directory / name):
            done += 1
    return done
