"""Protected mode's rules (router/protected.py), its setting (flag, TOML), and
the bus half: a node whose bus would listen beyond loopback without a cluster
secret refuses to start with one line and exit status 1, unless protected
mode is off. (Redis's bytes for clients: tests/differential/test_protected_mode.py.)"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from bloomcast.testing import free_port, stop_process, wait_port
from router.config import NodeConfig, add_node_arguments, config_from_args
from router.protected import DENIED, binds_beyond_loopback, bus_refusal, denies, is_local

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.timeout(120)


def test_only_a_passwordless_protected_node_denies_a_non_loopback_peer():
    assert denies(True, False, "192.0.2.7")
    assert not denies(True, True, "192.0.2.7")  # a password
    assert not denies(False, False, "192.0.2.7")  # protected mode off
    for ip in ("127.0.0.1", "127.8.9.10", "::1"):
        assert is_local(ip) and not denies(True, False, ip)
    assert not is_local("::ffff:127.0.0.1")  # as Redis's connIsLocal
    assert not denies(True, False, "")  # no IP peer (not TCP)
    assert DENIED.startswith(b"-DENIED ") and DENIED.endswith(b"outside.\r\n")


def test_loopback_binds():
    assert not binds_beyond_loopback("127.0.0.1")
    assert not binds_beyond_loopback("::1")
    assert not binds_beyond_loopback("localhost")
    for bind in ("0.0.0.0", "::", "192.0.2.7", "node1.example"):
        assert binds_beyond_loopback(bind)


def test_bus_refusal_only_beyond_loopback_without_secret_in_protected_mode():
    assert bus_refusal(True, "0.0.0.0", 17001, None) is not None
    assert "\n" not in (bus_refusal(True, "0.0.0.0", 17001, None) or "")
    assert bus_refusal(True, "0.0.0.0", 17001, "s3cret") is None
    assert bus_refusal(True, "0.0.0.0", 17001, True) is None  # tls-cluster yes
    assert bus_refusal(False, "0.0.0.0", 17001, None) is None
    assert bus_refusal(True, "127.0.0.1", 17001, None) is None


def _parse(*argv: str) -> NodeConfig:
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))


def test_flag_and_toml(tmp_path):
    assert _parse().protected_mode is True
    assert _parse("--protected-mode", "no").protected_mode is False
    assert _parse("--protected-mode", "YES").protected_mode is True
    with pytest.raises(SystemExit):
        _parse("--protected-mode", "maybe")
    for text, want in (('"no"', False), ("false", False), ('"yes"', True), ("true", True)):
        path = tmp_path / "node.toml"
        path.write_text(f"protected-mode = {text}\n")
        assert NodeConfig.from_toml(path).protected_mode is want
    path.write_text('protected-mode = "maybe"\n')
    with pytest.raises(ValueError):
        NodeConfig.from_toml(path)


def _node(*extra: str) -> subprocess.Popen[bytes]:
    port = free_port()
    args = [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(port)]
    args += ["--cluster-port", str(free_port()), *extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    proc.port = port  # type: ignore[attr-defined]
    return proc


def test_a_bus_beyond_loopback_without_secret_refuses_to_start():
    proc = _node("--bind", "0.0.0.0")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bloomcast node: refusing to start")
    assert "--cluster-secret" in lines[0] and "--protected-mode no" in lines[0]


@pytest.mark.parametrize(
    "extra",
    [["--cluster-secret", "s3cret"], ["--protected-mode", "no"], ["--bind", "127.0.0.1"]],
    ids=["with a secret", "protected mode off", "loopback"],
)
def test_otherwise_the_node_starts(extra):
    bind = [] if "--bind" in extra else ["--bind", "0.0.0.0"]
    proc = _node(*bind, *extra)
    try:
        wait_port(proc.port, proc)  # type: ignore[attr-defined]
    finally:
        stop_process(proc, timeout=10)
