"""What watches the commands a node runs: the MONITOR feed, the slow log
(SLOWLOG) and the latency monitor's ``command`` / ``fast-command`` events
(LATENCY), in one place: :class:`Hooks`, the node's one instance, reached as
``ctx.hooks``. Redis 7.0.15 does all three in ``call()`` (``src/server.c``),
after the command ran: ``latencyAddSampleIfNeeded``,
``slowlogPushCurrentCommand``, ``replicationFeedMonitors``.

How the request loop (:mod:`router.dispatch`, both data planes) reaches it,
at the cost of one branch per command when nothing watches:

- ``ctx.watch`` (a MONITOR client is connected, or a threshold is under the
  loop's slice, ``ctx.slice_ns``, 5 ms): every command runs through
  :func:`router.dispatch.execute` (PUBLISH, SPUBLISH and PING too: the
  loop's in-line path is off) and ``execute`` runs it through
  :meth:`Hooks.call`, which times it alone, as Redis does. EXEC's queued
  commands go through :meth:`Hooks.call` too (:mod:`router.commands.multi`).
- otherwise the loop reads the clock once per batch (as for commandstats):
  a batch longer than ``ctx.slow_ns`` (the lowest threshold, from 5 ms up)
  is given to :meth:`Hooks.slow_batch`. A batch of one request (the
  unpipelined client) is exactly that command; a pipelined batch over the
  threshold is logged as its last request with the batch's time (an upper
  bound: the loop cannot tell which request took it) and counted in
  ``slowlog_batches`` (INFO ``# Stats``).

What each records, Redis's rules: commands refused before they ran are not
seen; the slow log skips ``skip_slowlog`` commands (EXEC, ...) and MONITOR
skips ``admin`` and ``skip_monitor`` ones (CONFIG, CLIENT LIST, SLOWLOG,
...), by the command's flags in Redis 7.0.15's table
(:data:`UNMONITORED`, :data:`SKIP_SLOWLOG`, :data:`FAST`); AUTH's, HELLO
AUTH's, ACL SETUSER's and CONFIG SET requirepass's secrets are
``(redacted)`` (``redactClientCommandArgument``).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import time
from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING

from cluster_bus.dataplane import ENV
from router.commands.redis_meta import command_meta
from router.latency import LatencyMonitor
from router.parser import string2ll

if TYPE_CHECKING:
    from router.commands.base import Command
    from router.context import CommandClient, CommandContext
    from router.resp import Reply
    from router.settings import Settings

#: Redis's SLOWLOG_ENTRY_MAX_ARGC and SLOWLOG_ENTRY_MAX_STRING
MAX_ARGC = 32
MAX_STRING = 128
#: a batch that never passes (no threshold set): ``ctx.slow_ns``
NEVER = 2**62
REDACTED = b"(redacted)"
#: Redis 7.0.15's SENSITIVE_CONFIG parameters (CONFIG SET shows their value redacted)
_SENSITIVE_CONFIGS = frozenset({b"requirepass", b"masterauth", b"masteruser"})
#: Redis's ``isprint`` escapes of ``sdscatrepr`` (one byte each: the reference
#: :func:`sdscatrepr` and the tests check the fast versions against)
_ESCAPES = {ord("\\"): b"\\\\", ord('"'): b'\\"', ord("\n"): b"\\n", ord("\r"): b"\\r",
            ord("\t"): b"\\t", 7: b"\\a", 8: b"\\b"}  # fmt: skip
_REPR = tuple(_ESCAPES.get(c, bytes([c]) if 32 <= c <= 126 else b"\\x%02x" % c) for c in range(256))


def sdscatrepr(data: bytes) -> bytes:
    """``data`` quoted as Redis's ``sdscatrepr`` quotes it, byte by byte (the
    reference: a list item per byte, never on a node's path)."""
    return b'"' + b"".join([_REPR[c] for c in data]) + b'"'


