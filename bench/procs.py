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
_SS_SEGS_OUT = re.compile(r"\bsegs_out:(\d+)")


def tcp_bytes_sent(ports: Iterable[int]) -> int:
    """Bytes sent over every established loopback socket whose local or peer
    port is in ``ports`` (``ss -ti``'s tcp_info ``bytes_sent``)."""
    return tcp_sent(ports)[0]


def tcp_sent(ports: Iterable[int]) -> tuple[int, int]:
    """(bytes sent, segments sent) over every established loopback socket
    whose local or peer port is in ``ports`` (both ends: traffic both ways),
    from ``ss -ti``'s tcp_info ``bytes_sent`` and ``segs_out``."""
    wanted = set(ports)
    ss = shutil.which("ss")
    if ss is None:
        raise RuntimeError("ss (iproute2) not found: apt-get install iproute2")
    out = subprocess.run(
        [ss, "-tinH", "state", "established"], capture_output=True, text=True, timeout=10
    ).stdout
    sent = segs = 0
    matched = False
    # ss prints one line with the addresses, then an indented line of tcp_info.
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            m = _SS_ROW.search(line)
            matched = m is not None and (int(m.group(2)) in wanted or int(m.group(4)) in wanted)
            continue
        if matched:
            b, g = _SS_BYTES_SENT.search(line), _SS_SEGS_OUT.search(line)
            sent += int(b.group(1)) if b else 0
            segs += int(g.group(1)) if g else 0
            matched = False
    return sent, segs
