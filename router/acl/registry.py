"""The node's ACL users, authentication, permission checks and ACL LOG, as
Redis 7.0.15 has them (``src/acl.c``, ``processCommand`` in ``src/server.c``).

The default user starts ``on nopass ~* &* +@all`` (``ACLCreateDefaultUser``);
``--requirepass`` gives it that password instead of ``nopass``. A client
starts as the default user, authenticated when that user is ``on nopass``.
A command is checked after authentication (NOPERM before the subscribed-
context check, as Redis): the command, then for PUBLISH / SPUBLISH /
(S)SUBSCRIBE each channel against the user's ``&`` patterns (glob), and for
PSUBSCRIBE each pattern literally. A denial is logged in ACL LOG: entries of
the same reason, context, object and user within 60 s are one entry with a
count (``ACLLogMatchEntry``), newest first, at most 128 (``acllog-max-len``).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from router.acl.user import User

#: commands whose arguments are channels, and which of them: (first, is_pattern);
#: Redis 7.0.15's key specs flag these (CMD_CHANNEL_PUBLISH / SUBSCRIBE)
CHANNEL_ARGS: dict[str, tuple[int, bool, bool]] = {
    # name: (first channel argument, every argument after it, patterns)
    "publish": (1, False, False),
    "spublish": (1, False, False),
    "subscribe": (1, True, False),
    "ssubscribe": (1, True, False),
    "psubscribe": (1, True, True),
}
LOG_MAX = 128
LOG_GROUP_MS = 60_000


@dataclass
class LogEntry:
    count: int
    reason: str  # "command" / "channel" / "auth"
    context: str  # "toplevel" / "multi" (queued, or run by EXEC)
    object: bytes
    username: bytes
    ctime_ms: int
    client_info: str


class Acl:
    """Users by name, the default user, ACL LOG."""

    def __init__(self, requirepass: str | None) -> None:
        default = User(b"default")
        for rule in (b"+@all", b"~*", b"&*", b"on", b"nopass"):
            default.apply(rule)
        if requirepass:
            default.apply(b"resetpass")
            default.apply(b">" + requirepass.encode())
        self.users: dict[bytes, User] = {b"default": default}
        self.default = default
        self.log: list[LogEntry] = []
        self.denied_commands = 0  # INFO acl_access_denied_cmd, as Redis 7.2 names it
        self.denied_channels = 0
        self.denied_auth = 0

    def default_requires_auth(self) -> bool:
        """Redis's ``authRequired`` for a client not authenticated yet."""
        return not self.default.nopass or not self.default.enabled

    def default_has_password(self) -> bool:
        return not self.default.nopass

    def authenticate(self, name: bytes, password: bytes) -> User | None:
        user = self.users.get(name)
        if user is None or not user.enabled or not user.check_password(password):
            return None
        return user

    def denied(self, user: User, name: str, args: list[bytes]) -> tuple[str, bytes] | None:
        """None when ``user`` may run command ``name`` with ``args``; else
        (reason, object) as ACL LOG records it."""
        if not user.can_run(name):
            return "command", name.encode()
        spec = CHANNEL_ARGS.get(name)
        if spec is None or user.allchannels:
            return None
        first, rest, patterns = spec
        for channel in args[first:] if rest else args[first : first + 1]:
            if not user.may_use_channel(channel, patterns):
                return "channel", channel
        return None

    def add_log(
        self,
        reason: str,
        obj: bytes,
        username: bytes,
        client_info: str,
        context: str = "toplevel",
    ) -> None:
        if reason == "command":
            self.denied_commands += 1
        elif reason == "channel":
            self.denied_channels += 1
        else:
            self.denied_auth += 1
        now = int(time.time() * 1000)
        for i, entry in enumerate(self.log[:10]):  # Redis scans the 10 newest
            if (
                entry.reason == reason
                and entry.context == context
                and entry.object == obj
                and entry.username == username
                and now - entry.ctime_ms <= LOG_GROUP_MS
            ):
                entry.count += 1
                entry.ctime_ms = now
                entry.client_info = client_info
                self.log.insert(0, self.log.pop(i))
                return
        self.log.insert(0, LogEntry(1, reason, context, obj, username, now, client_info))
        del self.log[LOG_MAX:]


def noperm_text(reason: str, obj: bytes) -> str:
    """Redis's NOPERM error for a denied command or channel (``processCommand``)."""
    if reason == "command":
        return f"NOPERM this user has no permissions to run the '{obj.decode()}' command"
    return "NOPERM this user has no permissions to access one of the channels used as arguments"


def revoked(
    client_channels: Collection[bytes],
    client_patterns: Collection[bytes],
    shard: Collection[bytes],
    user: User,
) -> bool:
    """Whether a subscribed client of ``user`` holds a subscription the user
    may no longer have (Redis's ``ACLKillPubsubClientsIfNeeded``)."""
    if user.allchannels:
        return False
    return (
        any(not user.may_use_channel(p, True) for p in client_patterns)
        or any(not user.may_use_channel(c, False) for c in client_channels)
        or any(not user.may_use_channel(c, False) for c in shard)
    )
