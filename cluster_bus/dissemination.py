"""Piggybacked dissemination: which node states ride on the next heartbeats.

SWIM (Das, Gupta, Motivala 2002, section 4.1) spreads membership changes by
piggybacking them on the protocol's own PING / ACK messages instead of
multicasting them; each change is sent a bounded number of times, enough for
an epidemic to reach every node in O(log N) protocol periods with high
probability. hashicorp/memberlist's ``TransmitLimitedQueue`` is the same idea
with the limit ``RetransmitMult * ceil(log10(N + 1))`` and "fewest
transmissions first" ordering; that is the rule here.

The queue holds node ids, not entries: an entry is built from the node's
record when it is sent, so a newer change about a node replaces the older one
(and restarts its count) for free.
"""

from __future__ import annotations

import math

#: memberlist's default RetransmitMult
RETRANSMIT_MULT = 4


def retransmit_limit(nodes: int, mult: int = RETRANSMIT_MULT) -> int:
    """How many times one change is piggybacked: ``mult * ceil(log10(nodes + 1))``
    (memberlist's ``retransmitLimit``); at least ``mult``."""
    return mult * max(1, math.ceil(math.log10(nodes + 1)))


class Broadcasts:
    """Node ids whose state changed, each with how often it has been sent.

    Ids sit in buckets by transmission count (insertion-ordered dicts), so
    :meth:`take` costs O(count), not O(queue): after a partition heals the
    queue holds every node of the other side."""

    def __init__(self, mult: int = RETRANSMIT_MULT) -> None:
        self.mult = mult
        self._sent: dict[str, int] = {}  # node id -> transmissions so far
        self._buckets: list[dict[str, None]] = [{}]  # [transmissions] -> ids, oldest first

    def __len__(self) -> int:
        return len(self._sent)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._sent

    def queue(self, node_id: str) -> None:
        """``node_id``'s state changed: (re)start spreading it."""
        self.drop(node_id)
        self._sent[node_id] = 0
        self._buckets[0][node_id] = None

    def drop(self, node_id: str) -> None:
        sent = self._sent.pop(node_id, None)
        if sent is not None:
            del self._buckets[sent][node_id]

    def take(self, count: int, nodes: int, skip: str | None = None) -> list[str]:
        """Up to ``count`` ids to piggyback on one message: fewest transmissions
        first, newest first among equals. Each is counted as sent once; an id
        that reached :func:`retransmit_limit` (``nodes`` = cluster size) leaves."""
        chosen: list[str] = []
        if count <= 0:
            return chosen
        for bucket in self._buckets:
            for node_id in reversed(bucket):
                if node_id != skip:
                    chosen.append(node_id)
                    if len(chosen) == count:
                        break
            if len(chosen) == count:
                break
        limit = retransmit_limit(nodes, self.mult)
        buckets = self._buckets
        for node_id in chosen:
            sent = self._sent[node_id]
            del buckets[sent][node_id]
            sent += 1
            if sent >= limit:
                del self._sent[node_id]
                continue
            self._sent[node_id] = sent
            if sent == len(buckets):
                buckets.append({})
            buckets[sent][node_id] = None
        return chosen
