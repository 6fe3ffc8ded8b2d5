"""``maxclients`` fitted to the descriptor limit at start, as Redis does.

Redis (``src/server.c`` ``adjustOpenFilesLimit``) needs ``maxclients`` plus
``CONFIG_MIN_RESERVED_FDS`` (32: listeners, logs, files) descriptors; when the
soft limit (``ulimit -n``) is lower it raises it, and when it cannot, it
lowers ``maxclients`` to what the limit allows and says so in three log lines.
A node also keeps descriptors for its cluster bus (:func:`bus_reserve`): its
two links per peer and the accepted links still in their handshake
(``cluster-max-handshakes``), so that a full house of clients never takes
the descriptors its peers need, and a flood of bus connections never takes
those of its clients. ``CONFIG GET maxclients`` shows the fitted value.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from dataclasses import dataclass

log = logging.getLogger("bloomcast.node")

#: Redis's CONFIG_MIN_RESERVED_FDS
MIN_RESERVED_FDS = 32
#: bus links kept for peers at start (two per peer: 32 peers); more peers
#: come out of the slack the limit leaves, as Redis's cluster links do
BUS_PEER_FDS = 64


def bus_reserve(max_handshakes: int) -> int:
    """Descriptors kept for the bus: the accepted links in their handshake
    (``cluster-max-handshakes``, or its automatic floor) and the peers' links."""
    from cluster_bus.api import HANDSHAKES_FLOOR

    return (max_handshakes or HANDSHAKES_FLOOR) + BUS_PEER_FDS


@dataclass(frozen=True)
class Fitted:
    """What :func:`fit_maxclients` found: the (new) soft limit and ``maxclients``."""

    maxclients: int
    limit: int
    raised_from: int | None = None  # the soft limit before it was raised


class TooFewFiles(Exception):
    """The limit leaves no room for a single client (Redis exits then)."""


def fit_maxclients(maxclients: int, reserved: int) -> Fitted:
    """Raise the soft descriptor limit to ``maxclients + reserved`` when it is
    lower (up to the hard limit), else lower ``maxclients`` to fit, with
    Redis's log lines. Raises TooFewFiles when not even one client fits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = maxclients + reserved
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return Fitted(maxclients, soft)
    best, error = soft, ""
    try:  # as Redis: ask for the whole need, the hard limit too
        hard_wanted = hard if hard == resource.RLIM_INFINITY else max(hard, needed)
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard_wanted))
        best = needed
    except OSError as exc:
        error = exc.strerror or str(exc)
    except ValueError:  # Python's EPERM: "not allowed to raise maximum limit"
        error = os.strerror(errno.EPERM)
    if best < needed and hard != resource.RLIM_INFINITY and hard > soft:
        try:  # then as much as the hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            best = hard
        except (OSError, ValueError):
            pass
    if best >= needed:
        log.info(
            "Increased maximum number of open files to %d (it was originally set to %d).",
            best,
            soft,
        )
        return Fitted(maxclients, best, raised_from=soft)
    if best <= reserved:
        raise TooFewFiles(
            f"Your current 'ulimit -n' of {soft} is not enough for the server to start. "
            f"Please increase your open file limit to at least {reserved + 1}. Exiting."
        )
    fitted = best - reserved
    log.warning(
        "You requested maxclients of %d requiring at least %d max file descriptors.",
        maxclients,
        needed,
    )
    log.warning("Server can't set maximum open files to %d because of OS error: %s.", needed, error)
    log.warning(
        "Current maximum open files is %d. maxclients has been reduced to %d to "
        "compensate for low ulimit. If you need higher maxclients increase 'ulimit -n'.",
        best,
        fitted,
    )
    return Fitted(fitted, best, raised_from=soft if best > soft else None)
