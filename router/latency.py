"""The latency monitor (Redis 7.0.15 ``src/latency.c``): per event, the last
160 samples (at most one a second, the worst of that second) and the worst
of all; LATENCY LATEST / HISTORY / RESET / DOCTOR read it.

Events recorded here: ``command`` and ``fast-command`` (a command, by Redis's
``fast`` flag, that took at least ``latency-monitor-threshold`` ms), from
:mod:`router.hooks`. Not (yet) recorded: a fan-out turn, a bus forward run,
the nodes file's fsync, a collector pause.
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

    def report(self, threshold: int, slowlog_us: int) -> str:
        """``createLatencyReport`` (LATENCY DOCTOR) for the events recorded here."""
        if not self.events and threshold == 0:
            return (
                "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this "
                'Redis instance. You may use "CONFIG SET latency-monitor-threshold '
                "<milliseconds>.\" in order to enable it. If we weren't in a deep space "
                "mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n"
            )
        out: list[str] = []
        advise = set()
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
                f"{mad}ms, period {per:.2f} sec). Worst all time event {series.max}ms."
            )
            if event == "command":
                if slowlog_us < 0:
                    advise.add("slowlog_enabled")
                elif slowlog_us // 1000 > threshold:
                    advise.add("slowlog_tuning")
                advise |= {"slowlog_inspect", "large_objects"}
            elif event == "fast-command":
                advise.add("scheduler")
            out.append("\n")
        if not self.events:
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
            for key in ("slowlog_enabled", "slowlog_tuning", "slowlog_inspect", "scheduler",
                        "large_objects"):  # fmt: skip
                if key in advise:
                    out.append(_ADVICE[key].replace("%llu", str(threshold * 1000)))
        return "".join(out)


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
    "large_objects": "- Deleting, expiring or evicting (because of maxmemory policy) large "
    "objects is a blocking operation. If you have very large objects that are often deleted, "
    "expired, or evicted, try to fragment those objects into multiple smaller objects.\n",
}
