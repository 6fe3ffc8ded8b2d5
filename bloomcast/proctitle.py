"""Secrets off the process title (issue 49): a node started with
``--requirepass`` or ``--cluster-secret`` on its command line rewrites its
own argv memory, so ``/proc/<pid>/cmdline`` and ``ps`` show ``(redacted)``
where the value was (Redis hides its arguments behind its process title).

The original argv of a Python process is not reachable from Python (since
3.8 ``Py_GetArgcArgv`` returns a copy): `setproctitle
<https://pypi.org/project/setproctitle/>`_ finds the memory the kernel shows
and overwrites it (moving ``environ``'s strings when the title is longer:
``os.environ`` and ``getenv`` are unchanged, ``/proc/<pid>/environ`` then
shows the title's tail). The title is the command line as given, each
secret value replaced, as one string; the process's name (``comm``: ``ps
-C``, ``pgrep``, ``top``), which setproctitle would set to the title's
first 15 bytes, is put back.

Until the node reaches this (its start: under a second) the value is
readable, as it is for redis-server; ``--config FILE`` (a file only its
owner reads) keeps a secret off the command line altogether.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

log = logging.getLogger("bloomcast.node")

#: the node's flags whose value is a secret (router/config.py)
SECRET_FLAGS = ("--requirepass", "--cluster-secret")
#: Redis's word for a hidden value (MONITOR, SLOWLOG)
REDACTED = "(redacted)"


def redacted(argv: Sequence[str], flags: Sequence[str] = SECRET_FLAGS) -> list[str] | None:
    """``argv`` with the value of every secret flag replaced by
    :data:`REDACTED`: ``--flag VALUE``, ``--flag=VALUE`` and argparse's
    abbreviations of the flag (``--requirep VALUE``); None when it holds none.
    (Arguments after ``--`` are not options.)"""
    shown = list(argv)
    found = False
    i = 0
    while i < len(shown):
        name, eq, _ = shown[i].partition("=")
        if name == "--":
            break
        if len(name) > 2 and name.startswith("--") and any(f.startswith(name) for f in flags):
            found = True
            if eq:
                shown[i] = name + "=" + REDACTED
            elif i + 1 < len(shown):
                i += 1
                shown[i] = REDACTED
        i += 1
    return shown if found else None


def hide_secrets(argv: Sequence[str] | None = None) -> bool:
    """Rewrite this process's command line without its secret values
    (:func:`redacted` of ``argv``, default ``sys.orig_argv``); True when it
    had some and ``/proc/self/cmdline`` now shows the redacted line. A
    failure (setproctitle's C module missing, an argv it cannot find) is one
    warning saying what to do instead."""
    shown = redacted(sys.orig_argv if argv is None else argv)
    if shown is None:
        return False
    title = " ".join(shown)
    comm = _read("/proc/self/comm").rstrip(b"\n")
    try:
        import setproctitle

        setproctitle.setproctitle(title)
        if comm:
            setproctitle.setthreadtitle(comm.decode(errors="replace"))
        cmdline = _read("/proc/self/cmdline")
        done = cmdline.split(b"\0", 1)[0] == title.encode(errors="surrogateescape")
    except (ImportError, UnicodeError, OSError):
        done = False
    if not done:
        log.warning(
            "The process title still shows %s's value: give secrets with --config FILE",
            " / ".join(SECRET_FLAGS),
        )
    return done


def _read(path: str) -> bytes:
    """(open(), not pathlib: the node's start path leaves pathlib unimported)"""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""
