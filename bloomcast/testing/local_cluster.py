"""LocalCluster: N ``bloomcast node`` processes on loopback, joined, for tests,
the demo, the benchmarks and ``bloomcast cluster up``.

    with LocalCluster(5, extra_args=["--node-timeout-ms", "2000"]) as cluster:
        r = cluster.client(0)              # redis.Redis to node 0
        cluster.kill(2); cluster.restart(2)
        cluster.wait_ready()

Readiness: a node is ready when its CLUSTER INFO (same fields in INFO) shows
``cluster_known_nodes`` = N and ``cluster_filters_converged:1``: it has a live
authenticated link to every other node and holds a verified copy of every
other node's channel and pattern filters. The cluster is ready when every node is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from bloomcast.testing.ports import free_ports, wait_port_free
from bloomcast.testing.process import Managed, parse_info, stop_process

READY_FIELD = "cluster_filters_converged"


class LocalCluster(Managed):
    """N node processes (``python -m bloomcast.cli node``), node 0 the seed of the others.

    ``base_port``: client ports base_port..base_port+N-1 and bus ports +10000
    (Redis's rule); None picks free ports. ``extra_args`` go to every node.
    ``traffic_dir`` gives every node ``--traffic-dir``. ``log_dir`` keeps each
    node's stderr in ``node-<i>.log`` (default: discarded unless ``keep_logs``).
    ``metrics_ports`` gives node i ``--metrics-port metrics_ports[i]``.
    """

    def __init__(
        self,
        nodes: int,
        *,
        base_port: int | None = None,
        extra_args: Sequence[str] = (),
        traffic_dir: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        log_dir: str | os.PathLike[str] | None = None,
        python: str = sys.executable,
        metrics_ports: Sequence[int] = (),
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self.size = nodes
        self.host = host
        self.extra_args = list(extra_args)
        self.traffic_dir = str(traffic_dir) if traffic_dir is not None else None
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.python = python
        if metrics_ports and len(metrics_ports) != nodes:
            raise ValueError("one metrics port per node")
        self.metrics_ports = list(metrics_ports)
        if base_port is not None:
            self.ports = [base_port + i for i in range(nodes)]
            self.bus_ports = [p + 10000 for p in self.ports]
        else:
            picked = free_ports(2 * nodes, host)
            self.ports, self.bus_ports = picked[:nodes], picked[nodes:]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * nodes
        self._logs: list[Any] = [None] * nodes

    # -- lifecycle -----------------------------------------------------------------

    def seed_port(self, j: int) -> int:
        """The bus port the other nodes join node ``j`` at."""
        return self.bus_ports[j]

    def node_args(self, i: int) -> list[str]:
        """The command line of node ``i``."""
        args = [
            self.python, "-m", "bloomcast.cli", "node",
            "--bind", self.host,
            "--port", str(self.ports[i]),
            "--cluster-port", str(self.bus_ports[i]),
        ]  # fmt: skip
        # two seeds each, so a node still joins when one seed is down
        seeds = [j for j in range(self.size) if j != i][:2]
        for j in seeds:
            args += ["--join", f"{self.host}:{self.seed_port(j)}"]
        if self.traffic_dir is not None:
            args += ["--traffic-dir", self.traffic_dir]
        if self.metrics_ports:
            args += ["--metrics-port", str(self.metrics_ports[i])]
        return args + self.extra_args

    def start(self, timeout: float = 60.0) -> None:
        """Start every node and wait until the cluster is ready."""
        for i in range(self.size):
            self.start_node(i)
        self.wait_ready(timeout)

    def start_node(self, i: int, args: Sequence[str] | None = None) -> None:
        """Start (or restart) node ``i`` without waiting (``args``: a whole command
        line instead of :meth:`node_args`)."""
        if self.processes[i] is not None and self.processes[i].poll() is None:  # type: ignore[union-attr]
            raise RuntimeError(f"node {i} is running")
        stderr: Any = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            if self._logs[i] is not None:
                self._logs[i].close()
            self._logs[i] = open(self.log_dir / f"node-{i}.log", "ab")  # noqa: SIM115
            stderr = self._logs[i]
        self.processes[i] = subprocess.Popen(
            list(args) if args is not None else self.node_args(i),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # Ctrl-C in a terminal goes to the parent only
        )

    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` (a crash: no LEAVE) and reap it."""
        proc = self.processes[i]
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def restart(self, i: int, timeout: float = 60.0) -> None:
        """Start node ``i`` again (after kill/stop) and wait until the cluster is ready:
        every running node knows every node started so far (a node never started is
        not waited for)."""
        self.kill(i)
        wait_port_free(self.ports[i], timeout, self.host)
        self.start_node(i)
        self.wait_ready(timeout, nodes=sum(1 for p in self.processes if p is not None))

    def stop_node(self, i: int, timeout: float = 10.0) -> None:
        """SIGTERM node ``i`` (graceful: it sends LEAVE), SIGKILL after ``timeout``."""
        proc = self.processes[i]
        if proc is None:
            return
        stop_process(proc, timeout)
        self._close_log(i)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every node (SIGTERM all, then wait; SIGKILL the stragglers)."""
        for proc in self.processes:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for i in range(self.size):
            proc = self.processes[i]
            if proc is not None:
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            self._close_log(i)

    def _close_log(self, i: int) -> None:
        if self._logs[i] is not None:
            self._logs[i].close()
            self._logs[i] = None

    def alive(self, i: int) -> bool:
        proc = self.processes[i]
        return proc is not None and proc.poll() is None

    # -- clients and readiness -----------------------------------------------------

    def client(self, i: int, **kwargs: Any) -> redis.Redis:
        """A redis-py client to node ``i`` (caller closes it)."""
        kwargs.setdefault("socket_timeout", 10)
        return redis.Redis(host=self.host, port=self.ports[i], **kwargs)

    def cluster_info(self, i: int) -> dict[str, str]:
        """Node ``i``'s CLUSTER INFO as strings."""
        with self.client(i, socket_timeout=2, socket_connect_timeout=2) as r:
            raw = r.execute_command("CLUSTER", "INFO")
        return parse_info(raw)

    def ready(self, i: int, expected_nodes: int | None = None) -> bool:
        """Node ``i`` knows ``expected_nodes`` (default N) nodes and holds all their filters."""
        try:
            info = self.cluster_info(i)
        except (redis.RedisError, OSError):
            return False
        want = expected_nodes if expected_nodes is not None else self.size
        return info.get("cluster_known_nodes") == str(want) and info.get(READY_FIELD) == "1"

    def live_count(self) -> int:
        return sum(1 for i in range(self.size) if self.alive(i))

    def wait_ready(self, timeout: float = 60.0, nodes: int | None = None) -> None:
        """Until every running node is ready (knows ``nodes`` nodes, default N, and
        holds their filters); TimeoutError naming the laggards."""
        deadline = time.monotonic() + timeout
        while True:
            for i in range(self.size):
                proc = self.processes[i]
                if (
                    proc is not None
                    and proc.poll() is not None
                    and proc.returncode
                    not in (
                        0,
                        -signal.SIGKILL,
                        -signal.SIGTERM,
                    )
                ):
                    raise RuntimeError(f"node {i} exited with {proc.returncode}")
            waiting = [i for i in range(self.size) if self.alive(i) and not self.ready(i, nodes)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes {waiting} not ready after {timeout} s")
            time.sleep(0.1)