def escaped(data: bytes) -> bytes:
    """``data`` escaped as ``sdscatrepr`` escapes it (no quotes), in C loops:
    ``codecs.escape_encode`` escapes ``\\``, ``'``, ``\\t``, ``\\n``, ``\\r`` and
    every other byte outside 32-126 as ``\\xhh``; Redis's differ in ``'``
    (not escaped), ``"`` (escaped), 7 and 8 (``\\a``, ``\\b``), fixed by
    ``bytes.replace`` when the payload holds them. ``escape_encode`` writes
    only bytes 32-126, so a NUL stands for an escaped backslash while the
    ``\\x07`` / ``\\x08`` escapes are renamed (the ``\\x07`` of a literal
    ``\\`` + ``x07`` is then left alone). At most 4x ``data``, a few
    copies of it: the pure-Python data plane's :func:`monitor_line`."""
    out: bytes = codecs.escape_encode(data)[0]
    if b"'" in data:
        out = out.replace(b"\\'", b"'")
    if b"\x07" in data or b"\x08" in data:
        backslash = b"\\" in data
        if backslash:
            out = out.replace(b"\\\\", b"\x00")
        out = out.replace(b"\\x07", b"\\a").replace(b"\\x08", b"\\b")
        if backslash:
            out = out.replace(b"\x00", b"\\\\")
    if b'"' in data:
        out = out.replace(b'"', b'\\"')
    return out


def python_monitor_line(head: bytes, args: list[bytes]) -> bytes:
    """``head``, then `` "<arg>"`` per argument (:func:`escaped`), then CRLF:
    a MONITOR line, joined once (the pure-Python data plane's
    ``router._resp.monitor_line``)."""
    parts = [head]
    for arg in args:
        parts += (b' "', escaped(arg), b'"')
    parts.append(b"\r\n")
    return b"".join(parts)


def _monitor_line() -> Callable[[bytes, list[bytes]], bytes]:
    """The compiled ``router._resp.monitor_line`` (one pass to size the line,
    one to write it, into one bytes object) when it is built and
    ``BLOOMCAST_NO_EXTENSIONS`` (:mod:`router.dataplane`'s switch) is not
    set, else the pure-Python data plane's; the nodes of both planes in one process (a
    test) share it: the two are byte for byte the same (tests/router/test_hooks.py)."""
    if not os.environ.get(ENV):
        with contextlib.suppress(ImportError):
            from router._resp import monitor_line

            return monitor_line
    return python_monitor_line


#: a MONITOR line from its head and arguments (:func:`_monitor_line`)
monitor_line = _monitor_line()


def flags_of(name: str) -> frozenset[str]:
    """The command's flags in Redis 7.0.15's table (``admin``, ``fast``,
    ``skip_monitor``, ``skip_slowlog``, ...); none for a command Redis lacks.
    (Reads the whole table: the tests check :data:`UNMONITORED`,
    :data:`SKIP_SLOWLOG` and :data:`FAST` against it.)"""
    meta = command_meta(name)
    return frozenset(str(f) for f in meta.info[2]) if meta is not None else frozenset()


#: the node's commands with Redis 7.0.15's ``admin`` or ``skip_monitor`` flag
#: (MONITOR does not show them), ``skip_slowlog`` (the slow log skips them) and
#: ``fast`` (their latency event is ``fast-command``), kept here so that a node
#: never loads Redis's table for them (tests/router/test_hooks.py compares)
UNMONITORED = frozenset(
    {"acl|deluser", "acl|dryrun", "acl|getuser", "acl|list", "acl|load", "acl|log", "acl|save",
     "acl|setuser", "acl|users", "client|kill", "client|list", "client|no-evict", "client|pause",
     "client|unpause", "cluster|forget", "cluster|meet", "config|get", "config|resetstat",
     "config|set", "latency|doctor", "latency|graph", "latency|histogram", "latency|history",
     "latency|latest", "latency|reset", "monitor", "shutdown", "slowlog|get", "slowlog|len",
     "slowlog|reset"}
)  # fmt: skip
SKIP_SLOWLOG = frozenset({"exec"})
FAST = frozenset(
    {"auth", "dbsize", "discard", "echo", "hello", "lastsave", "multi", "ping", "publish",
     "quit", "readonly", "readwrite", "reset", "role", "select", "spublish", "time", "unwatch",
     "watch"}
)  # fmt: skip


