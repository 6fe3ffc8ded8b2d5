"""The bus against an attacker (issue 14), with real node processes.

- An outsider without the cluster secret speaks the bus protocol to a node:
  it injects a PUBLISH, announces an all-ones filter at epoch 2^63, spoofs a
  live node's id and answers the handshake with a forged MAC. Each link is
  refused and counted (``cluster_stats_auth_failures``); no subscriber sees
  anything; the outsider never becomes a member.
- With a secret, frames after the handshake are sealed (cluster_bus.seal): a
  proxy on the path alters one, then replays one. Each is refused and
  counted (``cluster_stats_seal_failures``), the link is redialled, and the
  forwarding session replays what was in flight: a ledger of numbered
  messages shows none lost, duplicated or altered.
- ``--tls-cluster yes``: a 3-node cluster forwards over TLS; a process
  without a CA-signed certificate, and one speaking plain TCP, are refused and
  counted (``cluster_stats_tls_handshake_failures``).
"""

from __future__ import annotations

import os
import socket
import ssl
import time

import pytest
import trustme

from bloomcast.testing import LocalCluster
from bloomcast.testing.faults import ProxiedCluster
from cluster_bus.codec import encode, short_id
from cluster_bus.frames import FilterFull, FilterKind, Hello, HelloAuth, MsgType, Publish
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

#: subscribe visibility: a (P)SUBSCRIBE is confirmed once every live peer holds
#: the filter change, so a PUBLISH right after it is routed to the subscriber
VISIBLE = ["--subscribe-visibility-timeout", "5000"]
SECRET = ["--cluster-secret", "s3cret", "--node-timeout-ms", "2000", *VISIBLE]


def field(cluster: LocalCluster, i: int, name: str) -> int:
    return int(cluster.cluster_info(i).get(name, 0))


