"""NodeConfig: every setting of one node agent, from flags or a TOML file.

One dataclass so the node, the cluster bus and the traffic tap read the same
object. Defaults follow Redis 7 (``redis.conf``) where Redis has the setting.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from cluster_bus.api import BusConfig
from router.config_file import check, merge_toml, settings_from_toml

if TYPE_CHECKING:
    from pathlib import Path

#: redis.conf ``client-output-buffer-limit pubsub 32mb 8mb 60``
DEFAULT_PUBSUB_HARD_LIMIT = 32 * 1024 * 1024
DEFAULT_PUBSUB_SOFT_LIMIT = 8 * 1024 * 1024
DEFAULT_PUBSUB_SOFT_SECONDS = 60


@dataclass
class NodeConfig:
    """Settings of one node agent.

    Sizes are bytes, times are seconds unless the name says ms.
    """

    # client side (router/)
    #: redis.conf bind: addresses, space separated; ``*`` / ``::*`` every IPv4 /
    #: IPv6 interface, ``-`` prefix optional (netutil/addresses.py)
    bind: str = "127.0.0.1"
    port: int = 6379
    requirepass: str | None = None
    proto_max_bulk_len: int = 512 * 1024 * 1024  # redis.conf proto-max-bulk-len
    max_multibulk_len: int = 2**31 - 1  # Redis 7.0.15 rejects a count above INT_MAX
    pubsub_hard_limit: int = DEFAULT_PUBSUB_HARD_LIMIT
    pubsub_soft_limit: int = DEFAULT_PUBSUB_SOFT_LIMIT
    pubsub_soft_seconds: int = DEFAULT_PUBSUB_SOFT_SECONDS
    maxclients: int = 10000
    #: redis.conf timeout: close a client idle this many seconds (0: never;
    #: pub/sub and blocked clients are exempt, as in Redis)
    timeout: int = 0
    #: redis.conf tcp-keepalive: SO_KEEPALIVE, first probe after this many
    #: idle seconds (0: off)
    tcp_keepalive: int = 300
    #: redis.conf tcp-backlog: the client listeners' listen() backlog
    tcp_backlog: int = 511
    #: redis.conf slowlog-log-slower-than (us; -1: off), slowlog-max-len and
    #: latency-monitor-threshold (ms; 0: off): the start values of the live
    #: settings CONFIG SET changes (router/settings.py, router/hooks.py)
    slowlog_log_slower_than: int = 10000
    slowlog_max_len: int = 128
    latency_monitor_threshold: int = 0
    #: names each hot-channels summary holds (router/hotchannels.py; 0: off)
    hot_channels_size: int = 128
    #: redis.conf protected-mode: refuse non-loopback clients while the default
    #: user has no password; and the bus refuses to listen beyond loopback
    #: without a cluster secret (router/protected.py)
    protected_mode: bool = True
    aclfile: str | None = None  # redis.conf aclfile: users in users.acl format
    # client TLS (router/tls.py), Redis's names; tls_port 0 = off
    tls_port: int = 0
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_ca_cert_file: str | None = None
    tls_auth_clients: str = "yes"  # yes | optional | no
    tls_cluster: bool = False  # the bus over TLS, mutual auth (netutil/tls.py)
    # filters (bloom/)
    filter_capacity: int = 1024  # channels the first filter is sized for
    filter_fp_rate: float = 0.01  # target false-positive rate per peer filter
    # cluster bus (cluster_bus/)
    cluster_port: int | None = None  # default: port + 10000, as Redis Cluster
    cluster_announce_bus_port: int | None = None  # told to peers instead (NAT, proxies)
    #: redis.conf cluster-announce-ip / -port / -tls-port / -hostname: what peers
    #: and cluster clients are told instead of what the node listens on
    cluster_announce_ip: str | None = None
    cluster_announce_port: int | None = None
    cluster_announce_tls_port: int | None = None
    cluster_announce_hostname: str | None = None
    #: redis.conf cluster-preferred-endpoint-type: ip | hostname | unknown-endpoint
    cluster_preferred_endpoint_type: str = "ip"
    #: redis.conf cluster-config-file: the node's id and the nodes it knows,
    #: kept across restarts (cluster_bus/nodes_file.py); None: a new id each start
    cluster_config_file: str | None = None
    join: list[str] = field(default_factory=list)  # seeds, "host:busport"
    cluster_secret: str | None = None
    node_timeout_ms: int = 15000  # redis.conf cluster-node-timeout
    cluster_fail_forget_ms: int | None = None  # None: 5 x node timeout; 0 = never
    cluster_link_sendbuf_limit: int = 0  # bytes; 0 = no limit, as Redis
    #: microseconds a link leaves between its writes of forwarded PUBLISH: a
    #: batch begun sooner after the last one waits (Kafka's linger.ms, from
    #: the last send); 0 = the next loop iteration, Redis Cluster's latency
    cluster_forward_linger_us: int = 0
    #: on by default (issue 27): a (P|S)SUBSCRIBE is confirmed once every live
    #: peer routes it, so a PUBLISH anywhere after the reply reaches it, as in
    #: Redis Cluster; 0 = off (confirm at once; a remote PUBLISH right after
    #: the reply may miss the new subscriber)
    subscribe_visibility_timeout_ms: int = 1000
    cluster_replay_buffer_bytes: int = 64 * 1024 * 1024  # per peer
    cluster_replay_buffer_ms: int = 10_000
    #: accepted bus links in their handshake at once, in all / per source
    #: address (0: automatic, cluster_bus.bus.ClusterBus.handshake_caps)
    cluster_max_handshakes: int = 0
    cluster_max_handshakes_per_ip: int = 0
    on_publish_loss: str = "notify"  # or "disconnect" (redis/redis #122's two options)
    # traffic tap (spark/)
    traffic_dir: str | None = None
    traffic_sample: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.protected_mode, bool):
            self.protected_mode = yes_no(str(self.protected_mode))
        if not isinstance(self.tls_cluster, bool):
            self.tls_cluster = yes_no(str(self.tls_cluster))

    @property
    def bus_port(self) -> int:
        """The cluster bus port: ``cluster_port`` or client port + 10000."""
        return self.cluster_port if self.cluster_port is not None else self.port + 10000

    def bus_config(self, client_port: int) -> BusConfig:
        """The cluster bus's settings; ``client_port`` is the bound client port."""
        return BusConfig(
            bind=self.bind,
            port=self.bus_port,
            client_port=client_port,
            tls_port=self.tls_port,
            announce_ip=self.cluster_announce_ip,
            announce_port=self.cluster_announce_port,
            announce_tls_port=self.cluster_announce_tls_port,
            announce_bus_port=self.cluster_announce_bus_port,
            announce_hostname=self.cluster_announce_hostname,
            join=tuple(self.join),
            cluster_secret=self.cluster_secret,
            tls_cluster=self.tls_cluster,
            tls_cert_file=self.tls_cert_file,
            tls_key_file=self.tls_key_file,
            tls_ca_cert_file=self.tls_ca_cert_file,
            node_timeout_ms=self.node_timeout_ms,
            fail_forget_ms=self.cluster_fail_forget_ms,
            sendbuf_limit=self.cluster_link_sendbuf_limit,
            forward_linger_us=self.cluster_forward_linger_us,
            max_body=2 * self.proto_max_bulk_len + 64 * 1024,
            visibility_timeout_ms=self.subscribe_visibility_timeout_ms,
            replay_bytes=self.cluster_replay_buffer_bytes,
            replay_ms=self.cluster_replay_buffer_ms,
            max_handshakes=self.cluster_max_handshakes,
            max_handshakes_per_ip=self.cluster_max_handshakes_per_ip,
        )

    @classmethod
    def from_toml(cls, path: str | Path) -> NodeConfig:
        """Read a TOML file whose keys are the node flags' names (``-`` or ``_``).

        Raises ConfigError (router/config_file.py) on an unknown key or a wrong type.
        """
        parser = argparse.ArgumentParser()
        add_node_arguments(parser)
        config = cls(**settings_from_toml(path, parser))
        check(config)
        return config