def redacted(name: str, args: list[bytes]) -> list[bytes]:
    """The arguments as MONITOR and the slow log show them: Redis 7.0.15
    redacts AUTH's password (and user), HELLO's AUTH pair, ACL SETUSER's
    rules and CONFIG SET's requirepass, as far as each command got before
    it returned an error."""
    if name == "auth":
        if len(args) > 3:  # a syntax error before anything was redacted
            return args
        return [args[0], *(REDACTED for _ in args[1:])]
    if name == "acl|setuser" and len(args) >= 3:
        return [*args[:2], *(REDACTED for _ in args[2:])]
    if name == "config|set" and len(args) % 2 == 0:
        shown = list(args)
        for i in range(2, len(args) - 1, 2):
            if args[i].lower() in _SENSITIVE_CONFIGS:
                shown[i + 1] = REDACTED
        return shown
    if name == "hello" and len(args) >= 2:
        version = string2ll(args[1])
        if version is None or not 2 <= version <= 3:
            return args
        shown = list(args)
        j = 2
        while j < len(args):
            more = len(args) - 1 - j
            opt = args[j].lower()
            if opt == b"auth" and more >= 2:
                shown[j + 1] = shown[j + 2] = REDACTED
                j += 3
            elif opt == b"setname" and more:
                j += 2
            else:
                break
        return shown
    return args


class SlowLog:
    """Redis's slow log (``src/slowlog.c``): newest first, at most
    ``slowlog-max-len`` entries, ids from 0 that RESET does not restart."""

    def __init__(self) -> None:
        self.entries: deque[tuple[int, int, int, list[bytes], bytes, bytes]] = deque()
        self.next_id = 0

    def push(self, client: CommandClient, args: list[bytes], usec: int, max_len: int) -> None:
        """``slowlogCreateEntry``: at most 32 arguments (the last says how many
        more), each at most 128 bytes (``... (N more bytes)``)."""
        argc = min(len(args), MAX_ARGC)
        shown: list[bytes] = []
        for j in range(argc):
            if argc != len(args) and j == argc - 1:
                shown.append(b"... (%d more arguments)" % (len(args) - argc + 1))
            elif len(args[j]) > MAX_STRING:
                more = len(args[j]) - MAX_STRING
                shown.append(args[j][:MAX_STRING] + b"... (%d more bytes)" % more)
            else:
                shown.append(args[j])
        entry = (self.next_id, int(time.time()), usec, shown, client.addr.encode(), client.name)
        self.next_id += 1
        self.entries.appendleft(entry)
        self.trim(max_len)

    def trim(self, max_len: int) -> None:
        while len(self.entries) > max_len:
            self.entries.pop()

    def latest(self, count: int) -> list[tuple[int, int, int, list[bytes], bytes, bytes]]:
        return list(self.entries)[:count]


