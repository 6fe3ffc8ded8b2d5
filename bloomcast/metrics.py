"""Prometheus ``/metrics`` and ``/healthz`` of one node, on its own asyncio loop.

A custom collector reads the node's INFO (router/info.py, which holds the
bus's CLUSTER INFO fields, read through the ClusterLink seam) and CLUSTER
NODES lines at scrape time, so nothing is counted twice and CONFIG RESETSTAT
shows as a counter reset. Names follow Prometheus's conventions (a
``bloomcast_`` prefix, ``_total`` on counters, base units: ``_bytes``,
ratios 0..1). ``generate_latest`` renders them; a tiny HTTP/1.0 handler on
``asyncio.start_server`` serves them: no thread in the node.

With a traffic tap, the same server serves the spool to the statistics job
(``/spool``, spark/spool_service.py). Those requests follow the node's own
rules for clients: with a password for the default user (``requirepass``)
or ACL users, HTTP Basic credentials (RFC 7617) of an enabled user whose ACL
allows ``MONITOR`` (:func:`spool_refusal`: the spool shows every channel's
traffic and a commit deletes files, which only a user who may watch every
command should do; the default user with ``requirepass`` may), and on a node
with TLS (``--tls-port``) only from a loopback peer, since the metrics port
is plain HTTP and the credentials would cross the network in the clear;
without a password, protected mode answers only loopback peers (403
otherwise). Each refusal is counted (``bloomcast_http_refused_total``, reason
``spool_auth``) and logged at most once a minute.

The HTTP server's own refusals (bloomcast/http_server.py: busy, idle
connections closed to make room, time budgets) are
``bloomcast_http_refused_total`` by reason; ``/healthz`` and ``/metrics``
have slots no other path may take.

``/healthz`` is 200 once ``cluster_filters_converged:1`` (this node holds the
filter every live peer announced, and has lost none) and ``cluster_state:ok``
(it reaches a majority of the nodes it knows or has lost), or always for a
node without a bus; else 503 naming which, so an orchestrator sends traffic
only to a node that routes correctly and is not cut off.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bloomcast.http_server import Body, Request, SmallHttpServer
from cluster_bus.api import NoPeers
from router.info import info_sections

if TYPE_CHECKING:
    from router.node import Node
    from spark.spool_service import SpoolService

log = logging.getLogger("bloomcast.node")

#: (metric name without _total, help, INFO field) of every plain counter
COUNTERS = (
    ("connections_received", "Client connections accepted", "total_connections_received"),
    ("commands_processed", "Commands run", "total_commands_processed"),
    ("net_input_bytes", "Bytes read from clients", "total_net_input_bytes"),
    ("net_output_bytes", "Bytes written to clients", "total_net_output_bytes"),
    ("rejected_connections", "Connections refused (maxclients)", "rejected_connections"),
    ("accept_errors", "Failed accept() on a client port (EMFILE...)", "total_accept_errors"),
    ("error_replies", "Error replies sent", "total_error_replies"),
    ("publish_received", "PUBLISH/SPUBLISH from this node's clients", "total_publish_received"),
    ("messages_delivered", "Messages written to local subscribers", "total_messages_delivered"),
    (
        "output_buffer_disconnections",
        "Clients disconnected by client-output-buffer-limit pubsub",
        "client_output_buffer_limit_disconnections",
    ),
    ("forwards_lost", "Forwarded PUBLISH lost for good (replay buffer passed)",
     "total_forwards_lost"),
    ("forwards_sent", "PUBLISH forwarded to peers (bus frames)",
     "cluster_stats_messages_publish_sent"),
    ("forwards_received", "PUBLISH forwarded here by peers",
     "cluster_stats_messages_publish_received"),
    ("forwards_suppressed", "Peers a PUBLISH was not forwarded to (filter said no)",
     "cluster_stats_publish_suppressed"),
    ("forwards_false_positive", "Forwards received with no local receiver",
     "cluster_stats_false_positives_received"),
    ("forwards_replayed", "Forwards replayed after a link fault",
     "cluster_stats_publish_replayed"),
    ("bus_messages_sent", "Cluster bus messages sent", "cluster_stats_messages_sent"),
    ("bus_messages_received", "Cluster bus messages received",
     "cluster_stats_messages_received"),
    ("filter_resizes", "Filters rebuilt with a new m", "cluster_stats_filter_resizes"),
    ("node_suspicions", "Peers suspected (SWIM)", "cluster_stats_suspicions"),
    ("bus_late_ticks", "Bus periods whose timer fired over half a period late (starved)",
     "cluster_stats_late_ticks"),
    ("links_dropped", "Bus links dropped", "cluster_stats_links_dropped"),
    ("forwards_lost_to_peers", "Forwards a peer counted lost (its count, told back)",
     "cluster_stats_publish_lost_to_peers"),
    ("bus_auth_failures", "Bus handshakes refused here (bad secret)",
     "cluster_stats_auth_failures"),
    ("bus_handshakes_refused", "Bus handshakes the peer ended (its refusal, seen here)",
     "cluster_stats_handshakes_refused"),
    ("bus_links_rejected", "Bus links closed at accept (cluster-max-handshakes[-per-ip])",
     "cluster_stats_links_rejected"),
    ("bus_accept_errors", "Failed accept() on the bus port (EMFILE...)",
     "cluster_stats_accept_errors"),
    ("bus_tls_handshake_failures", "Bus TLS handshakes that failed",
     "cluster_stats_tls_handshake_failures"),
    ("forward_sessions_restarted", "Peers back with the same id and a new process",
     "cluster_stats_sessions_restarted"),
    ("subscribe_visibility_timeouts", "SUBSCRIBEs confirmed without every peer's ACK",
     "cluster_subscribe_visibility_timeouts"),
)  # fmt: skip

#: (metric name, help, INFO field) of every plain gauge
GAUGES = (
    ("connected_clients", "Clients connected", "connected_clients"),
    ("pubsub_clients", "Clients subscribed to anything", "pubsub_clients"),
    ("pubsub_channels", "Channels with a local subscriber", "pubsub_channels"),
    ("pubsub_patterns", "Patterns with a local subscriber", "pubsub_patterns"),
    ("pubsub_shard_channels", "Shard channels with a local subscriber", "pubsubshard_channels"),
    ("resident_memory_bytes", "Resident set size", "used_memory_rss"),
    ("cluster_known_nodes", "Nodes known, this one included", "cluster_known_nodes"),
    ("cluster_links_connected", "Bus links up", "cluster_links_connected"),
    ("cluster_nodes_pfail", "Peers suspected", "cluster_nodes_pfail"),
    ("cluster_nodes_fail", "Peers in FAIL", "cluster_nodes_fail"),
    ("cluster_nodes_lost", "Peers forgotten after FAIL and still redialled", "cluster_nodes_lost"),
    ("cluster_health_score", "Local health score (Lifeguard): 0 healthy, up to 7",
     "cluster_health_score"),
    ("cluster_filters_converged", "1 once every live peer's filter is held",
     "cluster_filters_converged"),
    ("replay_buffer_bytes", "Forwards kept for replay", "cluster_replay_buffer_bytes"),
)  # fmt: skip

#: (metric name, help, filter field suffix) per filter ("channel", "pattern")
FILTER_GAUGES = (
    ("filter_bits", "Filter size m, in bits", "m"),
    ("filter_hashes", "Hash functions k", "k"),
    ("filter_set_bits", "Bits set", "set_bits"),
    ("filter_fill_ratio", "Share of bits set (0..1)", "fill_ratio"),
    ("filter_estimated_fp_rate", "Estimated false-positive rate (fill^k)", "estimated_fp_rate"),
)


def _number(value: int | str) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class NodeCollector(Collector):
    """Every metric, read from the node when Prometheus scrapes."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        sections = info_sections(self.node)
        fields: dict[str, int | str] = {}
        for name in ("clients", "memory", "stats", "cluster", "filters"):
            fields.update(sections.get(name, {}))
        for name, text, key in COUNTERS:
            value = _number(fields.get(key, 0))
            if value is not None:
                yield CounterMetricFamily(f"bloomcast_{name}", text, value=value)
        for name, text, key in GAUGES:
            value = _number(fields.get(key, 0))
            if value is not None:
                yield GaugeMetricFamily(f"bloomcast_{name}", text, value=value)
        yield from self._filters(fields)
        yield from self._commands()
        yield self._peers()
        yield from hot_channel_metrics(self.node)

    def _filters(self, fields: dict[str, int | str]) -> Iterator[Metric]:
        for name, text, suffix in FILTER_GAUGES:
            family = GaugeMetricFamily(f"bloomcast_{name}", text, labels=["filter"])
            for kind in ("channel", "pattern"):
                value = _number(fields.get(f"{kind}_filter_{suffix}", ""))
                if value is not None:
                    family.add_metric([kind], value)
            yield family

    def _commands(self) -> Iterator[Metric]:
        calls = CounterMetricFamily(
            "bloomcast_command_calls", "Calls per command (INFO commandstats)", labels=["command"]
        )
        seconds = CounterMetricFamily(
            "bloomcast_command_duration_seconds",
            "Time spent per command (INFO commandstats usec)",
            labels=["command"],
        )
        for name, stat in sorted(self.node.stats.commands.items()):
            calls.add_metric([name], stat.calls)
            seconds.add_metric([name], stat.nanoseconds / 1e9)
        yield calls
        yield seconds

    def _peers(self) -> Metric:
        family = GaugeMetricFamily(
            "bloomcast_peer_link_connected",
            "1 if the bus link to this peer is up (CLUSTER NODES link state)",
            labels=["peer", "address"],
        )
        for line in self.node.link.nodes_lines():
            parts = line.split()
            if len(parts) >= 8 and "myself" not in parts[2].split(","):
                family.add_metric([parts[0], parts[1]], 1.0 if parts[7] == "connected" else 0.0)
        return family


