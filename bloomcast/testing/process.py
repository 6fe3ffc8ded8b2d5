"""Child processes and the objects that own them: stopping one, the ``with``
protocol every owner shares, and reading the INFO text such servers reply.

:class:`Managed` exists because every owner of processes (a server, a local
cluster, a Redis Cluster, a pool of subscriber sockets) wants the same
guarantee: leaving the ``with`` block stops everything, also when starting
failed half way. Written once, the guarantee cannot drift between copies.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` s; always reaps the process."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


class Managed:
    """A context manager over ``start()`` / ``stop()``.

    Entering calls :meth:`start` (and :meth:`stop` if it raises, so a half
    started object leaves nothing running), leaving calls :meth:`stop`.
    ``start`` does nothing by default: for objects started by their factory.
    """

    def start(self) -> None:
        """Start what is not running yet (nothing by default)."""

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def parse_info(text: str | bytes | Mapping[Any, Any]) -> dict[str, str]:
    """INFO / CLUSTER INFO as a dict of strings: ``key:value`` lines, ``#``
    headers skipped, or a reply a RESP3 client already parsed into a map."""
    if isinstance(text, Mapping):
        return {str(k): str(v) for k, v in text.items()}
    if isinstance(text, bytes):
        text = text.decode()
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and ":" in line:
            key, _, value = line.partition(":")
            out[key.strip()] = value.strip()
    return out
