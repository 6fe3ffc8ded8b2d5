"""Real clients against a real node process: redis-py (sync, asyncio, RESP3),
AUTH/HELLO AUTH, redis-cli, and the process's own life (SIGTERM)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest
import redis
import redis.asyncio as aioredis

from bloomcast.testing import free_port, wait_port
from tests.procs import bloomcast_node

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def node():
    with bloomcast_node() as port:
        yield port


def _next_message(pubsub, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if msg is not None:
            return msg
    raise TimeoutError("no message")


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_pubsub(node, protocol):
    r = redis.Redis(port=node, protocol=protocol)
    p = r.pubsub()
    p.subscribe("news")
    p.psubscribe("room:1?")
    p.ssubscribe("shard")
    for _ in range(3):
        assert p.get_message(timeout=2)["type"] in ("subscribe", "psubscribe", "ssubscribe")
    assert r.publish("news", "hello") == 1
    assert r.publish("room:12", "x") == 1
    assert r.publish("room:123", "y") == 0
    assert r.spublish("shard", "s") == 1
    got = [_next_message(p) for _ in range(2)]
    assert got[0]["type"] == "message" and got[0]["data"] == b"hello"
    assert got[1]["type"] == "pmessage" and got[1]["pattern"] == b"room:1?"
    smsg = p.get_sharded_message(timeout=2)
    while smsg is not None and smsg["type"] != "smessage":
        smsg = p.get_sharded_message(timeout=2)
    assert smsg is not None and smsg["data"] == b"s"
    assert r.pubsub_numsub("news") == [(b"news", 1)]
    assert r.pubsub_numpat() == 1
    p.close()
    r.close()


def test_redis_py_listen_run_in_thread_and_health_check(node):
    r = redis.Redis(port=node, health_check_interval=1)
    received: list[bytes] = []
    done = threading.Event()

    def handler(message):
        received.append(message["data"])
        if len(received) == 3:
            done.set()

    p = r.pubsub()
    p.subscribe(**{"thread": handler})
    worker = p.run_in_thread(sleep_time=0.05, daemon=True)
    try:
        deadline = time.monotonic() + 5
        while r.pubsub_numsub("thread")[0][1] != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.2)  # past the health-check interval: redis-py PINGs in subscribed mode
        for i in range(3):
            assert r.publish("thread", f"m{i}") == 1
        assert done.wait(5)
        assert received == [b"m0", b"m1", b"m2"]
    finally:
        worker.stop()
        worker.join(5)
        p.close()
    p2 = r.pubsub()
    p2.subscribe("listen")
    it = p2.listen()
    assert next(it)["type"] == "subscribe"
    r.publish("listen", "L")
    assert next(it)["data"] == b"L"
    p2.close()
    r.close()


def test_redis_py_asyncio(node):
    async def scenario() -> None:
        r = aioredis.Redis(port=node)
        p = r.pubsub()
        await p.subscribe("aio")
        assert (await p.get_message(timeout=2))["type"] == "subscribe"
        assert await r.publish("aio", "x") == 1
        msg = None
        for _ in range(20):
            msg = await p.get_message(ignore_subscribe_messages=True, timeout=0.5)
            if msg:
                break
        assert msg is not None and msg["data"] == b"x"
        await p.aclose()
        await r.aclose()

    asyncio.run(scenario())


def test_requirepass_auth_and_hello_auth():
    with bloomcast_node("--requirepass", "s3cret") as port:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, password="wrong").ping()
        assert redis.Redis(port=port, password="s3cret").ping()
        r3 = redis.Redis(port=port, password="s3cret", protocol=3)  # HELLO 3 AUTH
        assert r3.publish("c", "m") == 0


@pytest.mark.skipif(
    shutil.which("redis-cli") is None,
    reason="redis-cli not installed (Debian package redis-tools; .ci/run installs it)",
)
def test_redis_cli(node):
    out = subprocess.run(
        ["redis-cli", "-p", str(node), "PUBLISH", "cli", "x"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.stdout.strip() == "0"
    sub = subprocess.Popen(
        ["redis-cli", "-p", str(node), "SUBSCRIBE", "cli"], stdout=subprocess.PIPE, text=True
    )
    try:
        r = redis.Redis(port=node)
        deadline = time.monotonic() + 5
        while r.pubsub_numsub("cli")[0][1] != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert r.publish("cli", "hello-cli") == 1
        lines = [sub.stdout.readline().strip() for _ in range(6)]
        assert lines[:3] == ["subscribe", "cli", "1"]
        assert lines[3:] == ["message", "cli", "hello-cli"]
    finally:
        sub.kill()
        sub.wait(5)
    out = subprocess.run(
        ["redis-cli", "-p", str(node), "CLUSTER", "MYID"],
        capture_output=True,
        text=True,
        timeout=10,
    )  # a node without a bus is a standalone server
    assert out.stdout.strip() == "ERR This instance has cluster support disabled"


class Terminal:
    """A program on a pseudo-terminal, as a user at a shell would run it."""

    def __init__(self, argv: list[str]) -> None:
        self.fd, child = pty.openpty()
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        env = dict(os.environ, TERM="xterm")
        self.proc = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, env=env)
        os.close(child)
        self.seen = b""

    def type(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")

    def expect(self, text: str, timeout: float = 10.0) -> None:
        """Read until ``text`` has appeared on the screen since the last expect."""
        deadline = time.monotonic() + timeout
        while text.encode() not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{text!r} not in {self.seen[-300:]!r}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 4096)
                if b"\x1b[6n" in chunk:  # linenoise asks where the cursor is
                    os.write(self.fd, b"\x1b[1;1R")
                self.seen += chunk
        self.seen = self.seen[self.seen.index(text.encode()) + len(text) :]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(5)
        os.close(self.fd)


@pytest.mark.skipif(
    shutil.which("redis-cli") is None,
    reason="redis-cli not installed (Debian package redis-tools; .ci/run installs it)",
)
def test_redis_cli_interactive(node):
    # the REPL (prompt, command hints from COMMAND DOCS, subscribe mode) on a tty
    term = Terminal(["redis-cli", "-p", str(node)])
    prompt = f"127.0.0.1:{node}>"
    try:
        # a line is typed only once the prompt is back: linenoise enters raw
        # mode with TCSAFLUSH, which drops what was typed before it
        term.expect(prompt)
        term.type("PING")
        term.expect("PONG")
        term.expect(prompt)
        term.type("PUBLISH news hello")
        term.expect("(integer) 0")
        term.expect(prompt)
        term.type("PUBSUB NUMPAT")
        term.expect("(integer) 0")
        term.expect(prompt)
        term.type("SUBSCRIBE news")
        term.expect("Reading messages")
        r = redis.Redis(port=node)
        deadline = time.monotonic() + 5
        while r.pubsub_numsub("news")[0][1] != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert r.publish("news", "from-redis-py") == 1
        term.expect('"message"')
        term.expect('"news"')
        term.expect('"from-redis-py"')
    finally:
        term.close()


def test_node_process_stops_on_sigterm():
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bloomcast.cli",
            "node",
            "--port",
            str(port),
            "--cluster-port",
            str(free_port()),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_port(port, proc)
        assert "ready" in proc.stdout.readline()
        assert redis.Redis(port=port).ping()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