def speak(port: int, frames: list[bytes], wrap: ssl.SSLContext | None = None) -> bytes:
    """Connect to a bus port, send ``frames`` one by one, read until the node
    closes the link; what it sent back."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        got = b""
        try:
            sock = wrap.wrap_socket(raw) if wrap is not None else raw
        except ssl.SSLError:  # TLS 1.2 fails here; 1.3 on the first read
            return got
        for frame in frames:
            try:
                sock.sendall(frame)
                time.sleep(0.05)
            except OSError:
                break
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except OSError:
            pass
        return got


def subscribed(cluster: LocalCluster, i: int):
    client = cluster.client(i)
    ps = client.pubsub()
    ps.subscribe("secret:payroll")
    ps.psubscribe("secret:*")
    for _ in range(2):
        assert ps.get_message(timeout=5) is not None
    return client, ps


def test_an_outsider_without_the_secret_is_refused_and_counted(tmp_path):
    with LocalCluster(2, extra_args=SECRET, log_dir=tmp_path) as cluster:
        client, ps = subscribed(cluster, 0)
        with client:
            before = field(cluster, 0, "cluster_stats_auth_failures")
            with cluster.client(1) as r1:
                victim = r1.execute_command("CLUSTER", "MYID").decode()
            me = os.urandom(20).hex()
            bogus = short_id(me)

            def hello(node_id: str) -> bytes:
                return encode(Hello(node_id, os.urandom(16)), short_id(node_id))

            inject = encode(Publish(1, 1, False, b"secret:payroll", b"injected"), bogus)
            all_ones = encode(
                FilterFull(FilterKind.CHANNELS, 1024, 7, b"\xff" * 128, 0, 2**63, 0, True), bogus
            )
            forged = encode(HelloAuth(os.urandom(32)), bogus)
            port = cluster.bus_ports[0]
            attempts = [
                [hello(me), inject],  # a PUBLISH before the handshake is done
                [hello(me), all_ones],  # an all-ones filter at a huge epoch
                [hello(me), forged],  # a forged MAC
                [hello(victim), encode(HelloAuth(os.urandom(32)), short_id(victim))],  # spoof
            ]
            for frames in attempts:
                reply = speak(port, frames)
                assert reply[:2] == b"bc" and reply[3] == MsgType.HELLO  # only the HELLO reply
            wait_for(
                lambda: field(cluster, 0, "cluster_stats_auth_failures") == before + 4,
                5,
                "four refused links counted",
            )
            cluster.client(1).publish("secret:payroll", "real")
            msgs = [ps.get_message(timeout=5) for _ in range(2)]
            assert sorted(m["data"] for m in msgs if m) == [b"real", b"real"]
            assert ps.get_message(timeout=0.5) is None  # nothing injected
            assert cluster.cluster_info(0)["cluster_known_nodes"] == "2"
            ps.close()


def test_frames_altered_or_replayed_on_the_path_are_refused_and_nothing_is_lost(tmp_path):
    with ProxiedCluster(2, extra_args=SECRET, log_dir=tmp_path) as cluster:
        cluster.wait_ready(30)
        client, ps = subscribed(cluster, 0)
        with client, cluster.client(1) as pub:
            pub.publish("secret:payroll", "primed")
            assert ps.get_message(timeout=5)["data"] == b"primed"
            ps.get_message(timeout=5)
            got: list[int] = []
            sent = 0
            proxy = cluster.proxies[0]  # every bus link to node 0
            for fault in (proxy.tamper_frames, proxy.repeat_frames):
                seals = sum(field(cluster, i, "cluster_stats_seal_failures") for i in range(2))
                fault(1, int(MsgType.SEALED))
                for _ in range(50):
                    pub.publish("secret:payroll", str(sent))
                    sent += 1
                    time.sleep(0.005)
                deadline = time.monotonic() + 15
                while len(got) < sent and time.monotonic() < deadline:
                    m = ps.get_message(timeout=0.2)
                    if m is not None and m["type"] == "message":
                        got.append(int(m["data"]))
                assert got == list(range(sent))  # none lost, duplicated or reordered
                wait_for(
                    lambda s=seals: (
                        sum(field(cluster, i, "cluster_stats_seal_failures") for i in range(2)) > s
                    ),
                    5,
                    "the refused frame counted",
                )
            assert proxy.counts["frames_tampered"] == 1 and proxy.counts["frames_repeated"] == 1
            ps.close()


@pytest.fixture(scope="module")
def bus_certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bus-tls")
    ca, other = trustme.CA(), trustme.CA()
    paths = {}
    for name, issuer in (("node", ca), ("outsider", other)):
        cert = issuer.issue_cert("127.0.0.1")
        paths[name] = (str(d / f"{name}.pem"), str(d / f"{name}.key"))
        cert.cert_chain_pems[0].write_to_path(paths[name][0])
        cert.private_key_pem.write_to_path(paths[name][1])
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    paths["ca"] = (str(d / "ca.pem"), "")
    return paths


def test_tls_cluster_forwards_and_refuses_peers_without_a_ca_signed_certificate(
    tmp_path, bus_certs
):
    cert, key = bus_certs["node"]
    args = [
        "--tls-cluster", "yes", "--tls-cert-file", cert, "--tls-key-file", key,
        "--tls-ca-cert-file", bus_certs["ca"][0], "--node-timeout-ms", "2000", *VISIBLE,
    ]  # fmt: skip
    with LocalCluster(3, extra_args=args, log_dir=tmp_path) as cluster:
        client, ps = subscribed(cluster, 0)
        with client:
            with cluster.client(2) as r2:
                r2.publish("secret:payroll", "over tls")
            msgs = [ps.get_message(timeout=5) for _ in range(2)]
            assert [m["data"] for m in msgs if m] == [b"over tls", b"over tls"]

            outsider = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            outsider.check_hostname = False
            outsider.verify_mode = ssl.CERT_NONE
            outsider.load_cert_chain(*bus_certs["outsider"])
            me = os.urandom(20).hex()
            hello = encode(Hello(me, os.urandom(16)), short_id(me))
            port = cluster.bus_ports[0]
            before = field(cluster, 0, "cluster_stats_tls_handshake_failures")
            assert speak(port, [hello], wrap=outsider) == b""  # its certificate: another CA
            assert speak(port, [hello]) == b""  # plain TCP on a TLS bus: nothing back
            wait_for(
                lambda: field(cluster, 0, "cluster_stats_tls_handshake_failures") >= before + 2,
                5,
                "both refusals counted",
            )
            assert ps.get_message(timeout=0.5) is None
            assert cluster.cluster_info(0)["cluster_known_nodes"] == "3"
            ps.close()
