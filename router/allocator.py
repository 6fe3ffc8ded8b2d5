"""The C allocator under a node process: glibc malloc's mmap threshold, fixed;
MEMORY PURGE's trim; the process's resident set (:func:`rss_bytes`).

glibc serves a request of ``M_MMAP_THRESHOLD`` bytes or more (128 KiB at
start) with its own ``mmap``, unmapped at ``free``. Its default is dynamic
(``mallopt(3)``): the first such block freed raises the threshold to that
block's size (up to 32 MiB on 64 bits) and the trim threshold to twice it,
so every later block up to that size comes from the heap, where a freed
block under a live one is never given back. One hostile request of 1 MB
(ten 100 KB patterns, its read buffers, its 1 MB confirmation) left 12 MB
of such holes in a node's RSS for good (issue 28, ``bloomcast bench
hostile``; redis-server's jemalloc returns them). Setting the threshold
turns the dynamic adjustment off (``mallopt(3)``: "setting this parameter
... disables dynamic adjustment"), so large blocks keep going back to the
kernel when freed. Small objects (pymalloc's arenas are mapped apart
already) are not affected; a large block costs an ``mmap`` and a
``munmap``, as it does at a fresh process's default.

Only on glibc (``ctypes`` finds ``mallopt``); elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import resource

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: ``M_MMAP_THRESHOLD`` in glibc's ``<malloc.h>``
M_MMAP_THRESHOLD = -3
#: glibc's starting value (``DEFAULT_MMAP_THRESHOLD_MIN``), now kept
MMAP_THRESHOLD = 128 * 1024


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Set glibc's mmap threshold to ``threshold`` bytes, ending its dynamic
    adjustment. True when set; False on a C library other than glibc, or
    when glibc refuses (it returns 0 for a value over its 32 MiB maximum)."""
    if not on_glibc():
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


def on_glibc() -> bool:
    """Whether this process runs on glibc (``confstr`` names it: "glibc 2.36")."""
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):  # no confstr (Windows), no such name
        return False
    return bool(libc and libc.startswith("glibc"))


def purge() -> None:
    """MEMORY PURGE: glibc's ``malloc_trim(0)``, the free memory at the top
    of the heap and in its arenas given back to the kernel (elsewhere
    nothing: Redis on an allocator other than jemalloc does nothing too)."""
    if not on_glibc():
        return
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim.argtypes = (ctypes.c_size_t,)
        trim.restype = ctypes.c_int
        trim(0)


def rss_bytes() -> int:
    """The process's resident set, bytes (``/proc/self/statm``; elsewhere
    the peak, all ``getrusage`` knows): INFO's used_memory, MEMORY STATS."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
