"""Local health awareness, sans-IO: how much this node doubts itself.

Lifeguard (Dadgar, Phillips, Currey, "Lifeguard: Local Health Awareness for
More Accurate Failure Detection", DSN 2018 workshops, section IV-A "LHA-Probe")
as hashicorp/memberlist does it (``awareness.go``, the events in
``state.go`` ``probeNode`` and ``refute``): a failure detector run by a node
that is itself slow (starved of CPU, swapping, stopped) blames its peers for
its own slowness. So the node keeps a score, 0 <= score < ``MAX_MULTIPLIER``
(memberlist's ``AwarenessMaxMultiplier``, 8), raised by evidence that it may
be the slow one and lowered by evidence that it is not, and multiplies its
probe timeouts by ``score + 1``: a node that doubts itself probes less often,
waits longer before it suspects anyone, and gossips less (the multiplier is
read by :mod:`cluster_bus.membership` and :mod:`cluster_bus.heartbeat`).

The events, as memberlist's:

- a probe acked, directly or through the indirect probes: -1;
- a probe that got no ack at all (its target is suspected): +1 (memberlist
  adds the helpers' missing NACKs instead where they send them; the bus has
  no NACK, and memberlist's rule for helpers without one is +1);
- a suspicion about this node that it must refute: +1.

And one of bloomcast's (the issue that asked for Lifeguard asked for it too):
the bus measures its own event loop's lag, how late its periodic timer
fired. A timer late by more than half a period is direct evidence that this
process did not run: +1 (:meth:`cluster_bus.membership.Membership.loop_lag`
also keeps that stall from counting against any peer).
"""

from __future__ import annotations

#: memberlist's AwarenessMaxMultiplier: timeouts stretch at most this many times
MAX_MULTIPLIER = 8


class Awareness:
    """The score (0 = healthy) and the multiplier it puts on timeouts."""

    __slots__ = ("max", "score")

    def __init__(self, max_multiplier: int = MAX_MULTIPLIER) -> None:
        self.max = max_multiplier
        self.score = 0

    def apply(self, delta: int) -> None:
        """Add ``delta``, kept within 0 .. max - 1 (memberlist's ApplyDelta)."""
        self.score = min(self.max - 1, max(0, self.score + delta))

    @property
    def multiplier(self) -> int:
        """``score + 1``: what probe timeouts and intervals are multiplied by
        (memberlist's ScaleTimeout)."""
        return self.score + 1

    def scale(self, ms: int) -> int:
        """``ms`` stretched by the multiplier."""
        return ms * (self.score + 1)
