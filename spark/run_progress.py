"""What ``bloomcast stats run`` shows while Spark starts and between micro-batches.

On a terminal: a rich status line on stderr (a spinner, as the demo shows its
phases) that names the phase (starting Spark, starting the query, Spark's own
query status such as "Waiting for data to arrive"), the batches and events
applied so far and the time elapsed; batch lines scroll above it, and it
disappears when the run ends. Not on a terminal (a log file, a pipe): one plain
line per phase, no spinner, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunProgress:
    """Phase and totals of one ``stats run``; ``console``: a rich Console on stderr."""

    console: Any = None
    started: float = field(default_factory=time.monotonic)
    _status: Any = None
    _phase: str = ""

    def __post_init__(self) -> None:
        if self.console is None:
            from rich.console import Console

            self.console = Console(stderr=True, highlight=False)

    @property
    def live(self) -> bool:
        return bool(self.console.is_terminal)

    def phase(self, text: str) -> None:
        """A new phase: shown in the status line (terminal) or printed once (log)."""
        if text == self._phase:
            return
        self._phase = text
        if not self.live:
            print(f"bloomcast stats run: {text} ...", file=sys.stderr, flush=True)
            return
        if self._status is None:
            self._status = self.console.status(self._line(text))
            self._status.start()
        else:
            self._status.update(self._line(text))

    def tick(self, spark_message: str, batches: int, events: int) -> None:
        """Between batches (about once a second): Spark's query status and the totals."""
        if not self.live or self._status is None:
            return
        done = f"{batches} batches, {events} events applied so far"
        self._status.update(self._line(f"{spark_message} ({done})"))

    def batch(self, line: str) -> None:
        """One micro-batch's line (above the status line on a terminal)."""
        if self.live:
            self.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _line(self, text: str) -> str:
        from rich.markup import escape

        return f"[bold]stats run[/] {escape(text)} [dim]{time.monotonic() - self.started:.0f}s[/]"
