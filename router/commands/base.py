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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from router import resp
from router.commands.redis_meta import REDIS_META
from router.resp import Set
from router.resp import Status as S

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
        categories, tips, key specs, subcommands (Redis 7.0 ``addReplyCommandInfo``:
        flags, categories, tips and key specs are sets, and so are no subcommands).
        The pub/sub commands' fields are Redis 7.0.15's own (:mod:`router.commands.redis_meta`)."""
        subs: list[Any] | Set = (
            [c.info() for c in self.subcommands.values()] if self.subcommands else Set()
        )
        meta = REDIS_META.get(self.name)
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
        first, last, step = meta.keys
        return [
            self.name, self.arity, meta.flags, first, last, step,
            meta.acl, meta.tips, meta.key_specs, subs,
        ]  # fmt: skip

    def docs(self) -> dict[str, Any]:
        """The COMMAND DOCS map (Redis 7.0.15's for the pub/sub commands)."""
        meta = REDIS_META.get(self.name)
        doc: dict[str, Any] = (
            dict(meta.docs)
            if meta is not None
            else {"summary": self.summary, "since": "1.0.0", "group": self.group}
        )
        if self.subcommands:
            doc["subcommands"] = {c.name: c.docs() for c in self.subcommands.values()}
        return doc


def subcommand_table(*commands: Command) -> dict[bytes, Command]:
    """Subcommands keyed by their own lower-case name (``numsub`` of ``pubsub|numsub``)."""
    return {c.name.split("|", 1)[1].encode(): c for c in commands}


def unknown_command_text(args: list[bytes]) -> str:
    """Redis's unknown-command error: name and the first arguments, each cut so
    the argument list stays within 128 bytes (``processCommand``)."""
    shown = ""
    for arg in args[1:]:
        if len(shown) >= 128:
            break
        shown += f"'{resp.c_string(arg[: 128 - len(shown)])}' "
    return (
        f"ERR unknown command '{resp.c_string(args[0][:128])}', with args beginning with: {shown}"
    )


def client_info_line(client: Client) -> str:
    """One CLIENT LIST / CLIENT INFO line (Redis's field names)."""
    now = time.monotonic()
    return (
        f"id={client.id} addr={client.addr} laddr={client.laddr} fd=-1 "
        f"name={client.name.decode(errors='replace')} age={int(now - client.created)} "
        f"idle={int(now - client.last_interaction)} flags={client.flags()} db={client.db} "
        f"sub={len(client.channels)} psub={len(client.patterns)} "
        f"ssub={len(client.shard_channels)} multi=-1 qbuf={client.parser.buffered} "
        f"omem={client.output_buffer_size()} cmd={client.last_command} "
        f"user={client.user.name.decode(errors='replace')} resp={client.resp} "
        f"lib-name={client.lib_name.decode(errors='replace')} "
        f"lib-ver={client.lib_ver.decode(errors='replace')}"
    )