class _JoinWords(argparse.Action):
    """``--bind 10.0.0.1 127.0.0.1``: the words as Redis keeps them, one string."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, " ".join(values))


def yes_no(text: str) -> bool:
    """A Redis boolean setting: ``yes`` or ``no`` (any case)."""
    value = text.lower()
    if value not in ("yes", "no"):
        raise ValueError(f"argument must be 'yes' or 'no', not {text!r}")
    return value == "yes"


def _yes_no_arg(text: str) -> bool:
    try:
        return yes_no(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every NodeConfig flag to ``parser`` (defaults left as None = not given)."""
    parser.add_argument("--config", help="TOML file with node settings (flags override it)")
    _add_listener_arguments(parser)
    _add_limit_arguments(parser)
    _add_cluster_arguments(parser)
    add = parser.add_argument
    add(
        "--on-publish-loss",
        choices=("notify", "disconnect"),
        help="forwards lost for good: notify on __bloomcast__:loss (default), or also "
        "disconnect subscribed clients",
    )
    add("--traffic-dir", help="spool directory for traffic events (NDJSON)")
    add("--traffic-sample", type=float, help="share of PUBLISH events recorded (0..1)")


def _add_listener_arguments(parser: argparse.ArgumentParser) -> None:
    """The client ports: addresses, ports, AUTH, ACL file, TLS."""
    add = parser.add_argument
    add(
        "--bind",
        nargs="+",
        action=_JoinWords,
        metavar="ADDR",
        help="addresses to listen on, Redis's bind syntax: '*' every IPv4 interface, '::*' "
        "every IPv6 one, a '-' prefix if it may be missing (quote such words: "
        "--bind '127.0.0.1 -::1'; default 127.0.0.1)",
    )
    add("--port", type=int, help="client port (default 6379)")
    add("--requirepass", help="password clients must AUTH with")
    add("--aclfile", help="ACL users file (Redis's users.acl format), loaded at start")
    add("--tls-port", type=int, help="TLS client port, beside --port (default 0: off)")
    add("--tls-cert-file", help="TLS: the node's certificate (PEM)")
    add("--tls-key-file", help="TLS: the node's private key (PEM)")
    add("--tls-ca-cert-file", help="TLS: CA certificates that sign client certificates")
    add(
        "--tls-auth-clients",
        choices=("yes", "no", "optional"),
        help="TLS: clients must (yes, default), may (optional) or need not (no) present "
        "a certificate signed by the CA",
    )
    add(
        "--tls-cluster",
        type=_yes_no_arg,
        metavar="yes|no",
        help="the cluster bus over TLS with the same certificates; a peer must present "
        "one signed by --tls-ca-cert-file (default no)",
    )


