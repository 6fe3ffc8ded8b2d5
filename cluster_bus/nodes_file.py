"""``--cluster-config-file``: the node's persistent identity, as Redis's nodes.conf.

Redis Cluster keeps a node's id, epochs and every node it knows in nodes.conf
(``clusterLoadConfig`` / ``clusterSaveConfig``): a restarted node has the same
id, so clients' slot maps and peers' state stay valid, and it rejoins the
nodes it knew by itself. bloomcast keeps the same, in the same line format
(CLUSTER NODES lines, then a ``vars`` line):

    <id> <ip:port@cport[,hostname]> myself,master - 0 0 <epoch> connected
    <id> <ip:port@cport[,hostname]> master - 0 0 0 connected
    <id> <ip:port@cport[,hostname]> master,fail - 0 0 0 disconnected
    vars currentEpoch <epoch> lastVoteEpoch 0 incarnation <n>

(``fail``: a lost node; ``incarnation``, bloomcast's, is the SWIM incarnation
a restart continues from, above any suspicion of the old life.) The lines
hold no times, link states or slots, so the file is rewritten only when the
set of nodes or an address changes.

- Written atomically: a temporary file in the same directory, fsync, rename
  over the old one, fsync of the directory, so a crash leaves the old file
  or the new one, never half of one.
- Written off the event loop (issue 41): :meth:`NodesFile.save`, called from
  the bus's tick, only renders the text and, when it changed, hands it to the
  file's writer thread, which writes the newest text it was given (one
  write in flight, at most one waiting: a text that came while the disk was
  slow replaces the waiting one, since each is the whole state). A failed
  write is counted (``failures``), logged at most once a minute
  (:class:`cluster_bus.refusals.Refusals`) and retried with the next save;
  :meth:`NodesFile.close` waits for the last one.
- Locked: a node holds an exclusive ``flock`` on ``<file>.lock`` for its whole
  life, so two nodes never share one identity (Redis locks nodes.conf the
  same way: "Sorry, the cluster configuration file ... is already used by a
  different Redis Cluster node").
- Read at start: the id is reused, and every other node in the file becomes a
  lost node of the bus (cluster_bus.membership): redialled until it answers,
  counted in ``cluster_state`` meanwhile. A node's forwarding sessions are not
  kept: its peers see a new ``boot`` in the handshake and start new ones (the
  old life's subscribers are gone with it; cluster_bus.forwarding).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cluster_bus.membership import Membership
from cluster_bus.nodes import LostNode, NodeRecord
from cluster_bus.refusals import Refusals

log = logging.getLogger("bloomcast.bus")

#: seconds close() waits for the writer thread's last write
CLOSE_TIMEOUT = 10.0

_LINE = re.compile(
    r"^(?P<id>[0-9a-f]{40}) (?P<host>[^ ]*):(?P<port>\d+)@(?P<bus>\d+)(?:,(?P<name>[^ ]*))? "
    r"(?P<flags>[^ ]+) "
)


class NodesFileError(Exception):
    """The file cannot be used: locked by another node, unreadable, malformed.
    The message is one line naming the file (a CLI error)."""


@dataclass(frozen=True, slots=True)
class SavedNode:
    node_id: str
    host: str
    client_port: int
    bus_port: int
    hostname: str = ""


@dataclass
class NodesConfig:
    """What a nodes file holds: this node's id and epoch, the other nodes."""

    my_id: str
    epoch: int = 0
    nodes: list[SavedNode] = field(default_factory=list)
    incarnation: int = 0


