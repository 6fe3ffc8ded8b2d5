"""``bloomcast dashboard`` mistakes: one line on stderr naming the flag, exit 2
for usage, 1 for what goes wrong at run time, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from bloomcast.testing import free_port
from tests.dashboard.conftest import ROOT
from tests.procs import bloomcast_node

pytestmark = pytest.mark.timeout(60)


def dashboard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomcast.cli", "dashboard", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr.rstrip("\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--join", "nonsense"], "--join nonsense: expected HOST:PORT, the client port of a node"),
        (["--join", "127.0.0.1:99999"], "--join 127.0.0.1:99999: expected HOST:PORT"),
        (["--join", "127.0.0.1:7000", "--interval", "0"], "--interval 0.0: expected 0.1..60"),
        (["--join", "127.0.0.1:7000", "--port", "70000"], "--port 70000: a port is 0..65535"),
    ],
)
def test_usage_mistakes_exit_2(args, message):
    result = dashboard(*args)
    assert result.returncode == 2
    assert one_line(result).startswith(f"bloomcast dashboard: {message}")


def test_missing_join_is_a_usage_error():
    result = dashboard()
    assert result.returncode == 2
    assert "--join" in one_line(result)


def test_a_join_address_nobody_answers_exits_1():
    port = free_port()
    result = dashboard("--join", f"127.0.0.1:{port}")
    assert result.returncode == 1
    line = one_line(result)
    assert line.startswith(
        f"bloomcast dashboard: --join 127.0.0.1:{port}: cannot read CLUSTER NODES:"
    )
    assert line.endswith(": Connection refused")


def test_port_in_use_exits_1():
    with bloomcast_node() as node_port, socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = dashboard("--join", f"127.0.0.1:{node_port}", "--port", str(port))
    assert result.returncode == 1
    assert one_line(result) == (
        f"bloomcast dashboard: --port {port}: cannot listen on 127.0.0.1:{port}: "
        "address already in use"
    )


def test_a_cluster_with_a_password_is_refused_without_it_and_shown_with_it(dashboard_of):
    with bloomcast_node("--requirepass", "s3cret") as port:
        refused = dashboard("--join", f"127.0.0.1:{port}")
        assert refused.returncode == 1
        assert one_line(refused) == (
            f"bloomcast dashboard: --join 127.0.0.1:{port}: cannot read CLUSTER NODES: "
            "the node requires AUTH: give --pass (and --user for an ACL user)"
        )
        dash = dashboard_of(port, "--pass", "s3cret")
        snapshot = dash.wait("the node polled", lambda s: s["nodes"] and s["nodes"][0]["up"])
        assert snapshot["nodes"][0]["address"] == f"127.0.0.1:{port}"


def test_an_acl_user_and_the_rediscli_auth_variable(dashboard_of, tmp_path, monkeypatch):
    acl = tmp_path / "users.acl"
    acl.write_text("user default off\nuser watcher on >w4tch +info +cluster|nodes\n")
    with bloomcast_node("--aclfile", str(acl)) as port:
        monkeypatch.setenv("REDISCLI_AUTH", "w4tch")
        dash = dashboard_of(port, "--user", "watcher")
        snapshot = dash.wait("the node polled", lambda s: s["nodes"] and s["nodes"][0]["up"])
        assert snapshot["nodes"][0]["up"]
        monkeypatch.delenv("REDISCLI_AUTH")
        result = dashboard("--join", f"127.0.0.1:{port}", "--user", "watcher")
        assert result.returncode == 2
        assert one_line(result) == (
            "bloomcast dashboard: --user needs --pass (or REDISCLI_AUTH): AUTH takes both"
        )