def _add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """What a client may send and hold, timeouts, SLOWLOG, LATENCY, protected mode."""
    add = parser.add_argument
    add("--proto-max-bulk-len", type=int, help="largest bulk string accepted, bytes")
    add("--max-multibulk-len", type=int, help="largest multibulk count accepted")
    add("--pubsub-hard-limit", type=int, help="pubsub output buffer hard limit, bytes")
    add("--pubsub-soft-limit", type=int, help="pubsub output buffer soft limit, bytes")
    add("--pubsub-soft-seconds", type=int, help="seconds over the soft limit before disconnect")
    add("--maxclients", type=int, help="most clients connected at once")
    add("--timeout", type=int, help="close a client idle this many seconds (default 0: never)")
    add(
        "--tcp-keepalive",
        type=int,
        help="TCP keepalive probes after this many idle seconds (default 300; 0: off)",
    )
    add("--tcp-backlog", type=int, help="listen() backlog of the client ports (default 511)")
    add(
        "--slowlog-log-slower-than",
        type=int,
        help="SLOWLOG records commands slower than this many microseconds "
        "(default 10000; -1: off, 0: every command)",
    )
    add("--slowlog-max-len", type=int, help="entries SLOWLOG keeps (default 128)")
    add(
        "--hot-channels-size",
        type=int,
        help="channels each hot-channels summary holds, BLOOMCAST.HOTCHANNELS "
        "(default 128; 0: off)",
    )
    add(
        "--latency-monitor-threshold",
        type=int,
        help="LATENCY records events of at least this many milliseconds (default 0: off)",
    )
    add(
        "--protected-mode",
        type=_yes_no_arg,
        metavar="yes|no",
        help="yes (default): refuse non-loopback clients while there is no password, "
        "and refuse to start a bus beyond loopback without --cluster-secret",
    )


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The subscription filters and the cluster bus: addresses announced, peers, links."""
    add = parser.add_argument
    add("--filter-capacity", type=int, help="channels the first filter is sized for")
    add("--filter-fp-rate", type=float, help="target false-positive rate per filter")
    add("--cluster-port", type=int, help="cluster bus port (default port+10000)")
    add(
        "--cluster-announce-bus-port",
        type=int,
        help="bus port announced to peers, when they reach this node through NAT or a proxy",
    )
    add(
        "--cluster-announce-ip",
        help="IP told to peers and cluster clients (NAT, port forwarders); default: the bind "
        "address, or, bound to several or a wildcard, the one a peer's MEET arrives on",
    )
    add("--cluster-announce-port", type=int, help="client port told to peers and clients")
    add("--cluster-announce-tls-port", type=int, help="TLS client port told to peers and clients")
    add("--cluster-announce-hostname", help="hostname told to peers and clients")
    add(
        "--cluster-preferred-endpoint-type",
        choices=("ip", "hostname", "unknown-endpoint"),
        help="what CLUSTER SLOTS / SHARDS give clients as the endpoint (default ip)",
    )
    add(
        "--cluster-config-file",
        metavar="FILE",
        help="keep the node id and the nodes it knows in FILE across restarts "
        "(Redis's nodes.conf; locked against a second node)",
    )
    add("--join", action="append", help="seed node bus address host:port (repeatable)")
    add("--cluster-secret", help="shared secret: HMAC on the bus handshake")
    add("--node-timeout-ms", type=int, help="PING timeout before a peer is suspected")
    add(
        "--cluster-fail-forget-ms",
        type=int,
        metavar="MS",
        help="forget a node in FAIL for this long (default 5 x node timeout, at least the "
        "replay buffer time; 0: never)",
    )
    add("--cluster-link-sendbuf-limit", type=int, help="per-link send buffer limit, bytes")
    add(
        "--cluster-forward-linger-us",
        type=int,
        metavar="US",
        help="a forwarded PUBLISH that comes within US microseconds of its link's last "
        "write of forwards waits until then, so a busy link writes them about once per US: "
        "fewer bus writes and wake-ups for up to that much latency (default 0: none)",
    )
    add(
        "--subscribe-visibility-timeout",
        dest="subscribe_visibility_timeout_ms",
        type=int,
        metavar="MS",
        help="confirm (P|S)SUBSCRIBE once every live peer has the filter change, waiting "
        "at most MS (default 1000; 0: confirm at once, as before)",
    )
    add(
        "--cluster-replay-buffer-bytes",
        type=int,
        help="per peer: forwarded PUBLISH kept for replay after a link fault, bytes",
    )
    add("--cluster-replay-buffer-ms", type=int, help="per peer: how long forwards are kept, ms")
    add(
        "--cluster-max-handshakes",
        type=int,
        metavar="N",
        help="accepted bus links in their handshake at once; more are closed at once "
        "(default 0: max(128, 2 x known nodes))",
    )
    add(
        "--cluster-max-handshakes-per-ip",
        type=int,
        metavar="N",
        help="the same from one source address (default 0: max(16, 1 + nodes known there))",
    )


def config_from_args(
    args: argparse.Namespace, parser: argparse.ArgumentParser | None = None
) -> NodeConfig:
    """Build a NodeConfig: flags given, then the TOML file (if ``--config``).

    The file's keys are checked against ``parser`` (default: the node flags);
    settings it holds that ``args`` lacks (None) are set on ``args`` too.
    Raises ConfigError, one line naming the key or flag.
    """
    if getattr(args, "config", None):
        if parser is None:
            parser = argparse.ArgumentParser()
            add_node_arguments(parser)
        merge_toml(args, parser)
    config = NodeConfig()
    for f in fields(NodeConfig):
        value = getattr(args, f.name, None)
        if value is not None:
            setattr(config, f.name, value)
    check(config)
    return config