class NodesFile:
    """One node's ``--cluster-config-file``: :meth:`open` locks it (for the
    process's life) and reads it, :meth:`save` has it replaced atomically by
    its writer thread (module doc). ``saves``: texts written, ``failures``:
    writes that failed."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None
        self._last: str | None = ""  # the text last handed over (None: write again)
        self._changed = threading.Condition()
        self._wanted: str | None = None  # the newest text not yet being written
        self._writing = False
        self._closing = False
        self._thread: threading.Thread | None = None
        self.saves = 0
        self.failures = 0
        #: given the milliseconds each save's two fsyncs took, in the writer
        #: thread (the node's latency monitor: ``nodes-file-fsync``)
        self.on_saved: Callable[[float], None] | None = None
        self._warnings = Refusals(logger=log)

    def open(self) -> NodesConfig | None:
        """Lock the file and read it; None when it does not exist yet."""
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise NodesFileError(f"cannot open {lock}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise NodesFileError(
                f"Sorry, the cluster configuration file {self.path} is already used by a "
                "different bloomcast node. Please make sure that different nodes use "
                "different cluster configuration files."
            ) from None
        self._lock_fd = fd
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise NodesFileError(f"cannot read {self.path}: {exc.strerror}") from None
        self._last = text
        return parse(text, str(self.path))

    def save(self, ms: Membership, epoch: int) -> bool:
        """Have this node, the peers it knows and the ones it lost written (see
        the module docstring), unless nothing changed. True when handed to the
        writer thread; never waits on the disk."""
        text = render(ms, epoch)
        if text == self._last:
            return False
        self._last = text
        with self._changed:
            self._wanted = text
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="bloomcast-nodes-file", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every text handed over is written (or failed); False on
        timeout."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self._wanted is None and not self._writing, timeout
            )

    def close(self) -> None:
        """Write what is waiting (at most :data:`CLOSE_TIMEOUT` s), stop the
        writer thread, release the lock."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(CLOSE_TIMEOUT)
            self._thread = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def _run(self) -> None:
        """The writer thread: the newest text, until closed with none waiting."""
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._wanted is not None or self._closing)
                text, self._wanted = self._wanted, None
                if text is None:
                    return
                self._writing = True
            try:
                fsync_ms = self._write(text)
                self.saves += 1
                self._saved(fsync_ms)
            except OSError as exc:  # the node keeps running (Redis's clusterSaveConfigOrDie exits)
                self.failures += 1
                self._last = None  # the next save hands the text over again
                self._warnings.warn(
                    "save", str(self.path), f"could not save {self.path}: {exc.strerror or exc}"
                )
            finally:
                with self._changed:
                    self._writing = False
                    self._changed.notify_all()

    def _saved(self, fsync_ms: float) -> None:
        """Tell :attr:`on_saved`; whatever it raises is logged, never the
        end of the writer thread."""
        if self.on_saved is None:
            return
        try:
            self.on_saved(fsync_ms)
        except Exception as exc:  # (the thread must keep saving)
            self._warnings.warn("on_saved", type(exc).__name__, f"nodes file callback: {exc!r}")

    def _write(self, text: str) -> float:
        """Replace the file with ``text`` (module doc); returns the
        milliseconds its two fsyncs took (each timed alone, so the time the
        thread waits for the interpreter between file calls is not in it)."""
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            ms = _timed_fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            ms += _timed_fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return ms


def _timed_fsync(fd: int) -> float:
    """``fsync(fd)``; the milliseconds it took."""
    start = time.perf_counter()
    os.fsync(fd)
    return (time.perf_counter() - start) * 1000


def _address(n: NodeRecord | LostNode) -> str:
    text = f"{n.host}:{n.client_port}@{n.bus_port}"
    hostname = n.hostname if isinstance(n, NodeRecord) else ""
    return f"{text},{hostname}" if hostname else text


def render(ms: Membership, epoch: int) -> str:
    """The file's text for this membership (no times: stable between changes)."""
    me = ms.myself
    lines = [f"{me.node_id} {_address(me)} myself,master - 0 0 {epoch} connected"]
    for rec in sorted(ms.peers.values(), key=lambda r: r.node_id):
        lines.append(f"{rec.node_id} {_address(rec)} master - 0 0 0 connected")
    for gone in sorted(ms.lost.values(), key=lambda g: g.node_id):
        lines.append(f"{gone.node_id} {_address(gone)} master,fail - 0 0 0 disconnected")
    lines.append(f"vars currentEpoch {epoch} lastVoteEpoch 0 incarnation {me.incarnation}")
    return "\n".join(lines) + "\n"


def parse(text: str, where: str = "nodes file") -> NodesConfig:
    """The id, epoch and nodes of a nodes file (NodesFileError naming the line)."""
    my_id = None
    epoch = incarnation = 0
    nodes = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("vars "):
            words = line.split()[1:]
            values = dict(zip(words[::2], words[1::2], strict=False))
            try:
                epoch = int(values.get("currentEpoch", "0"))
                incarnation = int(values.get("incarnation", "0"))
            except ValueError:
                raise NodesFileError(f"{where}:{number}: bad vars line") from None
            continue
        m = _LINE.match(line)
        if m is None:
            raise NodesFileError(f"{where}:{number}: not a node line: {line[:60]!r}")
        flags = m["flags"].split(",")
        if "handshake" in flags:
            continue
        if "myself" in flags:
            my_id = m["id"]
            continue
        nodes.append(SavedNode(m["id"], m["host"], int(m["port"]), int(m["bus"]), m["name"] or ""))
    if my_id is None:
        raise NodesFileError(f"{where}: no line with the myself flag")
    return NodesConfig(my_id, epoch, nodes, incarnation)
