"""Secrets off the process title (issue 49, bloomcast/proctitle.py): a node
started with ``--requirepass`` / ``--cluster-secret`` on its command line
shows ``(redacted)`` in ``/proc/<pid>/cmdline`` (as redis-server hides its
arguments) and still uses the values; its other arguments and its process
name stay; a node without secrets keeps its command line as the kernel
gave it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from bloomcast.proctitle import REDACTED, redacted
from bloomcast.testing import free_port, stop_process, wait_port
from bloomcast.testing.ports import ephemeral_range

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def node(*extra: str) -> Iterator[tuple[subprocess.Popen, int]]:
    port = free_port()
    argv = [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(port)]
    proc = subprocess.Popen(
        [*argv, "--cluster-port", str(free_port()), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        wait_port(port, proc)
        yield proc, port
    finally:
        stop_process(proc, timeout=10)


def _proc(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


def test_a_nodes_secrets_are_not_in_its_command_line():
    with node("--requirepass", "pw-s3cret-1", "--cluster-secret=bus-s3cret-2") as (proc, port):
        cmdline = _proc(proc.pid, "cmdline")
        comm = _proc(proc.pid, "comm")
        client = redis.Redis(port=port, password="pw-s3cret-1", socket_timeout=5)
        assert client.ping()  # the node still has the value
        client.close()
    assert b"s3cret" not in cmdline
    shown = cmdline.split(b"\0")[0].decode()
    assert shown.endswith(
        f"node --port {port} --cluster-port {shown.split()[-4]} "
        f"--requirepass {REDACTED} --cluster-secret={REDACTED}"
    )
    assert comm.strip() == os.path.basename(sys.executable)[:15].encode()  # ps -C, pgrep


def test_an_abbreviated_secret_flag_is_hidden_too():
    with node("--requirep", "pw-s3cret-3", "--cluster-sec", "bus-s3cret-4") as (proc, port):
        cmdline = _proc(proc.pid, "cmdline")
        assert redis.Redis(port=port, password="pw-s3cret-3", socket_timeout=5).ping()
    assert b"s3cret" not in cmdline and cmdline.count(REDACTED.encode()) == 2


def test_without_secrets_the_command_line_is_left_as_given():
    with node("--loglevel", "notice") as (proc, _port):
        cmdline = _proc(proc.pid, "cmdline")
    assert cmdline == b"\0".join(a.encode() for a in proc.args) + b"\0"


def test_redacted_replaces_values_in_every_form_argparse_reads():
    argv = ["python", "-m", "bloomcast.cli", "node", "--port", "7000", "--requirepass", "a",
            "--cluster-secret=b", "--cluster-s", "c", "--requirepass"]  # fmt: skip
    assert redacted(argv) == [
        *argv[:7], REDACTED, f"--cluster-secret={REDACTED}", "--cluster-s", REDACTED,
        "--requirepass",
    ]  # fmt: skip
    assert redacted(["node", "--port", "1", "--", "--requirepass", "x"]) is None
    assert redacted(["node", "--cluster-port", "17000", "--join", "h:1"]) is None


def test_cluster_up_hides_the_secrets_it_forwards_and_so_do_its_nodes():
    low, _ = ephemeral_range()
    base = next(p for p in iter(free_port, 0) if p + 10_000 < low and _free(p + 10_000))
    proc = subprocess.Popen(
        [sys.executable, "-m", "bloomcast.cli", "cluster", "up", "--nodes", "1",
         "--base-port", str(base), "--requirepass", "pw-s3cret-5"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )  # fmt: skip
    try:
        wait_port(base, proc)
        assert redis.Redis(port=base, password="pw-s3cret-5", socket_timeout=5).ping()
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        lines = [_proc(pid, "cmdline") for pid in [proc.pid, *map(int, children)]]
    finally:
        stop_process(proc, timeout=20)
    assert len(lines) == 2
    for line in lines:
        assert b"s3cret" not in line and b"--requirepass (redacted)" in line
    assert b"--cluster-secret (redacted)" in lines[1]  # the secret cluster up made for it


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
