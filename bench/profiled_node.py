"""``python -m bench.profiled_node OUT.prof node ...``: ``bloomcast node`` with a
cProfile that SIGUSR1 starts and SIGUSR2 stops and writes to ``OUT.prof``
(bench/idle_profile.py profiles one node of an idle cluster this way)."""

from __future__ import annotations

import cProfile
import signal
import sys
from types import FrameType


def main() -> int:
    out = sys.argv.pop(1)
    profile = cProfile.Profile()

    def start(_sig: int, _frame: FrameType | None) -> None:
        profile.enable()

    def stop(_sig: int, _frame: FrameType | None) -> None:
        profile.disable()
        profile.dump_stats(out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from bloomcast.cli import main as bloomcast

    sys.argv[0] = "bloomcast"
    return bloomcast()


if __name__ == "__main__":
    sys.exit(main())
