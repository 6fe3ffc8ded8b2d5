"""TrafficEvent: the one schema shared by the node's traffic tap and the Spark job.

This module is the whole interface between the node and spark/: the node
builds TrafficEvents and hands them to a :class:`TrafficRecorder` (the tap in
:mod:`spark.tap`, wired in by ``bloomcast node``); nothing else of spark/ is
on the node's path.

One event per PUBLISH a node handles: as ``origin`` (a client published on this
node) or as ``receiver`` (a peer forwarded it here). Serialised as one JSON
object per line (NDJSON) with exactly these keys.

Fields (units):
  event_id        "<origin node id>-<origin sequence>"; origin and receiver
                  events of one PUBLISH share it, (event_id, node) is unique
  time            seconds since the Unix epoch (float) when the node handled it
  node            node id (40 hex chars) of the node that wrote the event
  role            "origin" | "receiver"
  channel         channel name, UTF-8 (undecodable bytes as \\xNN escapes)
  bytes           payload length in bytes
  receivers       local receivers it was delivered to on this node
  forwarded       peers this node forwarded it to (0 for role "receiver")
  peers           other nodes known when it was routed (broadcast would send to all)
  false_positive  role "receiver" with receivers == 0: a Bloom false positive
  shard           SPUBLISH rather than PUBLISH
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

Role = Literal["origin", "receiver"]

#: field name -> Spark SQL type, in order (used to build the job's schema)
SCHEMA_FIELDS: tuple[tuple[str, str], ...] = (
    ("event_id", "string"),
    ("time", "double"),
    ("node", "string"),
    ("role", "string"),
    ("channel", "string"),
    ("bytes", "long"),
    ("receivers", "long"),
    ("forwarded", "long"),
    ("peers", "long"),
    ("false_positive", "boolean"),
    ("shard", "boolean"),
)


def channel_text(channel: bytes) -> str:
    """Channel bytes as text for the event: UTF-8, other bytes as \\xNN."""
    return channel.decode("utf-8", errors="backslashreplace")


@dataclass(frozen=True, slots=True)
class TrafficEvent:
    event_id: str
    time: float
    node: str
    role: Role
    channel: str
    bytes: int
    receivers: int
    forwarded: int
    peers: int
    false_positive: bool
    shard: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrafficEvent:
        """Raises KeyError/TypeError/ValueError on a malformed record."""
        return cls(**{name: raw[name] for name, _ in SCHEMA_FIELDS})


class TrafficRecorder(Protocol):
    """Where a node records its traffic events (:class:`spark.tap.TrafficTap`)."""

    def keeps(self, event_id: str) -> bool:
        """Whether the event is in the sample (decided by its id alone, so a
        PUBLISH's origin and receiver events are kept or dropped together)."""
        ...

    def record(self, event: TrafficEvent) -> None: ...

    def info_fields(self) -> Mapping[str, int | str]:
        """INFO ``# Traffic`` fields."""
        ...
