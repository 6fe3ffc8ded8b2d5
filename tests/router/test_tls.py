"""Client TLS (router/tls.py) with certificates made in the test (trustme):
redis-py with ssl=True and redis-cli --tls subscribe and publish through the
TLS port while the plain port serves the same node; tls-auth-clients yes /
optional / no; a plain client on the TLS port, and a client without a
certificate, get what redis-server 7.0.15 gives them (nothing, closed), and
are counted in INFO tls_handshake_failures; bad TLS settings stop the node
with one line."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys

import pytest
import redis
import trustme

from bloomcast.testing import free_port
from tests.differential.oracle import oracle_server, redis_only
from tests.procs import bloomcast_node, read_quiet

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@example")
    d = tmp_path_factory.mktemp("tls")
    paths = {
        "ca": d / "ca.pem",
        "cert": d / "server.pem",
        "key": d / "server.key",
        "client_cert": d / "client.pem",
        "client_key": d / "client.key",
    }
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    server.private_key_pem.write_to_path(str(paths["key"]))
    client.cert_chain_pems[0].write_to_path(str(paths["client_cert"]))
    client.private_key_pem.write_to_path(str(paths["client_key"]))
    return {k: str(v) for k, v in paths.items()}


def _tls_args(certs: dict, port: int, auth: str = "yes") -> list[str]:
    return [
        "--tls-port", str(port), "--tls-cert-file", certs["cert"],
        "--tls-key-file", certs["key"], "--tls-ca-cert-file", certs["ca"],
        "--tls-auth-clients", auth,
    ]  # fmt: skip


def _tls_client(certs: dict, port: int, with_cert: bool = True) -> redis.Redis:
    kwargs = {"ssl_certfile": certs["client_cert"], "ssl_keyfile": certs["client_key"]}
    return redis.Redis(
        port=port,
        ssl=True,
        ssl_ca_certs=certs["ca"],
        **(kwargs if with_cert else {}),
        socket_timeout=5,
    )


def test_redis_py_over_tls_beside_the_plain_port(certs):
    tls_port = free_port()
    with bloomcast_node(*_tls_args(certs, tls_port)) as port:
        sub = _tls_client(certs, tls_port).pubsub()
        sub.subscribe("news")
        assert sub.get_message(timeout=2)["type"] == "subscribe"
        assert redis.Redis(port=port).publish("news", "plain") == 1  # plain port, same node
        assert _tls_client(certs, tls_port).publish("news", "tls") == 1
        got = [sub.get_message(timeout=2)["data"] for _ in range(2)]
        assert got == [b"plain", b"tls"]
        # CLIENT INFO over TLS: the raw socket's descriptor, reading (router/tls.py)
        info = _tls_client(certs, tls_port).client_info()
        assert (
            int(info["fd"]) > 2 and info["events"] == "r" and info["laddr"].endswith(f":{tls_port}")
        )


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-cli (redis-tools)")
def test_redis_cli_tls(certs):
    tls_port = free_port()
    with bloomcast_node(*_tls_args(certs, tls_port)):
        cli = ["redis-cli", "--tls", "--cacert", certs["ca"], "--cert", certs["client_cert"]]
        cli += ["--key", certs["client_key"], "-p", str(tls_port)]
        out = subprocess.run([*cli, "PING"], capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "PONG"
        out = subprocess.run([*cli, "PUBLISH", "x", "y"], capture_output=True, text=True)
        assert out.stdout.strip() == "0"


@pytest.mark.parametrize("auth, allowed", [("yes", False), ("optional", True), ("no", True)])
def test_a_client_without_a_certificate(certs, auth, allowed):
    tls_port = free_port()
    with bloomcast_node(*_tls_args(certs, tls_port, auth)):
        client = _tls_client(certs, tls_port, with_cert=False)
        if allowed:
            assert client.ping() is True
        else:
            with pytest.raises(redis.ConnectionError):
                client.ping()


def _plain_on_tls(port: int) -> str:
    """What a plain client sees: a reply, or the connection ended without one."""
    with socket.create_connection(("127.0.0.1", port), 5) as s:
        s.sendall(b"PING\r\n")
        try:
            got, closed = read_quiet(s, 0.5)
        except ConnectionResetError:
            return "ended, no reply"
        # (Redis resets the connection, the node closes it: both end it)
        return "ended, no reply" if closed and not got else f"{got!r} closed={closed}"


def _no_cert_handshake(port: int, ca: str) -> str:
    context = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), 5) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(b"PING\r\n")
                got = s.recv(100)
        except (ssl.SSLError, OSError):
            got = b""
        # (under TLS 1.3 the refusal comes after the client's side of the
        # handshake: Redis drops the connection, the node sends its alert)
        return "ended, no reply" if not got else repr(got)


@redis_only
def test_refusals_end_the_connection_without_a_reply_as_redis(certs):
    node_tls, redis_tls = free_port(), free_port()
    with (
        oracle_server(*_tls_args(certs, redis_tls)),
        bloomcast_node(*_tls_args(certs, node_tls)),
    ):
        assert _plain_on_tls(node_tls) == _plain_on_tls(redis_tls)
        assert _no_cert_handshake(node_tls, certs["ca"]) == _no_cert_handshake(
            redis_tls, certs["ca"]
        )


def test_refused_handshakes_are_counted_in_info(certs):
    tls = free_port()
    with bloomcast_node(*_tls_args(certs, tls)) as port, redis.Redis(port=port) as plain:
        assert _plain_on_tls(tls) == "ended, no reply"
        assert _no_cert_handshake(tls, certs["ca"]) == "ended, no reply"
        with _tls_client(certs, tls) as client:
            assert client.ping()  # a good client on the same port still gets in
        assert plain.info("stats")["tls_handshake_failures"] == 2


@pytest.mark.parametrize(
    "drop, words",
    [("--tls-key-file", "--tls-key-file"), ("--tls-ca-cert-file", "--tls-ca-cert-file")],
)
def test_bad_tls_settings_stop_the_node_with_one_line(certs, drop, words):
    args = _tls_args(certs, free_port())
    i = args.index(drop)
    del args[i : i + 2]
    cmd = [sys.executable, "-m", "bloomcast.cli", "node", "--no-bus", "--port", str(free_port())]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "TLS" in lines[0] and words in lines[0]
