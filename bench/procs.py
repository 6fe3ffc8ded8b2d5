"""Kernel byte counts of loopback sockets (``ss -tin``): how the benchmarks
measure bus traffic of servers that do not count their own bytes (Redis).

Ports, server launchers and process helpers shared with the tests and the demo
are in :mod:`bloomcast.testing`; only what the benchmarks alone use is here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable

_SS_ROW = re.compile(r"(\S+):(\d+)\s+(\S+):(\d+)")
_SS_BYTES_SENT = re.compile(r"\bbytes_sent:(\d+)")


def tcp_bytes_sent(ports: Iterable[int]) -> int:
    """Bytes the kernel sent on every established loopback TCP socket whose
    local or peer port is in ``ports`` (sum of ``tcp_info.tcpi_bytes_sent``,
    read with ``ss -tin``).

    Both ends of a loopback connection are listed, each with its own
    bytes_sent, so the sum is the traffic in both directions. Sockets that
    closed since the last reading are not counted: read it around a window in
    which the links stay up. Raises RuntimeError if ``ss`` is missing.
    """
    wanted = set(ports)
    ss = shutil.which("ss")
    if ss is None:
        raise RuntimeError("ss (iproute2) not found: apt-get install iproute2")
    out = subprocess.run(
        [ss, "-tinH", "state", "established"], capture_output=True, text=True, timeout=10
    ).stdout
    total = 0
    matched = False
    # ss prints one line with the addresses, then an indented line of tcp_info.
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            m = _SS_ROW.search(line)
            matched = m is not None and (int(m.group(2)) in wanted or int(m.group(4)) in wanted)
            continue
        if matched:
            b = _SS_BYTES_SENT.search(line)
            if b:
                total += int(b.group(1))
            matched = False
    return total
