"""What a node tells clients and peers about where nodes are (issue 27 item 6,
issue 30 items 1, 2, 4): TLS ports to TLS clients, Redis's announce settings
and preferred endpoint type compared with redis-server 7.0.15 itself, several
bind addresses, and a node identity kept across kill -9 by
``--cluster-config-file``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
import redis
import trustme
from redis.cluster import ClusterNode, RedisCluster

from bloomcast.testing import LocalCluster, free_port, free_ports, wait_port
from bloomcast.testing.servers import redis_server_path
from tests.procs import ignore_sigint

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

NT = ["--node-timeout-ms", "2000"]


def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@example")
    d = tmp_path_factory.mktemp("tls")
    paths = {k: d / f"{k}.pem" for k in ("ca", "cert", "key", "client_cert", "client_key")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    server.private_key_pem.write_to_path(str(paths["key"]))
    client.cert_chain_pems[0].write_to_path(str(paths["client_cert"]))
    client.private_key_pem.write_to_path(str(paths["client_key"]))
    return {k: str(v) for k, v in paths.items()}


class TlsCluster(LocalCluster):
    """A LocalCluster whose node i also serves TLS clients on ``tls_ports[i]``."""

    def __init__(self, n: int, certs: dict, **kwargs) -> None:
        super().__init__(n, **kwargs)
        self.certs = certs
        self.tls_ports = free_ports(n)

    def node_args(self, i: int) -> list[str]:
        c = self.certs
        tls = ["--tls-port", str(self.tls_ports[i]), "--tls-cert-file", c["cert"]]
        tls += ["--tls-key-file", c["key"], "--tls-ca-cert-file", c["ca"]]
        return [*super().node_args(i), *tls]


def test_tls_clients_are_told_tls_ports(certs):
    """A client on the TLS port gets each node's TLS port in CLUSTER SLOTS /
    NODES and SHARDS lists both, so redis-py's RedisCluster(ssl=True) works
    through one seed; a plaintext client still gets plaintext ports."""
    with TlsCluster(3, certs, extra_args=NT) as c:
        tls = dict(
            ssl=True,
            ssl_ca_certs=certs["ca"],
            ssl_certfile=certs["client_cert"],
            ssl_keyfile=certs["client_key"],
        )
        with redis.Redis(port=c.tls_ports[0], **tls) as r:
            # a peer gets slots once verified at its announced address (issue
            # 26), which can follow the cluster's readiness by a cron step or
            # two under load (CI: one node listed): as a cluster client, retry
            def all_three():
                slots = r.execute_command("CLUSTER", "SLOTS")
                return slots if len(slots) == 3 else None

            slots = wait_for(all_three, 20, "three nodes in CLUSTER SLOTS")
            nodes = r.execute_command("CLUSTER", "NODES")
        assert sorted(int(s[2][1]) for s in slots) == sorted(c.tls_ports)
        text = nodes if isinstance(nodes, str) else nodes.decode()
        assert sorted(int(re.search(r":(\d+)@", ln)[1]) for ln in text.splitlines()) == sorted(
            c.tls_ports
        )
        with redis.Redis(port=c.ports[0]) as r:
            assert sorted(int(s[2][1]) for s in r.execute_command("CLUSTER", "SLOTS")) == sorted(
                c.ports
            )
            shards = r.execute_command("CLUSTER", "SHARDS")
        details = [shard[b"nodes"][0] for shard in shards]  # redis-py parses the maps
        assert sorted((d[b"port"], d[b"tls-port"]) for d in details) == sorted(
            zip(c.ports, c.tls_ports, strict=True)
        )
        rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", c.tls_ports[0])], **tls)
        try:
            assert sorted(n.port for n in rc.get_nodes()) == sorted(c.tls_ports)
            p = rc.pubsub()
            p.ssubscribe("orders{42}")
            assert p.get_sharded_message(timeout=5)["type"] == "ssubscribe"
            rc.spublish("orders{42}", "paid")
            got = wait_for(lambda: p.get_sharded_message(timeout=0.2), 10, "the smessage")
            assert got["data"] == b"paid"
            p.close()
        finally:
            rc.close()


def redis_cluster_node(*settings: str) -> tuple[subprocess.Popen, int]:
    """A one-node Redis 7.0.15 Cluster owning every slot, with ``settings``."""
    port, bus = free_ports(2)
    argv = [redis_server_path() or "redis-server", "--port", str(port), "--save", ""]
    argv += ["--appendonly", "no", "--cluster-enabled", "yes", "--cluster-port", str(bus)]
    argv += ["--cluster-config-file", f"nodes-addr-{port}.conf", "--dir", "/tmp", *settings]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, preexec_fn=ignore_sigint)
    wait_port(port, proc)
    with redis.Redis(port=port) as r:
        r.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        wait_for(lambda: r.execute_command("CLUSTER", "INFO").find(b"cluster_state:ok") >= 0, 10,
                 "the Redis node ok")  # fmt: skip
    return proc, port


@pytest.mark.skipif(redis_server_path() is None, reason="redis-server 7.0.15 is not installed")
@pytest.mark.parametrize("kind", ["ip", "hostname", "unknown-endpoint"])
def test_cluster_slots_and_shards_endpoints_as_redis(kind):
    """cluster-announce-ip / -port / -hostname and cluster-preferred-endpoint-
    type: CLUSTER SLOTS and SHARDS of a one-node cluster, RESP2 and RESP3,
    against Redis 7.0.15 with the same settings (ids and ports masked)."""
    settings = ["--cluster-announce-ip", "10.1.2.3", "--cluster-announce-port", "7777"]
    settings += ["--cluster-announce-hostname", "n1.example"]
    settings += ["--cluster-preferred-endpoint-type", kind]
    proc, redis_port = redis_cluster_node(*settings)
    node_port, bus = free_ports(2)
    argv = [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(node_port)]
    node = subprocess.Popen(
        [*argv, "--cluster-port", str(bus), *settings],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=ignore_sigint,
    )
    try:
        wait_port(node_port, node)
        for protocol in (2, 3):
            replies = []
            for port in (redis_port, node_port):
                with redis.Redis(port=port, protocol=protocol) as r:
                    slots = r.execute_command("CLUSTER", "SLOTS")
                    shards = r.execute_command("CLUSTER", "SHARDS")
                    myid = r.execute_command("CLUSTER", "MYID")
                replies.append(mask(repr((slots, shards)), myid))
            assert replies[1] == replies[0], (kind, protocol)
    finally:
        proc.terminate()
        node.terminate()
        proc.wait(10)
        node.wait(10)


def mask(text: str, node_id: bytes | str) -> str:
    nid = node_id.decode() if isinstance(node_id, bytes) else node_id
    return text.replace(nid, "<id>")


def test_several_bind_addresses_and_one_that_may_be_missing():
    """Redis's bind syntax: a node listens on every address given (as separate
    words, or in one quoted string, which a word starting with '-' needs on a
    command line), and skips one prefixed with '-' that this host lacks."""
    port, bus = free_ports(2)
    argv = [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(port)]
    argv += ["--cluster-port", str(bus), "--bind", "127.0.0.1", "127.0.0.2 -192.0.2.77"]
    argv += ["--protected-mode", "no"]  # 192.0.2.77 is beyond loopback
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, preexec_fn=ignore_sigint)
    try:
        wait_port(port, proc)
        for host in ("127.0.0.1", "127.0.0.2"):
            with redis.Redis(host=host, port=port) as r:
                assert r.ping()
                assert r.config_get("bind") == {"bind": "127.0.0.1 127.0.0.2 -192.0.2.77"}
    finally:
        proc.terminate()
        proc.wait(10)


class IdentityCluster(LocalCluster):
    """Every node with its own --cluster-config-file under ``conf_dir``."""

    def __init__(self, n: int, conf_dir, **kwargs) -> None:
        super().__init__(n, **kwargs)
        self.conf_dir = conf_dir

    def node_args(self, i: int) -> list[str]:
        return [*super().node_args(i), "--cluster-config-file", str(self.conf_dir / f"{i}.conf")]


def myid(c: LocalCluster, i: int) -> str:
    with c.client(i) as r:
        return r.execute_command("CLUSTER", "MYID").decode()


def test_a_node_keeps_its_id_across_kill_9_and_rejoins_the_nodes_it_knew(tmp_path):
    """--cluster-config-file: node 2 killed and restarted keeps its node id,
    rejoins without --join (it redials the nodes in its file), and a second
    node given the same file refuses to start (one line)."""
    with IdentityCluster(3, tmp_path, extra_args=NT, log_dir=tmp_path / "logs") as c:
        ids = [myid(c, i) for i in range(3)]
        path = tmp_path / "2.conf"  # saved on the bus's next cron step, not at once
        wait_for(lambda: all(i in path.read_text() for i in ids), 10, "the nodes file's peers")
        conf = path.read_text()
        assert conf.startswith(f"{ids[2]} ") and ids[0] in conf and ids[1] in conf
        other = subprocess.run(
            [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(free_port()),
             "--cluster-port", str(free_port()), "--cluster-config-file", str(tmp_path / "2.conf")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert other.returncode == 1
        assert other.stderr.strip().splitlines() == [
            f"bloomcast node: Sorry, the cluster configuration file {tmp_path / '2.conf'} is "
            "already used by a different bloomcast node. Please make sure that different nodes "
            "use different cluster configuration files."
        ]
        c.kill(2)
        args = c.node_args(2)
        while "--join" in args:  # no seeds: it must find the cluster from its file
            at = args.index("--join")
            del args[at : at + 2]
        c.start_node(2, args)
        c.wait_ready(60)
        assert [myid(c, i) for i in range(3)] == ids
        with c.client(0) as r:
            info = r.execute_command("CLUSTER", "INFO").decode()
        assert re.search(r"cluster_stats_sessions_restarted:[1-9]", info), info


def test_a_restart_from_a_file_with_hostile_peer_lines_keeps_the_nodes_own_id(tmp_path):
    """Issue 49 finding 4, as probed: the lines the old writer wrote for a
    peer announcing the hostname ``evil myself,master`` (the node took the
    peer's id at restart) or one with a newline (the restart failed). The
    node starts as itself; each line is refused with its reason in the log
    and counted in CLUSTER INFO."""
    me, evil, newline = (os.urandom(20).hex() for _ in range(3))
    port, bus, p1, b1 = free_ports(4)
    path = tmp_path / "nodes.conf"
    path.write_text(
        f"{me} 127.0.0.1:{port}@{bus} myself,master - 0 0 0 connected\n"
        f"{evil} 127.0.0.1:{p1}@{b1},evil myself,master master - 0 0 0 connected\n"
        f"{newline} 127.0.0.1:{p1}@{b1},bad\nname master - 0 0 0 connected\n"
        "vars currentEpoch 0 lastVoteEpoch 0 incarnation 3\n"
    )
    log = tmp_path / "node.log"
    argv = [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(port)]
    argv += ["--cluster-port", str(bus), "--cluster-config-file", str(path), *NT]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, preexec_fn=ignore_sigint)
    try:
        wait_port(port, proc)
        with redis.Redis(port=port) as r:
            assert r.execute_command("CLUSTER", "MYID") == me.encode()
            info = r.execute_command("CLUSTER", "INFO").decode()
        assert "cluster_nodes_file_lines_refused:3" in info.split("\r\n")
        text = log.read_text()
        assert f"{path}:2: line refused: 9 fields, not 8" in text
        assert f"{path}:3: line refused: 2 fields, not 8" in text  # the newline's two halves
        assert f"{path}:4: line refused: 7 fields, not 8" in text
    finally:
        proc.terminate()
        proc.wait(10)
