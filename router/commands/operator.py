"""SHUTDOWN, ROLE, TIME, LASTSAVE, MONITOR, READONLY, READWRITE: what an operator (or
a health check) types at a node, answered as Redis 7.0.15 answers.

- SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT] (``shutdownCommand`` in
  ``src/db.c``): stops the node as SIGTERM does (``bloomcast node``: LEAVE
  to every peer, the clients closed, the traffic tap's spool closed, the
  nodes file released), through :meth:`router.context.NodeView.shutdown`.
  A node has no data set and no replicas: SAVE / NOSAVE / NOW / FORCE are
  checked as Redis checks them and change nothing; the client gets no
  reply, its connection closes with the node (as Redis's, which exits).
  ABORT finds no shutdown in progress: a node's stop waits for no replica
  (Redis can abort only one waiting for replicas, ``shutdown-timeout``).
  Refused inside MULTI (Redis's ``no_multi`` flag, :mod:`router.dispatch`).
- ROLE (``roleCommand``): a master at replication offset 0 with no replicas.
- TIME (``timeCommand``): seconds and microseconds, two bulk strings.
- LASTSAVE (``lastsaveCommand``): the node's start time (unix seconds), as a
  Redis that never saved answers (``server.lastsave`` is set at start); the
  nodes file is not Redis's RDB.
- MONITOR (``monitorCommand``): the client gets every command the node
  runs from then on (:mod:`router.hooks`).
- READONLY / READWRITE (``src/cluster.c``): OK on a cluster node (a node with
  a bus; it has no replicas to read from, so only CLIENT LIST's ``r`` flag
  changes), Redis's error on a standalone one (``--no-bus``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from router import resp
from router.commands.base import Command, Reply

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext

_SYNTAX = resp.error("ERR syntax error")
_ROLE = b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n"
_NO_CLUSTER = resp.error("ERR This instance has cluster support disabled")
_SHUTDOWN_WORDS = frozenset({b"nosave", b"save", b"now", b"force", b"abort"})


def shutdown(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    words = [a.lower() for a in args[1:]]
    if any(w not in _SHUTDOWN_WORDS for w in words):
        return _SYNTAX
    abort = b"abort" in words
    if (abort and len(set(words)) > 1) or (b"save" in words and b"nosave" in words):
        return _SYNTAX  # Redis: "Illegal combo"
    if abort:
        return resp.error("ERR No shutdown in progress.")
    # no reply: the connection waits, and closes when the node stops
    return ctx.view.shutdown(client)


def role(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return _ROLE


def time_(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    now_us = time.time_ns() // 1000
    return (
        b"*2\r\n"
        + resp.bulk(b"%d" % (now_us // 1_000_000))
        + resp.bulk(b"%d" % (now_us % 1_000_000))
    )


def lastsave(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.integer(int(ctx.view.started))


def readonly(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if not ctx.cluster_enabled:
        return _NO_CLUSTER
    client.extras.readonly = True
    return resp.OK


def readwrite(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if not ctx.cluster_enabled:
        return _NO_CLUSTER
    client.extras.readonly = False
    return resp.OK


def monitor(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """MONITOR (``monitorCommand``): every command the node runs from now on,
    as a line (:meth:`router.hooks.Hooks.feed`); once is enough."""
    if client.in_exec:
        return resp.error("ERR MONITOR isn't allowed for DENY BLOCKING client")
    if client.id in ctx.hooks.monitors:
        return b""  # Redis ignores a second MONITOR: no reply
    ctx.hooks.add_monitor(ctx, client)
    return resp.OK


COMMANDS = (
    Command(
        "shutdown",
        -1,
        shutdown,
        "Synchronously saves the database(s) to disk and shuts down the Redis server.",
        "server",
        no_multi=True,
    ),
    Command("role", 1, role, "Returns the replication role.", "server"),
    Command("time", 1, time_, "Returns the server time.", "server"),
    Command("lastsave", 1, lastsave, "Returns the Unix timestamp of the last save.", "server"),
    Command("readonly", 1, readonly, "Enables read-only queries for a connection.", "cluster"),
    Command("readwrite", 1, readwrite, "Enables read-write queries for a connection.", "cluster"),
    Command(
        "monitor",
        1,
        monitor,
        "Listens for all requests received by the server in real-time.",
        "server",
    ),
)
