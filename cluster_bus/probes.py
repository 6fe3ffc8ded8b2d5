"""SWIM's probe schedule as pure state: whom to probe next, which probes are
outstanding, and whose probes this node relays (PROBE_REQ).

Target selection is SWIM's round-robin (Das, Gupta, Motivala 2002, section
4.3): walk a random permutation of the members, a new permutation each round,
so a member is probed at least once every 2N - 1 periods, where uniform random
choice leaves an unbounded worst case. The failure-detection rules that use
it are in :mod:`cluster_bus.membership`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class ProbeStep:
    """What one protocol period asks the wire to do (``Membership.probe_tick``)."""

    ping: str | None = None  # PING this peer (the period's probe)
    indirect: list[tuple[str, str]] = field(default_factory=list)  # (via, target): PROBE_REQ
    suspected: list[str] = field(default_factory=list)  # newly suspected here
    failed: list[str] = field(default_factory=list)  # suspicion timed out: broadcast FAIL
    forgotten: list[str] = field(default_factory=list)  # in FAIL for fail_forget_ms: dropped


@dataclass
class Probe:
    """One outstanding probe: when the PING went, whether PROBE_REQs followed,
    and how many more protocol periods its current stage waits (the local
    health multiplier when the stage began: :mod:`cluster_bus.awareness`)."""

    sent_ms: int
    indirect: bool = False
    ticks: int = 1


class ProbeSchedule:
    """The round-robin order, the outstanding probes, the relays we owe."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._order: list[str] = []
        self.outstanding: dict[str, Probe] = {}
        self._relays: dict[str, dict[str, int]] = {}  # target -> {requester: ms}

    def choose(self, members: Iterable[str], eligible: Callable[[str], bool]) -> str | None:
        """The next target in this round's order that is ``eligible`` and has no
        probe outstanding; a new shuffled round of ``members`` when one ends."""
        for _ in range(2):
            while self._order:
                node_id = self._order.pop()
                if node_id not in self.outstanding and eligible(node_id):
                    return node_id
            self._order = list(members)
            self._rng.shuffle(self._order)
        return None

    def probe_next(self, node_id: str) -> None:
        """Make ``node_id`` the next target (its link just closed: a kill -9
        closes every peer's link at once, so every peer probes it at the next
        period instead of waiting for its turn in the round)."""
        if node_id in self._order:
            self._order.remove(node_id)
        self._order.append(node_id)

    def forget(self, node_id: str) -> None:
        self.outstanding.pop(node_id, None)
        self._relays.pop(node_id, None)

    def relay_requested(self, target: str, requester: str, now_ms: int) -> None:
        self._relays.setdefault(target, {})[requester] = now_ms

    def relays_answered(self, target: str) -> list[str]:
        return list(self._relays.pop(target, {}))

    def expire_relays(self, older_than_ms: int) -> None:
        """Drop relay requests made before ``older_than_ms`` (the target never answered)."""
        for target, requesters in list(self._relays.items()):
            for requester, at in list(requesters.items()):
                if at < older_than_ms:
                    del requesters[requester]
            if not requesters:
                del self._relays[target]
