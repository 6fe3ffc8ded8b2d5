"""``--aclfile`` in Redis's users.acl format: one ``user <name> <rules...>``
line per user (``ACLLoadFromFile`` / ``ACLSaveToFile``, Redis 7.0.15).

A load is all or nothing: any error keeps the users as they were and
returns Redis's error text (``path:line: ...`` parts, then the WARNING);
a successful load replaces every user (a file without ``default`` keeps the
default user as Redis creates it) and disconnects the clients of the
replaced users, the default user's excepted. ACL SAVE writes ACL LIST's lines
to a temporary file and renames it over the ACL file.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from router.acl.registry import Acl
from router.acl.user import AclError, User, describe

if TYPE_CHECKING:
    from router.context import CommandContext


class AclFileError(Exception):
    """The ACL file given at startup could not be loaded (Redis's text)."""


def parse(text: str, path: str) -> tuple[dict[bytes, User], str]:
    """The users a file defines, and Redis's error text ("" when none)."""
    users: dict[bytes, User] = {}
    errors = ""
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip(" \t\r\n")
        if not line:
            continue
        argv = [a.encode() for a in line.split(" ")]
        if argv[0] != b"user" or len(argv) < 2:
            errors += f"{path}:{number} should start with user keyword followed by the username. "
            continue
        name = argv[1]
        if b"\x00" in name:
            errors += f"'{path}:{number}: username '{name.decode()}' contains invalid characters. "
            continue
        if name in users:
            errors += f"WARNING: Duplicate user '{name.decode()}' found on line {number}. "
            continue
        user = users[name] = User(name)
        syntax_error = False
        for rule in argv[2:]:
            rule = rule.strip(b"\t\r\n")
            try:
                user.apply(rule)
            except AclError as exc:
                if str(exc).startswith("Unknown command"):
                    errors += (
                        f"{path}:{number}: Error in applying operation "
                        f"'{rule.decode(errors='replace')}': {exc}. "
                    )
                elif not syntax_error:
                    errors += f"{path}:{number}: {exc}. "
                    syntax_error = True
    return users, errors


def load_file(ctx: CommandContext, path: str) -> str | None:
    """Load ``path`` into the node's users; None, or Redis's error text."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            text = fh.read()
    except OSError as exc:
        return f"Error loading ACLs, opening file '{path}': {exc.strerror}"
    users, errors = parse(text, path)
    if errors:
        return errors + (
            "WARNING: ACL errors detected, no change to the previously active ACL rules "
            "was performed"
        )
    acl = ctx.acl
    old = acl.users
    default = acl.default
    new_default = users.pop(b"default", None) or Acl(None).default
    default.__dict__.update(new_default.__dict__)
    acl.users = dict(sorted({b"default": default, **users}.items()))
    for client in list(ctx.clients.values()):
        if client.user is not default and client.user in old.values():
            client.kill()
    return None


def save_file(acl: Acl, path: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as fh:
        for user in acl.users.values():
            fh.write(describe(user) + "\n")
    os.replace(tmp, path)
