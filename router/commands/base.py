"""Command and Reply: what every command module builds (no import of the table,
so :mod:`router.commands` can import its modules without a cycle).

A :class:`Command` is Redis's lower-case full name (``pubsub|numsub`` for
subcommands, as Redis names them in errors), its arity in Redis's convention
(n > 0: exactly n arguments including the name; n < 0: at least -n), and a
handler ``(node, client, args) -> Reply``. A Reply is the encoded bytes, or a
future of them when the reply waits (subscribe visibility).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from router.client import Client
    from router.node import Node

Reply = bytes | asyncio.Future[bytes]
Handler = Callable[["Node", "Client", list[bytes]], Reply]


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

    def info(self) -> list[Any]:
        """The COMMAND INFO entry: name, arity, flags, first/last key, step, ACL
        categories, tips, key specs, subcommands."""
        subs = [c.info() for c in (self.subcommands or {}).values()]
        return [self.name, self.arity, list(self.flags), 0, 0, 0, [f"@{self.group}"], [], [], subs]

    def docs(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"summary": self.summary, "since": "1.0.0", "group": self.group}
        if self.subcommands:
            doc["subcommands"] = {c.name: c.docs() for c in self.subcommands.values()}
        return doc


def subcommand_table(*commands: Command) -> dict[bytes, Command]:
    """Subcommands keyed by their own lower-case name (``numsub`` of ``pubsub|numsub``)."""
    return {c.name.split("|", 1)[1].encode(): c for c in commands}
