"""Issue 49, finding 7: a killed node's open spool file is completed when the
node starts again, with no traffic after it (the writer thread's orphan scan
runs at start, not at the first event). Real node processes, real kill -9."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bloomcast.testing import free_port, stop_process, wait_port
from spark.tap import DEFAULT_ROTATE_SECONDS

pytestmark = pytest.mark.timeout(90)
ROOT = Path(__file__).resolve().parents[2]


def _node(port: int, spool: Path, bus: list[str]) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(port), *bus]
    proc = subprocess.Popen(
        [*args, "--traffic-dir", str(spool)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    wait_port(port, proc)
    return proc


def _tmp_files(spool: Path) -> list[str]:
    return sorted(n for n in os.listdir(spool) if n.endswith(".ndjson.tmp"))


def _lines(spool: Path) -> int:
    """Whole lines in the spool's open files: a ``.tmp`` killed before its writer
    wrote a line holds nothing to complete and is removed at restart, not renamed."""
    if not spool.exists():
        return 0
    return sum((spool / n).read_bytes().count(b"\n") for n in _tmp_files(spool))


@pytest.mark.parametrize("with_bus", [False, True], ids=["no-bus", "bus-same-id"])
def test_a_killed_nodes_tmp_is_completed_after_a_restart_with_no_traffic(
    tmp_path: Path, with_bus: bool
) -> None:
    spool = tmp_path / "spool"
    port = free_port()
    bus = ["--no-bus"]
    if with_bus:  # the node keeps its id through its nodes file
        bus = [
            "--cluster-port",
            str(free_port()),
            "--cluster-config-file",
            str(tmp_path / "n.conf"),
        ]
    first = _node(port, spool, bus)
    try:
        with socket.create_connection(("127.0.0.1", port), 5) as s:
            for i in range(20):
                s.sendall(b"PUBLISH ch %d\r\n" % i)
                assert s.recv(64) == b":0\r\n"
        deadline = time.monotonic() + 30
        while _lines(spool) < 20:  # the writer thread wrote the 20 events to its open file
            assert time.monotonic() < deadline, f"open files: {_tmp_files(spool)}"
            time.sleep(0.05)
        killed = _tmp_files(spool)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    assert _tmp_files(spool) == killed  # the kill left it open
    second = _node(port, spool, bus)
    try:
        # no PUBLISH: within one rotation period (and a margin for a loaded machine)
        deadline = time.monotonic() + DEFAULT_ROTATE_SECONDS + 10
        while _tmp_files(spool):
            assert time.monotonic() < deadline, f"still open: {_tmp_files(spool)}"
            time.sleep(0.1)
        done = sorted(n for n in os.listdir(spool) if n.endswith(".ndjson"))
        assert done == [name.removesuffix(".tmp") for name in killed]
        lines = (spool / done[0]).read_bytes().splitlines()
        assert len(lines) == 20
    finally:
        stop_process(second, timeout=10)
