"""A node's shutdown (bloomcast/node_command.py, issue 49): every step runs
whatever an earlier one raised, and a second SIGINT exits at once (Redis's
"You insist... exiting now.") while the traffic tap's last batch hangs on a
disk that does not answer (bloomcast/testing/slow_disk.py: each file call
takes a minute)."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from bloomcast import node_command
from bloomcast.testing import free_port, stop_process, wait_port
from bloomcast.testing.slow_disk import command

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


def test_a_second_sigint_exits_at_once_while_the_tap_waits_on_a_hung_disk(tmp_path: Path):
    port = free_port()
    log = tmp_path / "node.log"
    args = ["--port", str(port), "--no-bus", "--traffic-dir", str(tmp_path / "spool")]
    proc = subprocess.Popen(
        command(60, [*args, "--logfile", str(log), "--loglevel", "notice"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        wait_port(port, proc, 60)
        with redis.Redis(port=port) as r:
            r.publish("ch", "x")  # an event the tap must write at shutdown
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 30
        while "Shutdown requested" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        assert proc.poll() is None  # the tap's last batch waits on the disk
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 1  # not the minute the disk takes, nor the 30 s cap
        assert "You insist... exiting now." in log.read_text()
    finally:
        stop_process(proc, timeout=5)


def test_every_shutdown_step_runs_whatever_an_earlier_one_raised(caplog):
    ran: list[str] = []

    def bus_stop() -> None:
        ran.append("bus")
        raise RuntimeError("bus.stop() failed")

    async def node_stop() -> None:
        ran.append("node")

    async def main() -> bool:
        return await node_command._shutdown(
            ("the metrics port", None),
            ("the cluster bus", bus_stop),
            ("the node", node_stop),
            ("the traffic tap", lambda: ran.append("tap")),
            ("the nodes file", lambda: ran.append("nodes file")),
        )

    caplog.set_level(logging.ERROR, logger="bloomcast.node")
    assert asyncio.run(main()) is False
    assert ran == ["bus", "node", "tap", "nodes file"]
    assert "Shutdown: stopping the cluster bus failed" in caplog.text
