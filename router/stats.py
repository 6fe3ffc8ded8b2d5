"""The counters INFO shows (Redis's names) and what CONFIG RESETSTAT resets.

- :class:`NodeStats`: ``# Stats`` counters, error replies by prefix
  (``# Errorstats``, Redis's ``afterErrorReply``) and one :class:`CommandStat`
  per command that ran or was refused (``# Commandstats``, Redis's ``call`` /
  ``rejectCommand``: calls, microseconds, rejected and failed calls, and
  the calls' latency histogram, LATENCY HISTOGRAM). Redis
  reads the clock around each call; the node reads it once per pipelined
  batch (:func:`share_time`), which kept the hot path's cost flat.
- :class:`InstantaneousMetrics`: ``instantaneous_ops_per_sec`` /
  ``_input_kbps`` / ``_output_kbps``. Redis samples the three counters every
  100 ms in ``serverCron`` and shows the mean rate of the last 16 samples
  (``trackInstantaneousMetric``). The node has no timer for it: it samples
  lazily, when the node flushes output at the end of a loop iteration (so only
  while there is traffic; a clock read and a compare with ``next_sample``
  when no sample is due) and when INFO reads the rates; a gap of several
  100 ms periods without a sample is split evenly over those periods, so the
  mean over the last 1.6 s is the same as Redis's when traffic is steady.
"""

from __future__ import annotations

from collections import defaultdict

import cython

#: Redis's STATS_METRIC_SAMPLES and the serverCron period that samples them
SAMPLES = 16
PERIOD = 0.1
#: the latency histogram's buckets (Redis 7: 1 ns .. 1 s, 2 significant
#: digits, read from 1024 ns in powers of 2): the first one's bound, how many
HISTOGRAM_FIRST = 1024 + 8
HISTOGRAM_LEVELS = 21

if not cython.compiled:  # (compiled: router/_stats.pxd defines it in C, a count of bits)

    def _bit_length(value: int) -> int:
        """``value.bit_length()`` (compiled: no int object, no method call)."""
        return value.bit_length()


@cython.final
@cython.cclass
class CommandStat:
    """One ``cmdstat_<name>`` line (C counters on the compiled plane)."""

    def __init__(self) -> None:
        self.calls = 0
        self.nanoseconds = 0
        self.rejected_calls = 0
        self.failed_calls = 0
        #: LATENCY HISTOGRAM: calls by bucket (:meth:`timed`), made at the first
        self.histogram: list[int] | None = None

    def timed(self, ns: int, count: int) -> None:
        """``count`` calls that took ``ns`` nanoseconds in all: their time, and
        each in Redis's latency histogram (``updateCommandLatencyHistogram``:
        the call's whole microseconds in ns, at least 1, in an HDR histogram
        of 2 significant digits read in power-of-two steps from 1024 ns:
        bucket ``i`` holds values below ``(1024 << i) + (8 << i)``)."""
        self.nanoseconds += ns
        value = ns // count // 1000 * 1000
        # 2^k <= value < 2^(k+1): bucket k - 10, or the next one from 2^k + 2^(k-7)
        level = _bit_length(value) - 11
        if level < 0:
            level = 0
        elif value >= HISTOGRAM_FIRST << level:
            level += 1
        if level >= HISTOGRAM_LEVELS:
            level = HISTOGRAM_LEVELS - 1
        histogram = self.histogram
        if histogram is None:
            histogram = self.histogram = [0] * HISTOGRAM_LEVELS
        histogram[level] += count

    def info(self) -> str:
        usec = self.nanoseconds // 1000
        per_call = usec / self.calls if self.calls else 0.0
        return (
            f"calls={self.calls},usec={usec},usec_per_call={per_call:.2f},"
            f"rejected_calls={self.rejected_calls},failed_calls={self.failed_calls}"
        )


