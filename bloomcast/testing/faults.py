"""Fault harnesses over real node processes: every bus behind a :class:`FaultProxy`,
process faults (kill -9 + restart, SIGSTOP / SIGCONT), and a cable pull
between network namespaces.

Why: the forwarding sessions (cluster_bus/session.py) promise that a link
fault loses nothing inside the replay window and that any loss beyond it is
counted exactly (redis/redis #122). These harnesses make each fault happen to
real processes on real sockets, so the :mod:`bloomcast.testing.ledger` can
check the promise message by message.

- :class:`ProxiedCluster`: node i runs with ``--cluster-port REAL_i
  --cluster-announce-bus-port PROXY_i`` and joins through the seeds' proxies,
  so every bus connection *to* node i goes through ``proxies[i]``.
- :func:`pause` / :func:`resume`: SIGSTOP / SIGCONT a node (a GC pause, a VM
  freeze: sockets stay open, nothing is read).
- :class:`NetnsCluster`: node i in its own network namespace, joined by a veth
  pair to a bridge in a hub namespace (addresses in a private /24 that exists
  only inside these namespaces; the root namespace gets an ``unreachable``
  route for it first, so no packet to it can leave this machine by the
  default route). :meth:`NetnsCluster.cable` sets node i's veth down / up: no
  RST, the connections just go silent; :meth:`NetnsCluster.partition` cuts
  the bus between groups of nodes (blackhole routes: silence again, while
  clients in the hub still reach every node), :meth:`NetnsCluster.one_way`
  one direction between two nodes, and :meth:`NetnsCluster.reset_links`
  resets the TCP connections between two nodes (``ss -K``: an RST each way).
  Needs root and ``ip`` (:func:`netns_unavailable` names what is missing).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis

from bloomcast.testing.local_cluster import LocalCluster
from bloomcast.testing.ports import free_ports
from bloomcast.testing.process import parse_info
from bloomcast.testing.proxy import FaultProxy

T = TypeVar("T")


class ProxiedCluster(LocalCluster):
    """A :class:`LocalCluster` whose every bus port is reached through its own
    :class:`FaultProxy` (``proxies[i]``, listening on ``announce_ports[i]``)."""

    def __init__(self, nodes: int, **kwargs: Any) -> None:
        super().__init__(nodes, **kwargs)
        if kwargs.get("base_port") is None:
            # all 3N ports from one call: distinct (separate calls may repeat one)
            picked = free_ports(3 * nodes, self.host)
            self.ports, self.bus_ports = picked[:nodes], picked[nodes : 2 * nodes]
            proxy_ports = picked[2 * nodes :]
        else:
            proxy_ports = free_ports(nodes, self.host)
        self.proxies = [
            FaultProxy(self.bus_ports[i], proxy_ports[i], host=self.host) for i in range(nodes)
        ]
        self.announce_ports = [p.port for p in self.proxies]
        self._proxies_started = False

    def seed_port(self, j: int) -> int:
        return self.announce_ports[j]  # joins go through the proxies too

    def node_args(self, i: int) -> list[str]:
        announce = ["--cluster-announce-bus-port", str(self.announce_ports[i])]
        return [*super().node_args(i), *announce]

    def start(self, timeout: float = 60.0) -> None:
        if not self._proxies_started:
            for proxy in self.proxies:
                proxy.start()
            self._proxies_started = True
        super().start(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
        if self._proxies_started:
            for proxy in self.proxies:
                proxy.stop()
            self._proxies_started = False


def pause(cluster: LocalCluster, i: int) -> None:
    """SIGSTOP node ``i``: its sockets stay open, nothing is read or written.
    Returns once the kernel shows it stopped (``/proc/<pid>/stat`` state T)."""
    proc = cluster.processes[i]
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    stat = f"/proc/{proc.pid}/stat"
    for _ in range(500):
        with open(stat, "rb") as f:  # "pid (comm) S ...": the state follows the last ")"
            if f.read().rpartition(b")")[2].split()[0] == b"T":
                return
        time.sleep(0.01)
    raise AssertionError(f"node {i} (pid {proc.pid}) not stopped 5 s after SIGSTOP")


def resume(cluster: LocalCluster, i: int) -> None:
    """SIGCONT node ``i``."""
    proc = cluster.processes[i]
    assert proc is not None
    os.kill(proc.pid, signal.SIGCONT)


def info(cluster: LocalCluster, i: int) -> dict[str, str]:
    """Node ``i``'s whole INFO (CLUSTER INFO fields included) as strings."""
    with cluster.client(i, socket_timeout=5) as r:
        return parse_info(r.execute_command("INFO", "everything"))


