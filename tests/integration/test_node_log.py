"""The node's log in Redis's style, with real node processes (issue 15):
``pid:M dd Mon yyyy hh:mm:ss.mmm <symbol> message``, ``--loglevel`` by
Redis's names, ``--logfile``, SIGHUP survived (and the file reopened), and
the notice lines an operator needs: a node joined / left / failed, a client
cut by its output-buffer limit; a protocol error at verbose."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from bloomcast.testing import free_port, stop_process, wait_port
from tests.integration.conftest import cut_a_slow_subscriber

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(
    r"^(?P<pid>\d+):M \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} "
    r"\d\d:\d\d:\d\d\.\d{3} (?P<symbol>[.\-*#]) (?P<message>.*)$"
)


@contextmanager
def node(logfile: Path, *extra: str, bus: bool = True) -> Iterator[tuple[subprocess.Popen, int]]:
    port = free_port()
    argv = [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(port)]
    argv += ["--cluster-port", str(free_port())] if bus else ["--no-bus"]
    proc = subprocess.Popen(
        [*argv, "--logfile", str(logfile), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        wait_port(port, proc)
        yield proc, port
    finally:
        stop_process(proc, timeout=10)


def lines(path: Path) -> list[re.Match[str]]:
    """Every line of the log, each checked against Redis's format."""
    out = []
    for text in path.read_text().splitlines():
        match = LINE.match(text)
        assert match, f"not in Redis's log format: {text!r}"
        out.append(match)
    return out


def wait_line(path: Path, needle: str | re.Pattern[str], timeout: float = 30.0) -> re.Match[str]:
    """The first log line whose message contains ``needle`` (or matches it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            for match in lines(path):
                message = match["message"]
                if isinstance(needle, str) and needle in message:
                    return match
                if isinstance(needle, re.Pattern) and needle.search(message):
                    return match
        time.sleep(0.05)
    raise AssertionError(f"no log line with {needle!r} in {path}:\n{path.read_text()}")


def bus_port(port: int) -> int:
    nodes = redis.Redis(port=port).execute_command("CLUSTER", "NODES").decode()
    myself = next(x for x in nodes.splitlines() if "myself" in x).split()[1]
    return int(myself.split("@")[1])


def test_format_pid_and_ready_line(tmp_path):
    log = tmp_path / "node.log"
    with node(log) as (proc, port):
        ready = wait_line(log, "Ready to accept connections")
        assert int(ready["pid"]) == proc.pid
        assert ready["symbol"] == "*"  # notice
        assert f":{port} bus port" in ready["message"]


def test_sighup_reopens_the_logfile_and_the_node_keeps_serving(tmp_path):
    log = tmp_path / "node.log"
    with node(log) as (proc, port):
        wait_line(log, "Ready to accept connections")
        rotated = tmp_path / "node.log.1"
        log.rename(rotated)  # logrotate's "create" mode
        proc.send_signal(signal.SIGHUP)
        reopened = wait_line(log, "Received SIGHUP")
        assert reopened["symbol"] == "*"
        assert proc.poll() is None
        assert redis.Redis(port=port).ping()
        assert "Ready to accept connections" in rotated.read_text()


def test_sighup_without_logfile_is_ignored(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(port), "--no-bus"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        wait_port(port, proc)
        proc.send_signal(signal.SIGHUP)
        r = redis.Redis(port=port)
        assert r.ping()  # answered after the signal was handled
        assert proc.poll() is None
    finally:
        stop_process(proc, timeout=10)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert "Received SIGHUP" in err and "Traceback" not in err


def test_node_joined_left_and_failed_are_notices(tmp_path):
    log1, log2, log3 = (tmp_path / f"n{i}.log" for i in (1, 2, 3))
    timeout = ("--node-timeout-ms", "1500")
    with node(log1, *timeout) as (_, port1):
        seed = f"127.0.0.1:{bus_port(port1)}"
        with node(log2, "--join", seed, *timeout) as (proc2, _):
            joined = wait_line(log1, "joined the cluster")
            assert joined["symbol"] == "*"
            node2 = wait_line(log2, "Ready to accept connections")["message"].split()[2]
            assert node2 in joined["message"]
            with node(log3, "--join", seed, *timeout) as (proc3, _):
                wait_line(log1, "joined the cluster", timeout=30)
                while sum("joined the cluster" in m["message"] for m in lines(log1)) < 2:
                    time.sleep(0.05)
                node3 = wait_line(log3, "Ready to accept connections")["message"].split()[2]
                proc3.kill()  # no LEAVE: the others find out by probing
                proc3.wait()
                failed = wait_line(log1, f"node {node3} marked failed")
                assert failed["symbol"] == "*"
                down = wait_line(log1, re.compile(rf"Bus link to node {node3} \(.*\) is down"))
                assert down["symbol"] == "*"
            proc2.send_signal(signal.SIGTERM)  # a clean stop sends LEAVE
            proc2.wait(timeout=10)
            left = wait_line(log1, f"node {node2} left the cluster")
            assert left["symbol"] == "*"
            assert wait_line(log2, "Shutdown requested")["symbol"] == "*"


def test_output_buffer_cut_is_a_notice(tmp_path):
    log = tmp_path / "node.log"
    with node(log, "--pubsub-hard-limit", str(64 * 1024), bus=False) as (_, port):
        cut_a_slow_subscriber(port)
        cut = wait_line(log, "scheduled to be closed ASAP for overcoming of output buffer")
        assert cut["symbol"] == "*"
        assert "sub=1" in cut["message"] and "addr=127.0.0.1:" in cut["message"]


@pytest.mark.parametrize("level", ["verbose", "notice"])
def test_protocol_error_is_logged_at_verbose(tmp_path, level):
    log = tmp_path / "node.log"
    with node(log, "--loglevel", level, bus=False) as (_, port):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"*abc\r\n")
            assert s.recv(100) == b"-ERR Protocol error: invalid multibulk length\r\n"
        r = redis.Redis(port=port)
        assert r.ping()
        if level == "verbose":
            line = wait_line(log, "Protocol error (invalid multibulk length) from client: id=")
            assert line["symbol"] == "-"
        else:
            wait_line(log, "Ready to accept connections")
            assert not any("Protocol error" in m["message"] for m in lines(log))


def test_loglevel_warning_hides_notices(tmp_path):
    log = tmp_path / "node.log"
    with node(log, "--loglevel", "warning", bus=False) as (_, port):
        assert redis.Redis(port=port).ping()
    assert os.path.getsize(log) == 0  # nothing went wrong: no warning


def test_an_exception_escaping_a_loop_callback_is_counted_and_logged_once_a_minute(caplog):
    """Issue 41: a bug hit by every callback neither floods the log (asyncio
    logs each one with its traceback) nor goes unseen: INFO loop_exceptions."""
    import asyncio

    from bloomcast.node_log import LoopExceptions
    from router.stats import NodeStats

    def boom() -> None:
        raise ValueError("a bug")

    async def main(stats: NodeStats) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(LoopExceptions(stats))
        for _ in range(50):
            loop.call_soon(boom)
        await asyncio.sleep(0.05)

    stats = NodeStats()
    with caplog.at_level("WARNING", logger="bloomcast.node"):
        asyncio.run(main(stats))
    lines = [r.getMessage() for r in caplog.records if r.name == "bloomcast.node"]
    assert stats.loop_exceptions == 50
    assert len(lines) == 1 and "ValueError('a bug')" in lines[0] and "test_node_log.py" in lines[0]
