"""A node on a slow disk: ``python -m bloomcast.testing.slow_disk SECONDS node ARGS...``
runs ``bloomcast node ARGS...`` in a process where each of the file calls the
node's Python code makes (:data:`SLOWED`: ``os.write``, ``os.fsync``,
``os.open``, ``os.pread``, ``os.rename``, ``os.replace``, ``os.unlink``,
``os.scandir``) first sleeps SECONDS: a disk slower than any traffic
(issue 41). The event loop's own I/O (uvloop, libuv) and imports use C calls
and are not slowed; a file call made on the loop is, and shows as a late
PONG of a probe (tests/integration/test_slow_disk.py, ``bloomcast bench
hostile``).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

#: the ``os`` functions slowed
SLOWED = ("write", "fsync", "open", "pread", "rename", "replace", "unlink", "scandir")


def slow_down(seconds: float) -> None:
    """Make each function of :data:`SLOWED` sleep ``seconds`` first."""
    for name in SLOWED:
        setattr(os, name, _slowed(getattr(os, name), seconds))


def _slowed(call: Callable[..., Any], seconds: float) -> Callable[..., Any]:
    @functools.wraps(call)
    def slowed(*args: Any, **kwargs: Any) -> Any:
        time.sleep(seconds)
        return call(*args, **kwargs)

    return slowed


def command(seconds: float, node_args: list[str]) -> list[str]:
    """The command line of a node on a disk this slow (``node_args`` after ``node``)."""
    return [sys.executable, "-m", "bloomcast.testing.slow_disk", str(seconds), "node", *node_args]


def main(argv: list[str]) -> int:
    seconds = float(argv[0])
    slow_down(seconds)
    from bloomcast.cli import main as cli_main

    sys.argv = ["bloomcast", *argv[1:]]
    return cli_main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
