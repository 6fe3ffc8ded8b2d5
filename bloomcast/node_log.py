"""The node's log in Redis's style, and its SIGHUP.

Each line is Redis's (``serverLogRaw`` in redis/src/server.c)::

    pid:role dd Mon yyyy hh:mm:ss.mmm <level> message
    4242:M 23 Nov 2026 17:30:01.123 * bloomcast node 3f2a... ready on 127.0.0.1:7001

Levels by Redis's names and symbols: ``debug`` ``.``, ``verbose`` ``-``,
``notice`` ``*``, ``warning`` ``#`` (redis.conf ``loglevel``, default
notice). Python's levels map onto them: DEBUG is debug, :data:`VERBOSE` (15)
verbose, INFO notice, WARNING and above warning. The role is always ``M``: a
node is a master of no slots' keys, as a Redis Cluster master.

SIGHUP: Redis ignores it; the node does too, and with ``--logfile`` it
reopens the file (for logrotate's ``create`` mode), as many daemons do.

An exception that escapes a callback of the node's event loop (asyncio logs
each one, with its traceback, by default) is counted (INFO
``loop_exceptions``) and logged at most once a minute per exception type and
where it happened (:class:`LoopExceptions`, through
:class:`netutil.rate_limited_log.RateLimitedLog`): a bug hit by every request neither
floods the log nor goes unseen (issue 41).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

from netutil.rate_limited_log import RateLimitedLog
from router.client_log import VERBOSE  # Redis's "verbose", between DEBUG and INFO

if TYPE_CHECKING:  # (the compiled plane's node loads no Python twin: netutil.dataplane)
    from router.stats import NodeStats

logging.addLevelName(VERBOSE, "VERBOSE")

#: --loglevel name -> Python level
LEVELS = {"debug": logging.DEBUG, "verbose": VERBOSE, "notice": logging.INFO}
LEVELS["warning"] = logging.WARNING


def _symbol(levelno: int) -> str:
    if levelno < VERBOSE:
        return "."
    if levelno < logging.INFO:
        return "-"
    if levelno < logging.WARNING:
        return "*"
    return "#"


class RedisFormatter(logging.Formatter):
    """``pid:M dd Mon yyyy hh:mm:ss.mmm <symbol> message``, one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%d %b %Y %H:%M:%S", time.localtime(record.created))
        millis = int(record.msecs)
        message = record.getMessage()
        if record.exc_info:
            message += " | " + self.formatException(record.exc_info).replace("\n", " | ")
        return f"{os.getpid()}:M {stamp}.{millis:03d} {_symbol(record.levelno)} {message}"


def setup(loglevel: str, logfile: str | None) -> logging.Handler:
    """Route every ``bloomcast.*`` and root log record to one handler at ``loglevel``.

    ``logfile`` None or "" logs to stderr. Raises OSError if the file cannot
    be opened for append.
    """
    handler: logging.Handler
    if logfile:
        handler = logging.FileHandler(logfile, mode="a", encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedisFormatter())
    handler.setLevel(LEVELS[loglevel])
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS[loglevel])
    return handler


def on_sighup(handler: logging.Handler) -> None:
    """SIGHUP: reopen the log file (a stream handler has nothing to reopen)."""
    if isinstance(handler, logging.FileHandler):
        handler.acquire()
        try:
            if handler.stream is not None:
                handler.stream.close()
            handler.stream = handler._open()
        finally:
            handler.release()
    logging.getLogger("bloomcast.node").info("Received SIGHUP: log file reopened, node running")


class LoopExceptions:
    """The node's event-loop exception handler (module doc), counting in
    ``stats`` (the node's INFO counters)."""

    def __init__(self, stats: NodeStats) -> None:
        self.stats = stats
        self._warnings = RateLimitedLog(logger=logging.getLogger("bloomcast.node"))

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.stats.loop_exceptions += 1
        exc = context.get("exception")
        message = str(context.get("message", "unhandled exception in the event loop"))
        where, text = message, message
        if isinstance(exc, BaseException):
            frames = traceback.extract_tb(exc.__traceback__)
            if frames:
                last = frames[-1]
                where = f"{last.filename}:{last.lineno}"
            text = f"{message}: {exc!r} at {where}"
            cause = type(exc).__name__
        else:
            cause = "no exception"
        self._warnings.warn(cause, where, f"event loop: {text}")