# -- network namespaces -------------------------------------------------------------

_CLONE_NEWNET = 0x40000000
SUBNET = "10.213.7"  # exists only inside the namespaces created here


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be used here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (euid is not 0)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"bcprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def enter_netns(name: str) -> None:
    """Move the calling thread into network namespace ``name`` (setns(2) is per
    thread: sockets it creates afterwards live there)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({name}): {os.strerror(err)}")
    finally:
        os.close(fd)


def in_netns(name: str, fn: Callable[[], T], timeout: float = 30.0) -> T:
    """Run ``fn`` in a fresh thread inside namespace ``name`` and return its result."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            enter_netns(name)
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if "error" in box:
        raise box["error"]
    if "value" not in box:
        raise TimeoutError(f"in_netns({name}) took over {timeout} s")
    return box["value"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class NetnsCluster(LocalCluster):
    """N nodes, node i in namespace ``<prefix>n<i>`` at ``SUBNET.<i+1>``, every
    veth on a bridge in ``<prefix>hub`` (``SUBNET.254``). Clients reach the
    nodes from threads inside the hub (:meth:`connector`, :func:`in_netns`).
    Every namespace is deleted on :meth:`stop`, also after a failed start."""

    def __init__(self, nodes: int, *, port: int = 7000, **kwargs: Any) -> None:
        super().__init__(nodes, base_port=port, host="0.0.0.0", **kwargs)
        self.ports = [port] * nodes
        self.bus_ports = [port + 10000] * nodes
        self.prefix = f"bcf{os.getpid() % 100000}"
        self.hub = f"{self.prefix}hub"
        self.namespaces = [f"{self.prefix}n{i}" for i in range(nodes)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(nodes)]
        self._made: list[str] = []
        self._guarded = False
        #: blackhole routes in place: (from node, to node)
        self.cuts: set[tuple[int, int]] = set()

    def _setup(self) -> None:
        # before any traffic: the test subnet is unreachable from the root
        # namespace, so nothing addressed to it can leave by the default route
        _ip("route", "replace", "unreachable", f"{SUBNET}.0/24")
        self._guarded = True
        hub = self.hub
        _ip("netns", "add", hub)
        self._made.append(hub)
        _ip("-n", hub, "link", "set", "lo", "up")
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "addr", "add", f"{SUBNET}.254/24", "dev", "br0")
        _ip("-n", hub, "link", "set", "br0", "up")
        for i, ns in enumerate(self.namespaces):
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", hub, "link", "add", f"vh{i}", "type", "veth", "peer", "name", "eth0",
                "netns", ns)  # fmt: skip
            _ip("-n", hub, "link", "set", f"vh{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.addresses[i]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def node_args(self, i: int) -> list[str]:
        args = [
            "ip", "netns", "exec", self.namespaces[i],
            self.python, "-m", "bloomcast.cli", "node",
            "--bind", self.addresses[i],
            "--port", str(self.ports[i]),
            # a private test network, reached from the host namespace: no
            # protected mode (it would refuse those clients and this bus)
            "--protected-mode", "no",
        ]  # fmt: skip
        for j in [j for j in range(self.size) if j != i][:2]:
            args += ["--join", f"{self.addresses[j]}:{self.bus_ports[j]}"]
        return args + self.extra_args

    def start(self, timeout: float = 60.0) -> None:
        self._setup()
        super().start(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        try:
            super().stop(timeout)
        finally:
            for ns in reversed(self._made):
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            self._made.clear()
            self.cuts.clear()
            if self._guarded:
                subprocess.run(
                    ["ip", "route", "del", "unreachable", f"{SUBNET}.0/24"], capture_output=True
                )
                self._guarded = False

    def cable(self, i: int, up: bool) -> None:
        """Pull (``up=False``) or plug back node ``i``'s cable: its veth on the bridge."""
        _ip("-n", self.hub, "link", "set", f"vh{i}", "up" if up else "down")

    def one_way(self, i: int, j: int, cut: bool = True) -> None:
        """Drop (``cut``) or pass again every packet node ``i`` sends node ``j``
        (a blackhole route in ``i``'s namespace: silence, no ICMP, no RST).
        TCP between them stalls both ways (``j``'s segments are never acked)."""
        if cut == ((i, j) in self.cuts):
            return
        verb = "add" if cut else "del"
        _ip("-n", self.namespaces[i], "route", verb, "blackhole", f"{self.addresses[j]}/32")
        if cut:
            self.cuts.add((i, j))
        else:
            self.cuts.discard((i, j))

    def partition(self, *groups: Sequence[int]) -> None:
        """Cut the bus between every two nodes of different ``groups`` (both
        ways); nodes in no group keep their links. Clients in the hub still
        reach every node."""
        for a, group in enumerate(groups):
            for other in groups[a + 1 :]:
                for i in group:
                    for j in other:
                        self.one_way(i, j)
                        self.one_way(j, i)

    def heal(self, pairs: Sequence[tuple[int, int]] | None = None) -> None:
        """Remove the cuts between these (from, to) pairs (default: all of them)."""
        for i, j in list(self.cuts if pairs is None else pairs):
            self.one_way(i, j, cut=False)

    def reset_links(self, i: int, j: int) -> int:
        """Reset every TCP connection between nodes ``i`` and ``j`` (``ss -K`` in
        ``i``'s namespace: each socket is destroyed and an RST goes out).
        Returns how many sockets were killed."""
        out = subprocess.run(
            ["ip", "netns", "exec", self.namespaces[i], "ss", "-K", "-t", "dst", self.addresses[j]],
            capture_output=True,
            text=True,
        )
        return max(0, len(out.stdout.strip().splitlines()) - 1)

    def connector(self, i: int, **kwargs: Any) -> Callable[[], redis.Redis]:
        """A ``connect`` for :class:`~bloomcast.testing.ledger.Publisher` /
        ``Subscriber``: enters the hub namespace (that thread stays there) and
        returns a client to node ``i``."""
        kwargs.setdefault("socket_timeout", 10)

        def connect() -> redis.Redis:
            enter_netns(self.hub)
            return redis.Redis(host=self.addresses[i], port=self.ports[i], **kwargs)

        return connect

    def client(self, i: int, **kwargs: Any) -> redis.Redis:
        raise RuntimeError("use connector(i) from a thread, or in_netns(cluster.hub, ...)")

    def cluster_info(self, i: int) -> dict[str, str]:
        return self.info(i, "CLUSTER", "INFO")

    def info(self, i: int, *command: str) -> dict[str, str]:
        """A command's INFO-style reply from node ``i`` (default: INFO everything)."""
        args: Sequence[str] = command or ("INFO", "everything")

        def ask() -> dict[str, str]:
            with redis.Redis(
                host=self.addresses[i], port=self.ports[i], socket_timeout=2,
                socket_connect_timeout=2,
            ) as r:  # fmt: skip
                return parse_info(r.execute_command(*args))

        return in_netns(self.hub, ask)
