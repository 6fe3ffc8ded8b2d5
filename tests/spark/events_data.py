"""Traffic events for the Spark job tests (tests/spark/test_job.py and
test_standalone.py): a seeded event stream, its spool lines, and the rows the
job must aggregate from it (the NumPy side of the comparison)."""

from __future__ import annotations

import random

from spark.events import TrafficEvent
from spark.job import STATS

NODES = [f"{i:040x}" for i in (0xA1, 0xB2, 0xC3)]
BASE = 1_700_000_000.0


def make_events(seed: int, n: int = 400, span: float = 1500.0) -> list[TrafficEvent]:
    """Origin events and the receiver events of their forwards, in time order."""
    rnd = random.Random(seed)
    events = []
    for seq in range(n):
        t = BASE + span * seq / n + rnd.random()
        origin = rnd.choice(NODES)
        peers = [p for p in NODES if p != origin]
        targets = [p for p in peers if rnd.random() < 0.5]
        ch = f"news.{rnd.choice('abcdefg')}" if rnd.random() < 0.9 else "sport.ü"
        eid = f"{origin}-{seq}"
        events.append(
            TrafficEvent(
                eid,
                t,
                origin,
                "origin",
                ch,
                rnd.randint(1, 500),
                rnd.randint(0, 3),
                len(targets),
                len(peers),
                False,
            )
        )
        for p in targets:
            receivers = rnd.choice([0, 0, 1, 2])
            events.append(
                TrafficEvent(
                    eid, t + 0.001, p, "receiver", ch, 10, receivers, 0, len(peers), receivers == 0
                )
            )
    return events


def expected_rows(events: list[TrafficEvent]) -> dict[str, list[tuple[str, float, float]]]:
    """stat -> (bin, time, weight) rows, from unique (event_id, node) events."""
    seen: set[tuple[str, str]] = set()
    rows: dict[str, list[tuple[str, float, float]]] = {s: [] for s in STATS}
    for e in events:
        if (e.event_id, e.node) in seen:
            continue
        seen.add((e.event_id, e.node))
        if e.role == "origin":
            rows["channels"].append((e.channel, e.time, 1.0))
            rows["forwarded"].append((e.node, e.time, float(e.forwarded)))
            rows["forwards"].append(("sent", e.time, float(e.forwarded)))
            rows["forwards"].append(("saved", e.time, float(max(e.peers - e.forwarded, 0))))
        else:
            rows["receiver"].append((e.node, e.time, 1.0))
            rows["false_positive"].append((e.node, e.time, float(e.false_positive)))
    return rows


def lines_of(events: list[TrafficEvent]) -> list[str]:
    return [e.to_json() + "\n" for e in events]
