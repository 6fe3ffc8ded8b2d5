"""The bus's clock and addresses: milliseconds since the Unix epoch
(:func:`now_ms`: frame stamps, timers, heartbeats) and a bus address
(:data:`Address`). A leaf: every bus module may import it, and importing it
loads none of the data plane's modules (on the compiled plane their Python
sources stay unloaded, cluster_bus/dataplane.py)."""

from __future__ import annotations

import time

#: (host, port) of a bus listener
Address = tuple[str, int]


def now_ms() -> int:
    return int(time.time() * 1000)
