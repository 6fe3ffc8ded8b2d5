"""The command table: one small module per command family (mini-redis style).

Each command is a :class:`Command`: Redis's lower-case full name (``pubsub|numsub``
for subcommands, as Redis names them in errors), its arity in Redis's
convention (n > 0: exactly n arguments including the name; n < 0: at least
-n), and a handler ``(ctx, client, args) -> Reply``. The connection checks
existence, arity, authentication and the subscribed context before calling it
(:func:`router.dispatch.execute`).
"""

from __future__ import annotations

from router.commands import (
    acl_cmd,
    client_cmd,
    cluster_cmd,
    config_cmd,
    connection,
    diagnostics,
    hot,
    memory,
    multi,
    operator,
    publish,
    pubsub,
    server,
    subscribe,
)
from router.commands.base import Command, Handler, Reply, subcommand_table

__all__ = ["COMMANDS", "LOOKUP", "Command", "Handler", "Reply", "subcommand_table"]


def _build() -> dict[bytes, Command]:
    table: dict[bytes, Command] = {}
    for module in (
        subscribe,
        publish,
        pubsub,
        connection,
        client_cmd,
        server,
        cluster_cmd,
        multi,
        config_cmd,
        acl_cmd,
        operator,
        diagnostics,
        memory,
        hot,
    ):
        for cmd in module.COMMANDS:
            table[cmd.name.encode()] = cmd
    return table


COMMANDS: dict[bytes, Command] = _build()
#: COMMANDS under lower- and upper-case names: most clients send one of the
#: two, so most requests skip lower-casing the name
LOOKUP: dict[bytes, Command] = {
    **COMMANDS,
    **{name.upper(): cmd for name, cmd in COMMANDS.items()},
}
