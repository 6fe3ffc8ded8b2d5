"""The checks of Redis 7.0.15's ``processCommand`` (``src/server.c``) that
reach beyond the node's own command table, for :func:`router.dispatch.execute`.

- The subscribed context: a RESP2 connection subscribed to anything may run
  only (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING, QUIT and RESET; any other
  command Redis knows gets ``Can't execute '<full name>' ...``, also one the
  node does not implement (GET, CONFIG REWRITE, ...): Redis checks the name
  (its whole command table, ``router/acl/redis_commands.json``), the arity,
  authentication and ACL first (command rules; a node has no keys, so key
  patterns are not checked). A name Redis does not know stays an unknown
  command.
- CROSSSLOT: on a cluster node (one with a bus) the shard channels of one
  SSUBSCRIBE / SUNSUBSCRIBE, and of the commands an EXEC runs, must hash to
  one slot (``getNodeByQuery`` in ``src/cluster.c``); SPUBLISH names one. A
  standalone Redis, like a node without a bus, does not check.
- ``POST`` and ``Host:`` as a command name: an HTTP request (cross-protocol
  scripting); Redis closes the connection without a reply
  (``securityWarningCommand``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from cluster_bus.slots import key_slot
from router import resp
from router.acl.user import COMMAND_ARITY
from router.commands.base import Command
from router.states import SUBSCRIBED

if TYPE_CHECKING:
    from router.commands.base import Reply, Transaction
    from router.context import CommandClient, CommandContext

#: commands a RESP2 client may send while subscribed (Redis's processCommand)
SUBSCRIBED_ALLOWED = frozenset(
    {"subscribe", "ssubscribe", "sunsubscribe", "psubscribe", "unsubscribe", "punsubscribe"}
    | {"ping", "quit", "reset"}
)
CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"
#: command names Redis takes for an HTTP request
HTTP = frozenset({b"post", b"host:"})


def context_error(name: str) -> str:
    """The subscribed context's refusal of command ``name`` (its full name)."""
    return (
        f"ERR Can't execute '{name}': only (P|S)SUBSCRIBE / "
        "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
    )


def redis_command(args: list[bytes]) -> tuple[str, int] | str | None:
    """Redis 7.0.15's lookup of a request (``lookupCommand``): (full name,
    arity) of the command or subcommand it names; Redis's error text for an
    unknown subcommand of a container; None for a name Redis does not know."""
    try:
        name = args[0].lower().decode()
    except UnicodeDecodeError:
        return None
    arity = COMMAND_ARITY.get(name)
    if arity is None or "|" in name:
        return None
    if len(args) >= 2 and f"{name}|" in _CONTAINERS:
        try:
            full = f"{name}|{args[1].lower().decode()}"
        except UnicodeDecodeError:
            full = ""
        sub = COMMAND_ARITY.get(full)
        if sub is None:
            shown = resp.c_string(args[1][:128])
            return f"ERR unknown subcommand '{shown}'. Try {name.upper()} HELP."
        return full, sub
    return name, arity


#: ``name|`` of every Redis container command
_CONTAINERS = frozenset(n.split("|", 1)[0] + "|" for n in COMMAND_ARITY if "|" in n)


def _keys(cmd: Command, args: list[bytes]) -> list[bytes]:
    """The shard channels a command names (Redis's key specs of SSUBSCRIBE,
    SUNSUBSCRIBE, SPUBLISH); the node's other commands have no keys."""
    if cmd.name in ("ssubscribe", "sunsubscribe"):
        return args[1:]
    if cmd.name == "spublish":
        return args[1:2]
    return []


def cross_slot(cmd: Command, args: list[bytes], queued: Transaction | None) -> bool:
    """Whether a command's keys (EXEC: the keys of every queued command) are
    in more than one slot. As Redis, each key is compared with the first one."""
    keys = (
        [k for qcmd, qargs in queued or () for k in _keys(qcmd, qargs)]
        if cmd.name == "exec"
        else _keys(cmd, args)
    )
    if len(keys) < 2:
        return False
    first = keys[0]
    slot = key_slot(first)
    return any(k != first and key_slot(k) != slot for k in keys[1:])


@functools.cache
def refused_here(name: str, arity: int) -> Command:
    """A Redis command the node does not have, for a RESP2 subscriber: its
    name and arity, so it is checked in Redis's order up to the subscribed
    context, which refuses it (never run)."""

    def never(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
        raise AssertionError("refused in the subscribed context")

    return Command(name, arity, never)


def elsewhere(client: CommandClient, args: list[bytes], text: str) -> Command | bytes:
    """A command or subcommand the node does not have: refused with ``text``
    (unknown command or subcommand); an HTTP request closes the connection;
    a RESP2 subscriber's command that Redis has gets a stand-in
    (:func:`refused_here`), checked as Redis checks it up to the subscribed
    context's refusal."""
    client.last_command = "NULL"  # Redis's lastcmd of a command it does not know
    if args[0].lower() in HTTP:
        client.drop()  # Redis frees the client: no reply, nothing pending
        return b""
    if client.state is SUBSCRIBED:
        found = redis_command(args)
        if isinstance(found, str):
            return reject(client, None, found)
        if found is not None:
            return refused_here(*found)
    return reject(client, None, text)


def reject(conn: CommandClient, cmd: Command | None, text: str) -> bytes:
    """A command refused before it ran (Redis ``rejectCommand``)."""
    if cmd is not None:
        conn.ctx.stats.command_stat(cmd.name).rejected_calls += 1
    if cmd is not None and cmd.name == "exec":  # execCommandAbort, in MULTI or not
        conn.end_multi()
        text = "EXECABORT Transaction discarded because of: " + text.removeprefix("ERR ")
    elif conn.multi is not None:
        conn.multi.dirty = True
    return resp.error(text)
