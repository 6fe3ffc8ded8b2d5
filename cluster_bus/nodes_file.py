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
  (:class:`netutil.rate_limited_log.RateLimitedLog`) and retried with the next save;
  :meth:`NodesFile.close` waits for the last one.
- Locked: a node holds an exclusive ``flock`` on ``<file>.lock`` for its whole
  life, so two nodes never share one identity (Redis locks nodes.conf the
  same way: "Sorry, the cluster configuration file ... is already used by a
  different Redis Cluster node").
- Read strictly (issue 49): a line the writer could not have written (not
  eight fields, an address or hostname that fails the checks every address
  from outside passes, a second ``myself`` line, a node twice) is refused
  with its reason in the log and counted (CLUSTER INFO
  ``cluster_nodes_file_lines_refused``); the rest loads. What a node writes
  always reads back: every value it holds passed those checks where it
  entered (gossip, ``--join``, CLUSTER MEET, the announce flags).
- Read at start: the id is reused, and every other node in the file becomes a
  lost node of the bus (cluster_bus.membership): redialled until it answers,
  counted in ``cluster_state`` meanwhile. A node's forwarding sessions are not
  kept: its peers see a new ``boot`` in the handshake and start new ones (the
  old life's subscribers are gone with it; cluster_bus.forwarding).
"""

from __future__ import annotations

import contextlib
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
from netutil.addresses import address_error, hostname_error
from netutil.rate_limited_log import RateLimitedLog

log = logging.getLogger("bloomcast.bus")

#: seconds close() waits for the writer thread's last write
CLOSE_TIMEOUT = 10.0

_ID = re.compile(r"[0-9a-f]{40}")
_ADDRESS = re.compile(
    r"(?P<host>[^ ,@]*):(?P<port>\d{1,5})@(?P<bus>\d{1,5})(?:,(?P<name>[^ ,@]*))?"
)
#: Redis's node flag names (CLUSTER NODES)
_FLAGS = frozenset(
    {"myself", "master", "slave", "fail?", "fail", "handshake", "noaddr", "nofailover", "noflags"}
)
_STATES = ("connected", "disconnected")
_NUMBER = re.compile(r"[0-9]{1,20}")
#: refused lines logged one by one at load; the rest are counted in one line
LOGGED_REJECTS = 10


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
    #: lines refused at load (each logged with its reason: :func:`parse`)
    rejected: int = 0


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
        self._warnings = RateLimitedLog(logger=log)

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
        try:  # (bytes no UTF-8 decoder takes stay, and fail the line checks)
            text = self.path.read_bytes().decode("utf-8", "surrogateescape")
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
            except Exception as exc:  # the node keeps running (Redis's SaveConfigOrDie exits)
                # any error, not only the disk's (issue 49: a UnicodeEncodeError
                # ended the thread, and every later save was silently lost)
                self.failures += 1
                self._last = None  # the next save hands the text over again
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
                self._warnings.warn("save", str(self.path), f"could not save {self.path}: {why}")
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
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                ms = _timed_fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()  # no half-written temporary file left behind
            raise
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


def _node_line(line: str) -> tuple[SavedNode, list[str]] | str:
    """One node line -> (the node, its flags), or why it is refused: exactly
    the eight fields :func:`render` writes, an id of 40 hex digits, ports
    0..65535, Redis's flag names, and an address and hostname that pass the
    checks every address from outside passes (:mod:`netutil.addresses`)."""
    words = line.split(" ")
    if len(words) != 8:
        return f"{len(words)} fields, not 8"
    node_id, address, flags, master, ping, pong, epoch, state = words
    if _ID.fullmatch(node_id) is None:
        return "not a node id"
    m = _ADDRESS.fullmatch(address)
    if m is None:
        return "not an address ip:port@cport[,hostname]"
    host, name = m["host"], m["name"] or ""
    error = (address_error(host) if host else None) or hostname_error(name)
    if error is not None:
        return f"address {address[:80]!r}: {error}"
    port, bus = int(m["port"]), int(m["bus"])
    if port > 65535 or bus > 65535:
        return "a port above 65535"
    names = flags.split(",")
    if not set(names) <= _FLAGS:
        return f"unknown flags {flags[:40]!r}"
    numbers = (ping, pong, epoch)
    if master != "-" or not all(_NUMBER.fullmatch(n) for n in numbers) or state not in _STATES:
        return "not a node line"
    return SavedNode(node_id, host, port, bus, name), names


def parse(text: str, where: str = "nodes file") -> NodesConfig:
    """The id, epoch and nodes of a nodes file. A line that is not a node
    line :func:`render` could have written (:func:`_node_line`), a second
    ``myself`` line, or a node listed twice is refused: logged with its
    reason (the first :data:`LOGGED_REJECTS`) and counted in
    :attr:`NodesConfig.rejected`, so the node never takes an id it reads
    from another node's line, and one bad line does not stop it; no
    ``myself`` line at all is a NodesFileError. A ``vars`` line whose
    numbers do not read is refused the same way (epoch and incarnation then
    start at 0: the restart raises the incarnation above it all the same)."""
    my_id = None
    epoch = incarnation = 0
    nodes: dict[str, SavedNode] = {}
    rejected: list[tuple[int, str]] = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if line.startswith("vars "):
            words = line.split(" ")[1:]
            values = dict(zip(words[::2], words[1::2], strict=False))
            epoch_text = values.get("currentEpoch", "0")
            incarnation_text = values.get("incarnation", "0")
            if (
                _NUMBER.fullmatch(epoch_text) is None
                or _NUMBER.fullmatch(incarnation_text) is None
                or int(epoch_text) >= 2**64  # (a u64 on the wire)
                or int(incarnation_text) >= 2**32  # (a u32)
            ):
                rejected.append((number, "not a vars line"))
                continue
            epoch, incarnation = int(epoch_text), int(incarnation_text)
            continue
        parsed = _node_line(line)
        if isinstance(parsed, str):
            rejected.append((number, parsed))
            continue
        node, flags = parsed
        if "handshake" in flags:
            continue
        if "myself" in flags:
            if my_id is not None:
                rejected.append((number, "a second line with the myself flag"))
                continue
            my_id = node.node_id
            if nodes.pop(my_id, None) is not None:
                rejected.append((number, f"node {my_id} listed twice"))
        elif node.node_id == my_id or node.node_id in nodes:
            rejected.append((number, f"node {node.node_id} listed twice"))
        else:
            nodes[node.node_id] = node
    for number, reason in rejected[:LOGGED_REJECTS]:
        log.warning("%s:%d: line refused: %s", where, number, reason)
    if len(rejected) > LOGGED_REJECTS:
        log.warning("%s: %d more lines refused", where, len(rejected) - LOGGED_REJECTS)
    if my_id is None:
        why = f" ({rejected[0][1]} on line {rejected[0][0]})" if rejected else ""
        raise NodesFileError(f"{where}: no line with the myself flag{why}")
    return NodesConfig(my_id, epoch, list(nodes.values()), incarnation, len(rejected))
