"""Fixtures of the dashboard tests: a real 3-node cluster under PUBLISH
traffic, a ``bloomcast dashboard`` process joined to it, and Debian's
headless Chromium to look at the page."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bloomcast.testing import LocalCluster, stop_process

ROOT = Path(__file__).resolve().parents[2]
#: screenshots land here (git-ignored), so CI can keep them as artifacts
OUTPUT = ROOT / "test-output" / "dashboard"

#: node 1 subscribes to "news", node 2 to "sports" and the pattern "alerts.*";
#: node 0 publishes to the four channels round-robin. Each has one interested
#: peer at most ("weather": none), so node 0 forwards 3 where broadcast would
#: send 4 x 2 = 8: a saving of 5/8 = 62.5 %
SUBSCRIPTIONS = {1: (["news"], []), 2: (["sports"], ["alerts.*"])}
PUBLISHED = ("news", "sports", "weather", "alerts.fire")


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _drop(message: Any) -> None:
    pass


@dataclass
class Traffic:
    cluster: LocalCluster
    published: int = 0
    stopped: bool = False


def _publisher(traffic: Traffic) -> None:
    """~240 PUBLISH/s from node 0, in pipelined batches (leaves CPU for the rest)."""
    with traffic.cluster.client(0) as r:
        while not traffic.stopped:
            pipe = r.pipeline(transaction=False)
            for channel in PUBLISHED * 3:
                pipe.publish(channel, b"tick")
            pipe.execute()
            traffic.published += 3 * len(PUBLISHED)
            time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster_under_traffic() -> Iterator[Traffic]:
    with LocalCluster(3, extra_args=["--loglevel", "warning"]) as cluster:
        subscribers = []
        for i, (channels, patterns) in SUBSCRIPTIONS.items():
            pubsub = cluster.client(i).pubsub(ignore_subscribe_messages=True)
            if channels:  # handlers that drop what they read: the subscriber keeps up
                pubsub.subscribe(**dict.fromkeys(channels, _drop))
            if patterns:
                pubsub.psubscribe(**dict.fromkeys(patterns, _drop))
            subscribers.append(pubsub.run_in_thread(sleep_time=0.05, daemon=True))
        cluster.wait_ready()
        traffic = Traffic(cluster)
        thread = threading.Thread(target=_publisher, args=(traffic,), daemon=True)
        thread.start()
        try:
            yield traffic
        finally:
            traffic.stopped = True
            thread.join(10)
            for worker in subscribers:  # before the nodes stop under them
                worker.stop()
            for worker in subscribers:
                worker.join(5)


@dataclass
class Dashboard:
    url: str
    process: subprocess.Popen[str]

    def api(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "api/cluster", timeout=5) as response:
            data: dict[str, Any] = json.load(response)
            return data

    def wait(self, what: str, check: Any, timeout: float = 20.0) -> dict[str, Any]:
        """The first /api/cluster snapshot ``check`` accepts."""
        deadline = time.monotonic() + timeout
        while True:
            data = self.api()
            if check(data):
                return data
            assert self.process.poll() is None, "the dashboard exited"
            assert time.monotonic() < deadline, f"{what} not seen: {data['cluster']}"
            time.sleep(0.2)


def start_dashboard(join_port: int, *extra: str) -> Dashboard:
    """``bloomcast dashboard --join 127.0.0.1:<port> --port 0``; the URL is read
    from the line it prints once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bloomcast.cli", "dashboard",
         "--join", f"127.0.0.1:{join_port}", "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # a line, or "" when it exits first
    if not line:
        stop_process(proc)  # type: ignore[arg-type]
        raise AssertionError(
            f"dashboard did not start: {proc.stderr.read() if proc.stderr else ''}"
        )
    url = next(word for word in line.split() if word.startswith("http://"))
    return Dashboard(url, proc)


@pytest.fixture
def dashboard_of() -> Iterator[Any]:
    """``dashboard_of(port, *flags)`` starts a dashboard; all are stopped at the end."""
    started: list[Dashboard] = []

    def start(join_port: int, *extra: str) -> Dashboard:
        started.append(start_dashboard(join_port, *extra))
        return started[-1]

    yield start
    for dash in started:
        stop_process(dash.process)  # type: ignore[arg-type]


@pytest.fixture
def chromium(tmp_path: Path) -> Any:
    """``chromium(url, *flags)`` runs headless Chromium once, returns its stdout."""
    path = chromium_path()
    if path is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")

    def run(url: str, *flags: str) -> str:
        result = subprocess.run(
            [path, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
             *flags, url],
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout

    return run
