"""The latency monitor (Redis 7.0.15 ``src/latency.c``): per event, the last
160 samples (at most one a second, the worst of that second) and the worst
of all; LATENCY LATEST / HISTORY / GRAPH / RESET / DOCTOR read it.

Events, each recorded when it took at least ``latency-monitor-threshold``
ms (0: off), in whole milliseconds as Redis's ``latencyEndMonitor``:

- ``command`` and ``fast-command``: a command (by Redis's ``fast`` flag),
  from :mod:`router.hooks`, as Redis;
- ``fanout-turn``: the end-of-turn write of every client's queued output,
  subscribers' messages and replies alike (:meth:`router.pubsub.PubSub.flush_all`,
  Redis's ``handleClientsWithPendingWrites``), which no command's time includes;
- ``bus-forward-run``: the delivery of one run of PUBLISH frames a peer
  forwarded over the cluster bus (:meth:`router.pubsub.PubSub.deliver_forwarded_run`);
- ``collector-pause``: a collection of Python's cyclic garbage collector
  (:class:`router.collector.Pauses`), the node's own stop-the-world pause;
- ``nodes-file-fsync``: the two fsyncs (the file's, its directory's) of the
  nodes file's atomic save, timed in its writer thread
  (:mod:`cluster_bus.nodes_file`): off the event loop, so a spike here
  delays only the file, where Redis's ``aof-fsync-always`` would delay
  the server.

LATENCY DOCTOR gives Redis's advice for Redis's events and for the
anonymous huge pages of the process (``/proc/self/smaps_rollup``), and
this node's own for its events (:data:`_ADVICE`). Redis 7 turns
transparent huge pages off for itself (``disable-thp yes``); the node does
not (tried: ``prctl(PR_SET_THP_DISABLE)`` moved ``bench.memory``'s RSS
readings so that 2,000 patterns read as negative growth), so on a host
with THP ``always`` its DOCTOR may give that advice where Redis's does not.
"""

from __future__ import annotations

import time

#: Redis's LATENCY_TS_LEN
SAMPLES = 160