class Hooks:
    """The node's watchers of commands (module doc): MONITOR clients, the
    slow log, the latency monitor."""

    def __init__(self) -> None:
        self.monitors: dict[int, CommandClient] = {}
        self.slowlog = SlowLog()
        self.latency = LatencyMonitor()
        #: pipelined batches over the threshold logged as their last request
        self.slowlog_batches = 0

    # ------------------------------------------------------------ switching

    def rewatch(self, ctx: CommandContext) -> None:
        """Set ``ctx.watch`` and ``ctx.slow_ns`` from the settings and the
        MONITOR clients (after CONFIG SET, MONITOR, a monitor gone)."""
        settings: Settings = ctx.settings
        thresholds = []
        if settings.slowlog_log_slower_than >= 0:
            thresholds.append(settings.slowlog_log_slower_than * 1000)
        if settings.latency_monitor_threshold > 0:
            thresholds.append(settings.latency_monitor_threshold * 1_000_000)
        lowest = min(thresholds, default=NEVER)
        ctx.watch = bool(self.monitors) or lowest < ctx.slice_ns
        ctx.slow_ns = min(lowest, NEVER)
        ctx.latency_ms = settings.latency_monitor_threshold

    # ------------------------------------------------------------ other events

    def event(self, ctx: CommandContext, name: str, ms: float) -> None:
        """A latency event other than a command's (:mod:`router.latency`'s
        module doc) that took ``ms`` milliseconds: a sample when that is at
        least ``latency-monitor-threshold``. On the event loop only."""
        self.latency.add_if_needed(name, int(ms), ctx.latency_ms)

    def off_loop(
        self, ctx: CommandContext, name: str, loop: asyncio.AbstractEventLoop
    ) -> Callable[[float], None]:
        """:meth:`event` for a thread (the nodes file's writer): a sample
        over the threshold is handed to ``loop``, where the monitor lives."""

        def sample(ms: float) -> None:
            threshold = ctx.latency_ms
            if threshold and ms >= threshold:
                with contextlib.suppress(RuntimeError):  # the loop closed
                    loop.call_soon_threadsafe(self.event, ctx, name, ms)

        return sample

    def add_monitor(self, ctx: CommandContext, client: CommandClient) -> None:
        self.monitors[client.id] = client
        client.extras.monitor = True
        self.rewatch(ctx)

    def forget(self, ctx: CommandContext, client: CommandClient) -> None:
        """A client gone, or RESET: no longer a monitor."""
        if self.monitors.pop(client.id, None) is not None:
            client.extras.monitor = False
            self.rewatch(ctx)

    # ------------------------------------------------------------ commands

    def call(
        self,
        ctx: CommandContext,
        client: CommandClient,
        cmd: Command,
        args: list[bytes],
    ) -> Reply:
        """Run ``cmd`` (its handler) timed alone, then record it (:meth:`after`).
        A MONITOR client's own command: its line follows its reply (Redis
        feeds the monitors after the command replied; in EXEC, inside
        EXEC's array, as Redis's)."""
        start = perf_counter_ns()
        reply = cmd.handler(ctx, client, args)
        own = self.after(ctx, client, cmd.name, args, perf_counter_ns() - start)
        if own:
            if type(reply) is bytes:
                return reply + own
            client.write(own)
        return reply

    def after(
        self, ctx: CommandContext, client: CommandClient, name: str, args: list[bytes], ns: int
    ) -> bytes:
        """A command that ran in ``ns`` nanoseconds: the latency sample, the
        slow log, the MONITOR feed, in Redis's ``call()`` order; the line
        for ``client`` itself when it is a monitor (b"" otherwise), which the
        caller writes after its reply."""
        settings = ctx.settings
        usec = ns // 1000
        if settings.latency_monitor_threshold:
            event = "fast-command" if name in FAST else "command"
            self.latency.add_if_needed(event, usec // 1000, settings.latency_monitor_threshold)
        threshold = settings.slowlog_log_slower_than
        if threshold >= 0 and usec >= threshold and name not in SKIP_SLOWLOG:
            self.slowlog.push(client, redacted(name, args), usec, settings.slowlog_max_len)
        if self.monitors and name not in UNMONITORED:
            return self.feed(client, redacted(name, args))
        return b""

    def slow_batch(
        self, ctx: CommandContext, client: CommandClient, args: list[bytes], ns: int, count: int
    ) -> None:
        """A batch of ``count`` requests that took ``ns`` ns, more than
        ``ctx.slow_ns`` (unwatched: module doc); ``args``: its last request,
        ``client.last_command`` its command's name."""
        if count > 1:
            self.slowlog_batches += 1
        self.after(ctx, client, client.last_command, args, ns)  # (no monitor: unwatched)

    def feed(self, client: CommandClient, args: list[bytes]) -> bytes:
        """``replicationFeedMonitors``: ``+<secs>.<usecs> [<db> <addr>] "arg" ...``,
        one line (:data:`monitor_line`: linear in the arguments, at most 4x
        them) made once for every MONITOR client; the line is returned
        instead of written when ``client`` is one. A monitor is a normal
        client (Redis's ``getClientType``): past ``client-output-buffer-limit
        normal`` with the line (:meth:`router.connection.Connection.over_limit_with`, as
        Redis checks at each append) it is disconnected, counted once and no longer
        fed, not written to."""
        now = time.time_ns() // 1000
        head = b"+%d.%06d [%d %s]" % (
            now // 1_000_000,
            now % 1_000_000,
            client.extras.db,
            client.addr.encode(),
        )
        line = monitor_line(head, args)
        own = b""
        limited = client.ctx.settings.normal_limited
        for monitor in list(self.monitors.values()):
            if monitor.closing:  # disconnected, or QUIT: no more output (Redis's CLOSE_ASAP)
                continue
            if limited and monitor.over_limit_with(len(line), True):
                monitor.disconnect_over_limit()  # counted once: no longer a monitor
                self.forget(client.ctx, monitor)
            elif monitor is client:
                own = line
            else:
                monitor.write(line)
        return own