#: names per kind shown as labelled series: at most HOT_SERIES x 3 kinds x
#: 4 measures series, whatever the number of channels
HOT_SERIES = 5
#: a name's label, at most this many characters (a channel may be 64 KiB)
HOT_LABEL_CHARS = 128


def hot_label(name: bytes) -> str:
    """A channel name as a label value: UTF-8 with escapes, cut to
    :data:`HOT_LABEL_CHARS` (``...`` and the CRC-32 of the whole name mark a
    cut, so two long names sharing a beginning stay two series)."""
    import zlib

    text = name.decode(errors="backslashreplace")
    if len(text) <= HOT_LABEL_CHARS:
        return text
    return f"{text[: HOT_LABEL_CHARS - 11]}...{zlib.crc32(name):08x}"


def hot_channel_metrics(node: Node) -> Iterator[Metric]:
    """What is hot now (router/hotchannels.py): the top :data:`HOT_SERIES`
    names of each kind by publishes under the 1 m half-life, as per-second
    rates labelled ``kind`` and ``channel``; the error bound and the held
    names per kind. Nothing while ``hot-channels-size`` is 0."""
    import time

    hot = node.pubsub.hot
    if hot is None:
        return
    now = time.monotonic()
    hot.tick(now)
    measures = ("publishes", "bytes", "deliveries", "forwards")
    families = [
        GaugeMetricFamily(
            f"bloomcast_hot_channel_{m}_per_second",
            f"Decayed {m} per second (1 m half-life) of the node's hottest channels",
            labels=["kind", "channel"],
        )
        for m in measures
    ]
    bound = GaugeMetricFamily(
        "bloomcast_hot_channels_error_bound",
        "Most a hot channel's publishes per second (1 m) may be short by (N / K)",
        labels=["kind"],
    )
    held = GaugeMetricFamily(
        "bloomcast_hot_channels_held", "Names the hot-channels summary holds", labels=["kind"]
    )
    replaced = CounterMetricFamily(
        "bloomcast_hot_channels_replacements",
        "Names that took the place of the summary's smallest",
        labels=["kind"],
    )
    for kind in ("channel", "pattern", "shard"):
        summary = hot.summary(kind)
        rows = sorted(summary.rows(1, now), key=lambda r: (-r[1], r[0]))[:HOT_SERIES]
        for r in rows:
            label = [kind, hot_label(r[0])]
            for i, family in enumerate(families):
                family.add_metric(label, float(r[1 + i]))
        bound.add_metric([kind], summary.error_bound(now))
        held.add_metric([kind], len(summary))
        replaced.add_metric([kind], summary.replacements)
    yield from families
    yield bound
    yield held
    yield replaced


