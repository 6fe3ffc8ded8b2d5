"""A 3-host deployment as an operator builds it from the README (issue 30's done
when): each host a network namespace with its own address on a bridge, every
node bound to 0.0.0.0, a cluster secret, client TLS; host 3 sits behind a
port forwarder on the hub (its client, TLS and bus ports reachable from the
other hosts only through the forwarder), so it announces the forwarder's
address (--cluster-announce-ip / -port / -tls-port / -bus-port).

Checked from a client host (the hub namespace): every node lists itself at
its own address, not 127.0.0.1; CLUSTER SLOTS gives host 3's announced
address; redis-cli -c, redis-py RedisCluster (plain and TLS) and the
dashboard reach every node through one seed, the forwarder carrying host 3's
traffic; kill -9 + restart of a node with --cluster-config-file keeps its id.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis
import trustme
from redis.cluster import ClusterNode, RedisCluster

from bloomcast.testing.faults import SUBNET, NetnsCluster, in_netns
from bloomcast.testing.proxy import FaultProxy

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(300)]

HUB = f"{SUBNET}.254"
PORT, TLS_PORT, BUS_PORT = 7000, 7100, 17000
#: the forwarder's ports on the hub for host 3's client, TLS and bus ports
FWD = {PORT: 20000, TLS_PORT: 20002, BUS_PORT: 20001}
SECRET = "multihost-secret"


class Hosts(NetnsCluster):
    """Three nodes bound to 0.0.0.0; node 2 announces the hub's forwarder."""

    def __init__(self, certs: dict[str, str], conf_dir: Path, **kwargs: Any) -> None:
        super().__init__(3, port=PORT, **kwargs)
        self.certs = certs
        self.conf_dir = conf_dir
        self.forwarders: list[FaultProxy] = []

    def node_args(self, i: int) -> list[str]:
        args = super().node_args(i)
        at = args.index("--bind")
        args[at + 1] = "0.0.0.0"
        seeds = []
        for j in (j for j in range(3) if j != i):
            host, bus = (HUB, FWD[BUS_PORT]) if j == 2 else (self.addresses[j], BUS_PORT)
            seeds.append(f"{host}:{bus}")
        while "--join" in args:
            k = args.index("--join")
            del args[k : k + 2]
        for seed in seeds:
            args += ["--join", seed]
        c = self.certs
        args += ["--cluster-secret", SECRET, "--node-timeout-ms", "2000"]
        args += ["--tls-port", str(TLS_PORT), "--tls-cert-file", c["cert"]]
        args += ["--tls-key-file", c["key"], "--tls-auth-clients", "no"]
        args += ["--cluster-config-file", str(self.conf_dir / f"node{i}.conf")]
        if i == 2:
            args += ["--cluster-announce-ip", HUB, "--cluster-announce-port", str(FWD[PORT])]
            args += ["--cluster-announce-tls-port", str(FWD[TLS_PORT])]
            args += ["--cluster-announce-bus-port", str(FWD[BUS_PORT])]
        return args

    def _setup(self) -> None:
        super()._setup()
        # host 3 is reachable from the other hosts only through the forwarder
        for i in (0, 1):
            for port in (PORT, TLS_PORT, BUS_PORT):
                subprocess.run(
                    ["ip", "-n", self.namespaces[i], "rule", "add", "to", f"{self.addresses[2]}/32",
                     "ipproto", "tcp", "dport", str(port), "prohibit"],
                    check=True, capture_output=True,
                )  # fmt: skip
        for port, listen in FWD.items():
            proxy = FaultProxy(
                port, listen, host=HUB, target_host=self.addresses[2], bus_framing=False,
                netns=self.hub,
            )  # fmt: skip
            self.forwarders.append(proxy.start())

    def stop(self, timeout: float = 10.0) -> None:
        for proxy in self.forwarders:
            proxy.stop()
        self.forwarders.clear()
        super().stop(timeout)

    def wait_converged(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                infos = [self.cluster_info(i) for i in range(3)]
            except Exception:
                infos = []
            if infos and all(
                f.get("cluster_known_nodes") == "3" and f.get("cluster_filters_converged") == "1"
                for f in infos
            ):
                return
            assert time.monotonic() < deadline, f"not converged: {infos}"
            time.sleep(0.2)

    def command(self, i: int, *args: str, **kwargs: Any) -> Any:
        host, port = (HUB, FWD[PORT]) if i == 2 else (self.addresses[i], PORT)

        def ask() -> Any:
            with redis.Redis(host=host, port=port, socket_timeout=5, **kwargs) as r:
                return r.execute_command(*args)

        return in_netns(self.hub, ask)


@pytest.fixture
def certs(tmp_path):
    ca = trustme.CA()
    server = ca.issue_cert(HUB, *(f"{SUBNET}.{i}" for i in (1, 2, 3)))
    paths = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "cert.pem", "key": tmp_path / "key.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    server.private_key_pem.write_to_path(str(paths["key"]))
    return {k: str(v) for k, v in paths.items()}


@pytest.mark.usefixtures("namespaces")
def test_three_hosts_one_behind_a_forwarder(certs, tmp_path):
    with Hosts(certs, tmp_path, log_dir=tmp_path / "logs") as hosts:
        ids = [hosts.command(i, "CLUSTER", "MYID").decode() for i in range(3)]
        # every node lists itself at its own address (bound to 0.0.0.0): learned from a MEET
        for i in (0, 1):
            mine = next(
                ln for ln in hosts.command(i, "CLUSTER", "NODES").decode().splitlines()
                if "myself" in ln
            )  # fmt: skip
            assert mine.split()[1].startswith(f"{hosts.addresses[i]}:{PORT}@"), mine
        slots = hosts.command(0, "CLUSTER", "SLOTS")
        seen = {s[2][2].decode(): (s[2][0].decode(), int(s[2][1])) for s in slots}
        assert seen == {
            ids[0]: (hosts.addresses[0], PORT),
            ids[1]: (hosts.addresses[1], PORT),
            ids[2]: (HUB, FWD[PORT]),
        }
        assert_clients_work(hosts, certs)
        assert_dashboard_sees_three_nodes(hosts)
        # kill -9 + restart with --cluster-config-file: the same id, back in the cluster
        hosts.kill(1)
        hosts.start_node(1)
        hosts.wait_converged()
        assert hosts.command(1, "CLUSTER", "MYID").decode() == ids[1]


def assert_clients_work(hosts: Hosts, certs: dict[str, str]) -> None:
    """redis-cli -c and RedisCluster (plain, then TLS) through seed node 0."""
    accepted = {p: fwd.counts["accepted"] for p, fwd in zip(FWD, hosts.forwarders, strict=True)}

    def cluster(tls: bool) -> list[bytes]:
        kwargs: dict[str, Any] = {}
        port = TLS_PORT if tls else PORT
        if tls:
            kwargs = {"ssl": True, "ssl_ca_certs": certs["ca"]}
        rc = RedisCluster(startup_nodes=[ClusterNode(hosts.addresses[0], port)], **kwargs)
        try:
            nodes = sorted((n.host, n.port) for n in rc.get_nodes())
            fwd = FWD[TLS_PORT] if tls else FWD[PORT]
            assert nodes == sorted(
                [(hosts.addresses[0], port), (hosts.addresses[1], port), (HUB, fwd)]
            )
            p = rc.pubsub()
            # a shard channel whose slot node 2 serves: the client goes to the forwarder
            channel = next(
                f"s{{{k}}}" for k in range(10_000)
                if rc.get_node_from_key(f"s{{{k}}}").port == fwd
            )  # fmt: skip
            p.ssubscribe(channel)
            assert p.get_sharded_message(timeout=5)["type"] == "ssubscribe"
            rc.spublish(channel, "through the forwarder")
            got = None
            deadline = time.monotonic() + 10
            while got is None and time.monotonic() < deadline:
                got = p.get_sharded_message(timeout=0.2)
            p.close()
            return [got["data"]] if got else []
        finally:
            rc.close()

    assert in_netns(hosts.hub, lambda: cluster(False)) == [b"through the forwarder"]
    assert in_netns(hosts.hub, lambda: cluster(True)) == [b"through the forwarder"]
    for port, fwd in zip(FWD, hosts.forwarders, strict=True):
        if port == BUS_PORT:  # the other nodes reach node 2's bus through it
            assert fwd.counts["accepted"] > 0
        else:  # the clients reached node 2 at its announced addresses
            assert fwd.counts["accepted"] > accepted[port], port
    cli = subprocess.run(
        ["ip", "netns", "exec", hosts.hub, "redis-cli", "-c", "-h", hosts.addresses[0],
         "-p", str(PORT), "CLUSTER", "NODES"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert cli.returncode == 0 and f"{HUB}:{FWD[PORT]}@{FWD[BUS_PORT]}" in cli.stdout


def assert_dashboard_sees_three_nodes(hosts: Hosts) -> None:
    port = 20080
    dash = subprocess.Popen(
        ["ip", "netns", "exec", hosts.hub, sys.executable, "-m", "bloomcast.cli", "dashboard",
         "--join", f"{hosts.addresses[0]}:{PORT}", "--bind", HUB, "--port", str(port),
         "--interval", "0.5"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def fetch() -> dict[str, Any]:
            with urllib.request.urlopen(f"http://{HUB}:{port}/api/cluster", timeout=5) as r:
                return json.loads(r.read())

        deadline = time.monotonic() + 30
        data: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                data = in_netns(hosts.hub, fetch)
            except OSError:
                time.sleep(0.3)
                continue
            if data["cluster"]["nodes_up"] == 3:
                break
            time.sleep(0.3)
        assert data and data["cluster"]["nodes_up"] == 3, data.get("cluster")
        addresses = sorted(n["address"] for n in data["nodes"])
        assert f"{HUB}:{FWD[PORT]}" in addresses
    finally:
        dash.terminate()
        dash.wait(10)