@cython.final
@cython.cclass
class NodeStats:
    """Counters shown in INFO (Redis's names); CONFIG RESETSTAT zeroes them
    in place (:meth:`reset`: the node's context and its connections keep
    this object). C counters on the compiled plane, which adds to them
    without a Python call."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """CONFIG RESETSTAT: every counter back to its start."""
        self.connections_received = 0
        self.commands_processed = 0
        self.output_buffer_limit_disconnections = 0
        self.rejected_connections = 0
        self.publish_received = 0  # client PUBLISH/SPUBLISH handled here
        self.messages_delivered = 0  # messages written to local subscribers
        self.forwards_lost = 0  # forwarded PUBLISH lost for good (peer's replay buffer passed)
        self.net_input_bytes = 0  # bytes read from clients (INFO total_net_input_bytes)
        self.net_output_bytes = 0  # bytes written to clients (total_net_output_bytes)
        self.loss_disconnections = 0  # clients closed by --on-publish-loss disconnect
        self.protected_mode_denied = 0  # non-loopback clients refused by protected mode
        self.tls_handshake_failures = 0  # TLS port: connections that never completed TLS
        #: times a huge request was parsed in slices, letting other clients run between
        self.parse_slices = 0
        #: exceptions that escaped an event-loop callback (bloomcast/node_log.py)
        self.loop_exceptions = 0
        #: error replies by their first word (INFO errorstats, as Redis's afterErrorReply)
        self.errors: dict[str, int] = {}
        #: command full name (``client|list``) -> its INFO commandstats line
        self.commands: defaultdict[str, CommandStat] = defaultdict(CommandStat)

    def error_replied(self, reply: bytes) -> None:
        """Count one error reply (``-PREFIX text``) under its prefix."""
        end = reply.find(b" ")
        prefix = reply[1 : end if end > 0 else reply.find(b"\r")].decode(errors="replace")
        self.errors[prefix] = self.errors.get(prefix, 0) + 1

    def command_stat(self, name: str) -> CommandStat:
        return self.commands[name]


class InstantaneousMetrics:
    """Redis's instantaneous ops/s and kbps over the last 16 samples of 100 ms,
    sampled lazily (see the module docstring)."""

    def __init__(self, now: float) -> None:
        self.reset(now, (0, 0, 0))

    def reset(self, now: float, counters: tuple[int, int, int]) -> None:
        self._last_time = now
        #: the clock reading from which :meth:`sample` has a sample to take
        self.next_sample = now + PERIOD
        self._last = counters
        # per counter, the rate (per second) of each of the last SAMPLES periods
        self._rates: list[list[float]] = [[0.0] * SAMPLES for _ in range(3)]
        self._index = 0

    def sample(self, now: float, counters: tuple[int, int, int]) -> None:
        """Take the samples due by ``now`` (none if less than 100 ms passed)."""
        elapsed = now - self._last_time
        if elapsed < PERIOD:
            return
        periods = min(int(elapsed / PERIOD), SAMPLES)
        for rates, value, last in zip(self._rates, counters, self._last, strict=True):
            rate = (value - last) / elapsed
            for i in range(periods):
                rates[(self._index + i) % SAMPLES] = rate
        self._index = (self._index + periods) % SAMPLES
        self._last_time = now
        self.next_sample = now + PERIOD
        self._last = counters

    def rates(self) -> tuple[float, float, float]:
        """(ops per second, input bytes per second, output bytes per second)."""
        ops, net_in, net_out = [sum(r) / SAMPLES for r in self._rates]
        return ops, net_in, net_out


def share_time(runs: list[tuple[CommandStat, int]], elapsed: int) -> None:
    """A pipelined batch's time to the commands that ran in it, ``(stat,
    count)`` per run of one command: exact for a batch of one command (the
    common pipeline); in a mixed batch each command gets the batch's mean."""
    if len(runs) == 1:
        runs[0][0].timed(elapsed, runs[0][1])
        return
    total = 0
    for _, count in runs:
        total += count
    for stat, count in runs:
        stat.timed(elapsed * count // total, count)