class Series:
    """One event's samples: a ring of (unix seconds, ms), and the worst ever."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, int]] = [(0, 0)] * SAMPLES
        self.idx = 0
        self.max = 0

    def add(self, ms: int, now: int) -> None:
        """``latencyAddSample``: a second already sampled keeps its worst."""
        self.max = max(self.max, ms)
        prev = (self.idx + SAMPLES - 1) % SAMPLES
        when, worst = self.samples[prev]
        if when == now:
            if ms > worst:
                self.samples[prev] = (now, ms)
            return
        self.samples[self.idx] = (now, ms)
        self.idx = (self.idx + 1) % SAMPLES

    def history(self) -> list[tuple[int, int]]:
        """Oldest first, the unused slots left out."""
        ring = self.samples[self.idx :] + self.samples[: self.idx]
        return [s for s in ring if s[0]]

    def latest(self) -> tuple[int, int]:
        return self.samples[(self.idx + SAMPLES - 1) % SAMPLES]


class LatencyMonitor:
    """Every event's :class:`Series`, by name (case-sensitive, as Redis's dict)."""

    def __init__(self) -> None:
        self.events: dict[str, Series] = {}

    def add_if_needed(self, event: str, ms: int, threshold: int) -> None:
        """``latencyAddSampleIfNeeded``: only at or over ``threshold`` (0: off)."""
        if threshold and ms >= threshold:
            self.events.setdefault(event, Series()).add(ms, int(time.time()))

    def reset(self, names: list[str] | None) -> int:
        """``latencyResetEvent``: every event, or each named one (any case)."""
        if names is None:
            count = len(self.events)
            self.events.clear()
            return count
        resets = 0
        for name in names:
            for event in [e for e in self.events if e.lower() == name.lower()]:
                del self.events[event]
                resets += 1
        return resets

    def report(self, threshold: int, slowlog_us: int, huge_pages: bool) -> str:
        """``createLatencyReport`` (LATENCY DOCTOR): each event's figures and
        the advice they call for, in Redis's order (module doc);
        ``huge_pages``: the process has anonymous huge pages (Redis's THP
        advice)."""
        if not self.events and threshold == 0:
            return (
                "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this "
                'Redis instance. You may use "CONFIG SET latency-monitor-threshold '
                "<milliseconds>.\" in order to enable it. If we weren't in a deep space "
                "mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n"
            )
        out: list[str] = []
        advise: set[str] = set()
        now = int(time.time())
        for n, (event, series) in enumerate(self.events.items(), 1):
            if n == 1:
                out.append(
                    "Dave, I have observed latency spikes in this Redis instance. "
                    "You don't mind talking about it, do you Dave?\n\n"
                )
            samples = series.history()
            count = len(samples)
            avg = sum(ms for _, ms in samples) // count if count else 0
            mad = sum(abs(avg - ms) for _, ms in samples) // count if count else 0
            period = max(now - min(t for t, _ in samples), 1) if count else 0
            per = period / count if count else float("nan")
            out.append(
                f"{n}. {event}: {count} latency spikes (average {avg}ms, mean deviation "
                f"{mad}ms, period {per:.2f} sec). Worst all time event {series.max}ms.\n"
            )
            if event == "command":
                if slowlog_us < 0:
                    advise.add("slowlog_enabled")
                elif slowlog_us // 1000 > threshold:
                    advise.add("slowlog_tuning")
                advise |= {"slowlog_inspect", "large_objects"}
            else:
                advise |= _EVENT_ADVICE.get(event, set())
        if huge_pages:
            advise.add("disable_thp")
        if not self.events and not advise:
            out.append(
                "Dave, no latency spike was observed during the lifetime of this Redis "
                "instance, not in the slightest bit. I honestly think you ought to sit down "
                "calmly, take a stress pill, and think things over.\n"
            )
        elif not advise:
            out.append(
                "\nWhile there are latency events logged, I'm not able to suggest any easy "
                "fix. Please use the Redis community to get some help, providing this report "
                "in your help request.\n"
            )
        else:
            out.append("\nI have a few advices for you:\n\n")
            for key, text in _ADVICE.items():
                if key in advise:
                    out.append(text.replace("%llu", str(threshold * 1000)))
        return "".join(out)


#: LATENCY GRAPH's width (Redis's LATENCY_GRAPH_COLS) and height in rows
GRAPH_COLS = 80
GRAPH_ROWS = 4
#: the sparkline's characters, lowest first (``sparkline.c``'s ``charset_fill``)
_FILL = "_o#"


def _ago(seconds: int) -> str:
    """A sample's label: how long ago, in s, m, h or d (whole units)."""
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def graph(event: str, series: Series, now: int) -> str:
    """LATENCY GRAPH (``latencyCommandGenSparkeline``): a header, a rule, and
    the samples as a filled sparkline of :data:`GRAPH_ROWS` rows, oldest
    first, each labelled (vertically) with how long before ``now`` (unix
    seconds) it was taken; more than :data:`GRAPH_COLS` samples wrap into
    another block (Redis's ``sparklineRender``)."""
    samples = series.history()
    values = [ms for _, ms in samples]
    low, high = (min(values), max(values)) if values else (0, 0)
    out = [
        f"{event} - high {high} ms, low {low} ms (all time high {series.max} ms)\n",
        "-" * GRAPH_COLS + "\n",
    ]
    labels = [_ago(now - when) for when, _ in samples]
    for first in range(0, len(values), GRAPH_COLS):
        if first:
            out.append("\n")
        block = slice(first, first + GRAPH_COLS)
        out.append(_sparkline(values[block], labels[block], low, high))
    return "".join(out)


def _sparkline(values: list[int], labels: list[str], low: int, high: int) -> str:
    """``sparklineRenderRange`` with SPARKLINE_FILL over ``values`` and their
    ``labels`` (scaled between the whole sequence's ``low`` and ``high``):
    each row from the top, a column per value (its step of ``3 * rows``: ``_o#`` where the
    value ends in this row, ``|`` below it), then a blank row and the labels
    downwards, one character a row."""
    spread = (high - low) or 1
    steps = len(_FILL) * GRAPH_ROWS
    tops = [min(max(int(int((v - low) * steps) / spread), 0), steps - 1) for v in values]
    rows = []
    for row in range(GRAPH_ROWS):
        floor = (GRAPH_ROWS - row - 1) * len(_FILL)
        cells = []
        for top in tops:
            idx = top - floor
            cells.append(_FILL[idx] if 0 <= idx < len(_FILL) else "|" if idx >= 0 else " ")
        rows.append("".join(cells))
    rows.append(" " * len(values))  # the labels' top margin
    for depth in range(max(len(label) for label in labels)):
        rows.append("".join(label[depth] if depth < len(label) else " " for label in labels))
    return "".join(row + "\n" for row in rows)


