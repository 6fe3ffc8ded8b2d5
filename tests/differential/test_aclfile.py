"""--aclfile, ACL LOAD and ACL SAVE against redis-server 7.0.15: the same
users.acl file given to both, the same ACL LIST and AUTH answers; a broken
file gives ACL LOAD's exact error and keeps the users; ACL SAVE writes the
same file; a node whose ACL file is broken at startup exits 1 with one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bloomcast.testing import free_port
from tests.differential.oracle import exchange, oracle_server, redis_only
from tests.procs import bloomcast_node

pytestmark = [pytest.mark.timeout(120), redis_only]

USERS = (
    "user alice on >pw +@pubsub -publish &news*\n"
    "user bob off nopass +@all allchannels ~*\n"
    "\n"
    "user default on nopass ~* &* +@all\n"
)
BROKEN = USERS + "user carol on +nosuch bogus\nnot a user line\nuser alice on\n"


def _both(path: str, payload: bytes) -> tuple[tuple[bytes, bool], tuple[bytes, bool]]:
    with oracle_server("--aclfile", path) as oracle, bloomcast_node("--aclfile", path) as node:
        return exchange(oracle, payload), exchange(node, payload)


def test_a_file_given_at_start_same_users(tmp_path):
    path = tmp_path / "users.acl"
    path.write_text(USERS)
    payload = b"ACL LIST\r\nAUTH alice pw\r\nACL WHOAMI\r\nPUBLISH news x\r\nAUTH bob x\r\n"
    want, got = _both(str(path), payload)
    assert got == want


def test_acl_load_of_a_broken_file_same_error_and_users_kept(tmp_path):
    path = tmp_path / "users.acl"
    path.write_text(USERS)
    with (
        oracle_server("--aclfile", str(path)) as oracle,
        bloomcast_node("--aclfile", str(path)) as node,
    ):
        path.write_text(BROKEN)
        payload = b"ACL LOAD\r\nACL LIST\r\n"
        assert exchange(node, payload) == exchange(oracle, payload)
        path.write_text(USERS.replace("alice on", "alice off"))
        assert exchange(node, payload) == exchange(oracle, payload)


def test_acl_save_writes_the_same_file(tmp_path):
    files = []
    for name in ("oracle", "node"):
        path = tmp_path / f"{name}.acl"
        path.write_text(USERS)
        start = oracle_server if name == "oracle" else bloomcast_node
        with start("--aclfile", str(path)) as port:
            assert (
                exchange(port, b"ACL SETUSER zed on >z &z*\r\nACL SAVE\r\n")[0] == b"+OK\r\n+OK\r\n"
            )
        files.append(path.read_text())
    assert files[1] == files[0]


def test_acl_load_and_save_without_a_file_same_error():
    from tests.differential.oracle import assert_same_as_oracle

    with oracle_server() as oracle, bloomcast_node() as node:
        assert_same_as_oracle((oracle, node), b"ACL LOAD\r\nACL SAVE\r\n")


def test_a_broken_file_at_startup_exits_1_with_one_line(tmp_path):
    path = tmp_path / "users.acl"
    path.write_text(BROKEN)
    cmd = [sys.executable, "-m", "bloomcast.cli", "node", "--no-bus"]
    cmd += ["--port", str(free_port()), "--aclfile", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "ACL errors" in lines[0] and "+nosuch" in lines[0]
