"""``maxclients`` fitted to the descriptor limit at start, as Redis does.

Redis (``src/server.c`` ``adjustOpenFilesLimit``) needs ``maxclients`` plus
``CONFIG_MIN_RESERVED_FDS`` (32: listeners, logs, files) descriptors; when the
soft limit (``ulimit -n``) is lower it raises it, and when it cannot, it
lowers ``maxclients`` to what the limit allows and says so in three log lines.
A node also keeps descriptors for its cluster bus: its two links per peer
and the accepted links still in their handshake (``cluster-max-handshakes``),
so that a full house of clients never takes
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
#: the least automatic handshake cap a low limit shrinks it to
MIN_HANDSHAKES = 16


@dataclass(frozen=True)
class Fitted:
    """What :func:`fit_maxclients` found: the (new) soft limit, ``maxclients``,
    and the bus's cap on accepted links in their handshake (0: no bus)."""

    maxclients: int
    limit: int
    handshakes: int = 0
    raised_from: int | None = None  # the soft limit before it was raised


class TooFewFiles(Exception):
    """The limit leaves no room for a single client (Redis exits then)."""


def fit_maxclients(maxclients: int, bus: bool = False, handshakes: int = 0) -> Fitted:
    """Raise the soft descriptor limit to what ``maxclients`` and the reserve
    need when it is lower (up to the hard limit), else lower ``maxclients``
    to fit, with Redis's log lines. The reserve: Redis's 32, and with the
    ``bus`` its peers' links (``BUS_PEER_FDS``) and the accepted links in
    their handshake (``handshakes``, ``cluster-max-handshakes``; 0: the
    automatic cap, 128, shrunk under a low limit to a quarter of what the
    limit leaves, at least 16, so that a node still starts where Redis
    would). Raises TooFewFiles when not even one client fits."""
    from cluster_bus.api import HANDSHAKES_FLOOR

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = (handshakes or HANDSHAKES_FLOOR) if bus else 0
    reserved = MIN_RESERVED_FDS + (BUS_PEER_FDS + cap if bus else 0)
    needed = maxclients + reserved
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return Fitted(maxclients, soft, cap)
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
        return Fitted(maxclients, best, cap, raised_from=soft)
    if bus and not handshakes:  # the automatic cap gives way to clients under a low limit
        left = best - MIN_RESERVED_FDS - BUS_PEER_FDS
        cap = min(cap, max(MIN_HANDSHAKES, left // 4))
        reserved = MIN_RESERVED_FDS + BUS_PEER_FDS + cap
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
    if bus and not handshakes:
        log.warning(
            "The cluster bus keeps %d descriptors for peers and %d for links in their "
            "handshake (cluster-max-handshakes) under this limit.",
            BUS_PEER_FDS,
            cap,
        )
    return Fitted(fitted, best, cap, raised_from=soft if best > soft else None)