def huge_pages() -> bool:
    """Does this process use anonymous huge pages (``AnonHugePages`` of
    ``/proc/self/smaps_rollup``, Redis's ``THPGetAnonHugePagesSize``)?
    False where the kernel does not say (procfs: no disk is read)."""
    try:
        with open("/proc/self/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"AnonHugePages:"):
                    return int(line.split()[1]) > 0
    except (OSError, ValueError, IndexError):
        pass
    return False


_ADVICE = {
    "slowlog_enabled": "- There are latency issues with potentially slow commands you are "
    "using. Try to enable the Slow Log Redis feature using the command 'CONFIG SET "
    "slowlog-log-slower-than %llu'. If the Slow log is disabled Redis is not able to log "
    "slow commands execution for you.\n",
    "slowlog_tuning": "- Your current Slow Log configuration only logs events that are slower "
    "than your configured latency monitor threshold. Please use 'CONFIG SET "
    "slowlog-log-slower-than %llu'.\n",
    "slowlog_inspect": "- Check your Slow Log to understand what are the commands you are "
    "running which are too slow to execute. Please check https://redis.io/commands/slowlog "
    "for more information.\n",
    "scheduler": "- The system is slow to execute Redis code paths not containing system "
    "calls. This usually means the system does not provide Redis CPU time to run for long "
    "periods. You should try to:\n  1) Lower the system load.\n  2) Use a computer / VM just "
    "for Redis if you are running other software in the same system.\n  3) Check if you have "
    "a \"noisy neighbour\" problem.\n  4) Check with 'redis-cli --intrinsic-latency 100' what "
    "is the intrinsic latency in your system.\n  5) Check if the problem is allocator-related "
    "by recompiling Redis with MALLOC=libc, if you are using Jemalloc. However this may "
    "create fragmentation problems.\n",
    "local_disk": "- It is strongly advised to use local disks for persistence, especially if "
    "you are using AOF. Remote disks provided by platform-as-a-service providers are known to "
    "be slow.\n",
    "disk_contention": "- Try to lower the disk contention. This is often caused by other disk "
    "intensive processes running in the same computer (including other Redis instances).\n",
    "large_objects": "- Deleting, expiring or evicting (because of maxmemory policy) large "
    "objects is a blocking operation. If you have very large objects that are often deleted, "
    "expired, or evicted, try to fragment those objects into multiple smaller objects.\n",
    # this node's own events (module doc)
    "fanout": "- A loop turn spent long writing its clients' output: many subscribers, "
    "large messages or replies, or both, in one turn. A turn's messages are bounded by the "
    "pubsub class of 'client-output-buffer-limit' (a turn past its hard limit writes at "
    "once); smaller messages, shorter pipelines, or the subscribers spread over more nodes "
    "shorten it.\n",
    "bus_forward": "- Delivering the PUBLISH messages a peer forwarded took long: each run read "
    "from the cluster bus is fanned out to this node's subscribers in one pass. Check the "
    "peers' publish rate (CLUSTER INFO cluster_stats_messages_publish_received) and the "
    "subscribers per channel here (PUBSUB NUMSUB).\n",
    "collector": "- Python's garbage collector stopped the node (INFO collector: "
    "gc_pause_max_ms, gc_collections). A pause grows with the containers made since the last "
    "collection: many short-lived connections or subscriptions make more of them.\n",
    "disable_thp": "- I detected a non zero amount of anonymous huge pages used by your process. "
    "This creates very serious latency events in different conditions, especially when Redis "
    "is persisting on disk. To disable THP support use the command 'echo never > "
    "/sys/kernel/mm/transparent_hugepage/enabled', make sure to also add it into /etc/rc.local "
    "so that the command will be executed again after a reboot. Note that even if you have "
    "already disabled THP, you still need to restart the Redis process to get rid of the huge "
    "pages already created.\n",
}

#: the advice each event other than ``command`` calls for (Redis's for its
#: ``fast-command``; the node's own for its events)
_EVENT_ADVICE = {
    "fast-command": {"scheduler"},
    "fanout-turn": {"fanout"},
    "bus-forward-run": {"bus_forward"},
    "collector-pause": {"collector"},
    "nodes-file-fsync": {"local_disk", "disk_contention"},
}
