"""Command and Reply: what every command module builds (no import of the table,
so :mod:`router.commands` can import its modules without a cycle).

A :class:`Command` is Redis's lower-case full name (``pubsub|numsub`` for
subcommands, as Redis names them in errors), its arity in Redis's convention
(n > 0: exactly n arguments including the name; n < 0: at least -n), and a
handler ``(ctx, client, args) -> Reply``: ``ctx`` is the node's
:class:`router.context.CommandContext`, ``client`` the client that sent the
request (:class:`router.context.CommandClient`). A Reply is the
encoded bytes, or a future of them when the reply waits (subscribe
visibility, CLIENT PAUSE).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from router.commands.redis_meta import command_meta
from router.resp import Reply, Set
from router.resp import Status as S

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext

__all__ = ["CONFIRMING", "SETTLING", "Command", "Handler", "Reply", "Transaction"]

#: commands whose replies are pub/sub confirmations: Redis 7.0 sends them as
#: pushes (CLIENT_PUSHING), which CLIENT REPLY OFF / SKIP do not silence
CONFIRMING = frozenset(
    {"subscribe", "ssubscribe", "sunsubscribe", "psubscribe", "unsubscribe", "punsubscribe"}
)
Handler = Callable[["CommandContext", "CommandClient", list[bytes]], Reply]
#: commands after which the connection's state may change (subscriptions,
#: the protocol): :meth:`router.connection.Connection.settle` (MULTI, EXEC
#: and DISCARD change it themselves)
SETTLING = CONFIRMING | {"hello", "reset"}


@dataclass(frozen=True)
class Command:
    name: str
    arity: int
    handler: Handler
    summary: str = ""
    group: str = "pubsub"
    flags: tuple[str, ...] = ()
    no_auth: bool = False
    subcommands: dict[bytes, Command] | None = field(default=None, hash=False)
    #: on a cluster node its shard channels (EXEC: its queue's) must hash to
    #: one slot, else CROSSSLOT (:mod:`router.command_checks`)
    slot_checked: bool = False
    #: refused inside MULTI (Redis's ``no_multi`` flag: SHUTDOWN)
    no_multi: bool = False
    #: derived: the name is in :data:`SETTLING`
    settles: bool = field(init=False, default=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "settles", self.name in SETTLING)

    def info(self) -> list[Any]:
        """The COMMAND INFO entry: name, arity, flags, first/last key, step, ACL
        categories, tips, key specs, subcommands (Redis 7.0 ``addReplyCommandInfo``:
        flags, categories, tips and key specs are sets, and so are no subcommands).
        Every field is Redis 7.0.15's own (:mod:`router.commands.redis_meta`) for a
        command Redis 7.0.15 has; the subcommands are the ones the node implements."""
        subs: list[Any] | Set = (
            [c.info() for c in self.subcommands.values()] if self.subcommands else Set()
        )
        meta = command_meta(self.name)
        if meta is None:
            flags = Set(S(f) for f in self.flags)
            return [
                self.name,
                self.arity,
                flags,
                0,
                0,
                0,
                Set((S(f"@{self.group}"),)),
                Set(),
                Set(),
                subs,
            ]
        return [*meta.info, subs]

    def docs(self) -> dict[str, Any]:
        """The COMMAND DOCS map (Redis 7.0.15's where Redis 7.0.15 has the command)."""
        meta = command_meta(self.name)
        doc: dict[str, Any] = (
            dict(meta.docs)
            if meta is not None
            else {"summary": self.summary, "since": "1.0.0", "group": self.group}
        )
        if self.subcommands:
            doc["subcommands"] = {c.name: c.docs() for c in self.subcommands.values()}
        return doc


class Transaction(list[tuple[Command, list[bytes]]]):
    """MULTI's queued commands; ``dirty``: one was refused while queueing
    (Redis's CLIENT_DIRTY_EXEC), so EXEC answers EXECABORT."""

    dirty = False


def subcommand_table(*commands: Command) -> dict[bytes, Command]:
    """Subcommands keyed by their own lower-case name (``numsub`` of ``pubsub|numsub``)."""
    return {c.name.split("|", 1)[1].encode(): c for c in commands}
