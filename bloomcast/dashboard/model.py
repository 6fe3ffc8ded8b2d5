"""What the dashboard shows, as pure functions of what the nodes answered
(no sockets here): CLUSTER NODES lines, one INFO sample per node and poll, the
rates between two samples, and the cluster totals.

The saving (docs/architecture.md §3): each client PUBLISH on a node with P
peers is either routed to a peer (a PUBLISH frame, written now or held for
replay) or suppressed for it because its filters said no
(``cluster_stats_publish_suppressed``). Broadcast (Redis Cluster) would send
to all P. So, over an interval,

    routed    = Δ(cluster_stats_messages_publish_sent - cluster_stats_publish_replayed
                  + cluster_stats_publish_held_no_link)
    broadcast = routed + Δ cluster_stats_publish_suppressed
    saving    = 1 - routed / broadcast

Replays are left out: they re-send frames already counted once. A counter
that goes down (CONFIG RESETSTAT, a restart) is read as a reset, as
Prometheus's ``rate()`` does: the delta is the new value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: sample key -> INFO field of every counter the dashboard follows
COUNTERS: dict[str, str] = {
    "publish": "total_publish_received",
    "delivered": "total_messages_delivered",
    "publish_sent": "cluster_stats_messages_publish_sent",
    "publish_received": "cluster_stats_messages_publish_received",
    "replayed": "cluster_stats_publish_replayed",
    "held_no_link": "cluster_stats_publish_held_no_link",
    "suppressed": "cluster_stats_publish_suppressed",
    "false_positives": "cluster_stats_false_positives_received",
    "forwards_lost": "total_forwards_lost",
    "slow_consumer_disconnections": "client_output_buffer_limit_disconnections",
    "links_dropped": "cluster_stats_links_dropped",
}

#: sample key -> INFO field of every gauge shown as it is
GAUGES: dict[str, str] = {
    "clients": "connected_clients",
    "pubsub_clients": "pubsub_clients",
    "channels": "pubsub_channels",
    "patterns": "pubsub_patterns",
    "shard_channels": "pubsubshard_channels",
    "memory_bytes": "used_memory_rss",
    "uptime_s": "uptime_in_seconds",
    "known_nodes": "cluster_known_nodes",
    "nodes_lost": "cluster_nodes_lost",
    "links_connected": "cluster_links_connected",
    "filters_converged": "cluster_filters_converged",
    "channel_filter_m": "channel_filter_m",
    "channel_filter_fill": "channel_filter_fill_ratio",
    "channel_filter_fp": "channel_filter_estimated_fp_rate",
    "pattern_filter_m": "pattern_filter_m",
    "pattern_filter_fill": "pattern_filter_fill_ratio",
    "pattern_filter_fp": "pattern_filter_estimated_fp_rate",
}


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """One line of CLUSTER NODES: ``<id> <ip:port@cport> <flags> ... <link-state> ...``."""

    node_id: str
    host: str
    port: int
    bus_port: int
    flags: tuple[str, ...]
    link_state: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def myself(self) -> bool:
        return "myself" in self.flags


def parse_cluster_nodes(text: str | bytes) -> list[NodeEntry]:
    """CLUSTER NODES -> entries (malformed lines skipped). The client port is
    the part before ``@`` of ``host:port@busport`` (Redis's format)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        address, _, bus = parts[1].partition("@")
        host, sep, port = address.rpartition(":")
        bus = bus.split(",", 1)[0]  # Redis 7 may append ",hostname"
        if not sep or not port.isdigit():
            continue
        out.append(
            NodeEntry(
                node_id=parts[0],
                host=host.strip("[]"),
                port=int(port),
                bus_port=int(bus) if bus.isdigit() else 0,
                flags=tuple(parts[2].split(",")),
                link_state=parts[7],
            )
        )
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Sample:
    """One node's INFO at monotonic time ``t`` (seconds), reduced to what is shown."""

    t: float
    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    cluster_state: str = ""

    @classmethod
    def from_info(cls, t: float, info: Mapping[str, Any]) -> Sample:
        counters = {k: _number(info.get(f)) or 0.0 for k, f in COUNTERS.items()}
        gauges = {k: v for k, f in GAUGES.items() if (v := _number(info.get(f))) is not None}
        return cls(t, counters, gauges, str(info.get("cluster_state", "")))

    @property
    def routed(self) -> float:
        """Forwards routed to a peer since the node started (replays excluded)."""
        c = self.counters
        return c["publish_sent"] - c["replayed"] + c["held_no_link"]


def counter_delta(before: float, after: float) -> float:
    """``after - before``, or ``after`` when the counter went down (a reset)."""
    return after - before if after >= before else after


def saving_percent(routed: float, suppressed: float) -> float | None:
    """Share of broadcast's forwards not sent, in percent; None with nothing to route."""
    broadcast = routed + suppressed
    if broadcast <= 0:
        return None
    return 100.0 * suppressed / broadcast


@dataclass(frozen=True, slots=True)
class Rates:
    """Per-second rates between two samples of one node (all >= 0)."""

    seconds: float
    publish: float = 0.0
    delivered: float = 0.0
    forwards: float = 0.0
    broadcast: float = 0.0
    false_positives: float = 0.0
    forwards_lost: float = 0.0

    @property
    def saving_percent(self) -> float | None:
        return saving_percent(self.forwards, self.broadcast - self.forwards)


def rates(before: Sample, after: Sample) -> Rates | None:
    """Rates from ``before`` to ``after``; None when no time passed."""
    dt = after.t - before.t
    if dt <= 0:
        return None
    b, a = before.counters, after.counters

    def per_s(key: str) -> float:
        return counter_delta(b.get(key, 0.0), a.get(key, 0.0)) / dt

    routed = counter_delta(before.routed, after.routed) / dt
    suppressed = per_s("suppressed")
    return Rates(
        seconds=dt,
        publish=per_s("publish"),
        delivered=per_s("delivered"),
        forwards=routed,
        broadcast=routed + suppressed,
        false_positives=per_s("false_positives"),
        forwards_lost=per_s("forwards_lost"),
    )


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def rates_json(r: Rates | None) -> dict[str, float | None]:
    if r is None:
        keys = ("publish", "delivered", "forwards", "broadcast", "false_positives")
        return {**{f"{k}_per_s": None for k in keys}, "saving_percent": None}
    return {
        "publish_per_s": _round(r.publish),
        "delivered_per_s": _round(r.delivered),
        "forwards_per_s": _round(r.forwards),
        "broadcast_per_s": _round(r.broadcast),
        "false_positives_per_s": _round(r.false_positives),
        "saving_percent": _round(r.saving_percent),
    }


def cluster_totals(nodes: Iterable[tuple[Sample | None, Rates | None]]) -> dict[str, Any]:
    """Totals over the nodes: ``(latest sample or None if down, rates or None)``
    per node. Rates add up; the saving is recomputed from the summed rates."""
    count = up = 0
    sums: dict[str, float] = dict.fromkeys(
        ("publish", "delivered", "forwards", "broadcast", "false_positives"), 0.0
    )
    have_rates = False
    totals: dict[str, float] = dict.fromkeys(
        ("false_positives", "forwards_lost", "slow_consumer_disconnections", "routed",
         "suppressed", "clients", "channels", "patterns"), 0.0
    )  # fmt: skip
    for sample, r in nodes:
        count += 1
        if sample is None:
            continue
        up += 1
        for key in ("false_positives", "forwards_lost", "slow_consumer_disconnections"):
            totals[key] += sample.counters.get(key, 0.0)
        totals["routed"] += sample.routed
        totals["suppressed"] += sample.counters.get("suppressed", 0.0)
        for key in ("clients", "channels", "patterns"):
            totals[key] += sample.gauges.get(key, 0.0)
        if r is not None:
            have_rates = True
            for key in sums:
                sums[key] += getattr(r, key)
    live = saving_percent(sums["forwards"], sums["broadcast"] - sums["forwards"])
    return {
        "nodes": count,
        "nodes_up": up,
        "nodes_down": count - up,
        **{f"{k}_per_s": (_round(v) if have_rates else None) for k, v in sums.items()},
        "saving_percent": _round(live) if have_rates else None,
        "saving_percent_since_start": _round(
            saving_percent(totals["routed"], totals["suppressed"])
        ),
        "forwards_routed": int(totals["routed"]),
        "forwards_suppressed": int(totals["suppressed"]),
        "false_positives": int(totals["false_positives"]),
        "forwards_lost": int(totals["forwards_lost"]),
        "slow_consumer_disconnections": int(totals["slow_consumer_disconnections"]),
        "clients": int(totals["clients"]),
        "channels": int(totals["channels"]),
        "patterns": int(totals["patterns"]),
    }


#: the fields of a BLOOMCAST.HOTCHANNELS row the channels view shows, besides ``name``
HOT_FIELDS = (
    "publishes", "bytes", "deliveries", "forwards", "received", "error", "seconds", "nodes",
    "share-10s", "share-10m", "ratio",
)  # fmt: skip


def _finite(value: Any) -> float | None:
    """A number JSON can carry: None for a non-numeric, infinite or NaN one
    (a channel new since the 10 m window has an infinite trending ratio)."""
    number = _number(value.decode() if isinstance(value, bytes) else value)
    return number if number is not None and math.isfinite(number) else None


def hot_rows(reply: Any) -> list[dict[str, Any]]:
    """BLOOMCAST.HOTCHANNELS's reply (RESP3 maps or RESP2 flat arrays of field,
    value) -> one dict per channel, ``name`` as text and each field of
    :data:`HOT_FIELDS` it has as a number (``ratio`` None when infinite), in
    the order the node ranked them. Entries that do not read as one are
    skipped."""
    out: list[dict[str, Any]] = []
    for item in reply if isinstance(reply, list) else ():
        if isinstance(item, dict):
            pairs = list(item.items())
        elif isinstance(item, list) and len(item) % 2 == 0:
            pairs = list(zip(item[::2], item[1::2], strict=True))
        else:
            continue
        entry = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in pairs}
        name = entry.get("name")
        if name is None:
            continue
        row: dict[str, Any] = {
            "name": name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
        }
        for key in HOT_FIELDS:
            if key in entry:
                row[key] = _finite(entry[key])
        out.append(row)
    return out