def unhealthy(node: Node) -> str | None:
    """Why ``/healthz`` answers 503 (None: healthy)."""
    if isinstance(node.link, NoPeers):
        return None
    fields = node.link.info_fields()
    if fields.get("cluster_state") != "ok":
        lost = fields.get("cluster_nodes_lost", 0)
        return f"cluster_state:fail (cut off from the majority; {lost} nodes lost)"
    if str(fields.get("cluster_filters_converged", 0)) != "1":
        return "filters not converged"
    return None


#: the command a user's ACL must allow for ``/spool`` (its reach: every channel's traffic)
SPOOL_PERMISSION = "monitor"


def spool_refusal(node: Node, request: Request) -> tuple[str, str, bytes] | None:
    """Why a ``/spool`` request is refused (None: allowed): the node's password or ACL
    users (HTTP Basic credentials of an enabled user allowed :data:`SPOOL_PERMISSION`;
    from loopback only when the node has TLS), else protected mode (loopback peers only)."""
    from router.protected import denies, is_local

    acl = node.acl
    if acl.default_requires_auth():
        import base64
        import binascii

        if node.config.tls_port and not is_local(request.peer_ip):
            return (
                "403 Forbidden",
                "text/plain",
                b"this node has TLS and the metrics port is plain HTTP: "
                b"read the spool from loopback (or through a TLS tunnel)\n",
            )
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        try:
            name, sep, password = base64.b64decode(token, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            sep = b""
        user = acl.authenticate(name, password) if scheme.lower() == "basic" and sep else None
        if user is None:
            return "401 Unauthorized", "text/plain", b"the spool needs the node's credentials\n"
        if acl.denied(user, SPOOL_PERMISSION, []) is not None:
            return (
                "403 Forbidden",
                "text/plain",
                b"NOPERM this user has no permissions to read the spool "
                b"(its ACL must allow MONITOR)\n",
            )
        return None
    if denies(node.config.protected_mode, False, request.peer_ip):
        return "403 Forbidden", "text/plain", b"protected mode: loopback clients only\n"
    return None


class HttpCollector(Collector):
    """The metrics port's own refusals, by reason (bloomcast/http_server.py)."""

    def __init__(self, server: MetricsServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        refused = CounterMetricFamily(
            "bloomcast_http_refused",
            "Metrics-port connections refused or closed (busy, idle_closed, timeout, spool_auth)",
            labels=["reason"],
        )
        reasons = self.server.refusals()
        reasons["spool_auth"] = self.server.spool_refused
        for reason, count in sorted(reasons.items()):
            refused.add_metric([reason], count)
        yield refused
        yield CounterMetricFamily(
            "bloomcast_http_errors", "Metrics-port answers that raised", value=self.server.errors
        )


class MetricsServer(SmallHttpServer):
    """``GET /metrics`` and ``GET /healthz`` over HTTP/1.0 on the node's loop, and the
    traffic spool (``/spool``) when given a :class:`~spark.spool_service.SpoolService`."""

    probe_paths = frozenset({"/healthz", "/metrics"})

    def __init__(self, node: Node, spool: SpoolService | None = None) -> None:
        super().__init__()
        self.node = node
        self.spool = spool
        self.spool_refused = 0  # /spool requests refused (credentials, ACL, cleartext)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(NodeCollector(node))
        self.registry.register(HttpCollector(self))

    async def answer_async(self, request: Request) -> tuple[str, str, Body]:
        """A spool request is checked on the loop (the node's users), then
        answered in the executor (its scandir, stat and unlink: issue 41)."""
        if self.spool is not None and (request.path + "/").startswith("/spool/"):
            refused = spool_refusal(self.node, request)
            if refused is not None:
                self.spool_refused += 1
                why = refused[2].decode().strip()
                self._warnings.warn(
                    "spool refused", request.peer_ip, f"/spool from {request.peer_ip}: {why}"
                )
                return refused
            return await self.off_loop(
                self.spool.answer, request.method, request.path, request.query
            )
        return self.answer(request)

    def respond(self, path: str) -> tuple[str, str, bytes]:
        """(status line, content type, body) for ``path``."""
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path == "/healthz":
            why = unhealthy(self.node)
            if why is None:
                return "200 OK", "text/plain", b"ok\n"
            return "503 Service Unavailable", "text/plain", why.encode() + b"\n"
        spool = ", /spool" if self.spool is not None else ""
        return "404 Not Found", "text/plain", f"try /metrics, /healthz{spool}\n".encode()
