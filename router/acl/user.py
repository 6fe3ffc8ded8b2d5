"""One ACL user and its rules, as Redis 7.0.15 defines them (``src/acl.c``
``ACLSetUser`` / ``ACLSetSelector``, root selector only).

Rules: ``on`` ``off`` ``nopass`` ``resetpass`` ``>pw`` ``<pw`` ``#hash``
``!hash`` ``sanitize-payload`` ``skip-sanitize-payload`` ``reset``;
channels ``&pattern`` ``allchannels`` ``resetchannels``; keys (kept for
ACL LIST, a pub/sub node has none) ``~pattern`` ``%RW~pattern`` ``allkeys``
``resetkeys``; commands ``+cmd`` ``-cmd`` ``+cmd|sub`` ``+@category``
``-@category`` ``allcommands`` ``nocommands``. A rule error raises
:class:`AclError` with Redis's text (``ACLSetUserStringError``).

Commands are Redis 7.0.15's whole table (``redis_commands.json``: every
command and subcommand with its ACL categories and its arity, read from
redis-server's COMMAND; :mod:`router.commands.redis_meta_dump` writes the
arities), so a rule naming a Redis command the node does not have is
accepted as Redis accepts it, and the description that ACL LIST and GETUSER
show is computed the way Redis computes it (``ACLDescribeSelectorCommandRules``:
+@all or -@all, then the best-fitting categories, then single commands).
Redis emits the single commands in its command dict's order, which is
randomised per process; they are emitted here in name order.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

with open(os.path.join(os.path.dirname(__file__), "redis_commands.json"), "rb") as _fh:
    _DATA = json.load(_fh)
#: Redis 7.0.15's ACL categories, in ACL CAT's order
CATEGORIES: list[str] = _DATA["categories"]
#: every command and subcommand full name -> its categories
COMMAND_CATEGORIES: dict[str, frozenset[str]] = {
    name: frozenset(cats) for name, cats in _DATA["commands"].items()
}
#: every command and subcommand full name -> its arity (Redis's convention)
COMMAND_ARITY: dict[str, int] = _DATA["arity"]
#: the node's own commands (a dotted name, as a Redis module's, which Redis never
#: takes): their categories, so ``+bloomcast.hotchannels``, ``+@pubsub`` and
#: ``-@slow`` name them as they name Redis's
OWN_COMMANDS = {"bloomcast.hotchannels": (frozenset({"pubsub", "slow"}), -1)}
for _name, (_cats, _arity) in OWN_COMMANDS.items():
    COMMAND_CATEGORIES[_name] = _cats
    COMMAND_ARITY[_name] = _arity
#: parent command -> its subcommands' full names
SUBCOMMANDS: dict[str, list[str]] = {}
for _name in COMMAND_CATEGORIES:
    if "|" in _name:
        SUBCOMMANDS.setdefault(_name.split("|")[0], []).append(_name)

_HASH = re.compile(r"[0-9a-f]{64}\Z")
_CHANNEL_PERM_ERR = (
    "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and "
    "does not have any effect. Try 'resetchannels' to start with an empty list of channels"
)
_KEY_PERM_ERR = (
    "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does "
    "not have any effect. Try 'resetkeys' to start with an empty list of patterns"
)
UNKNOWN = "Unknown command or category name in ACL"
SYNTAX = "Syntax error"


class AclError(Exception):
    """A rule Redis rejects; ``str(exc)`` is Redis's reason."""


def hash_password(password: bytes) -> str:
    import hashlib  # here, not at start: it maps OpenSSL's digests (~0.6 MB per node)

    return hashlib.sha256(password).hexdigest()


@dataclass
class User:
    """A user: flags, passwords (SHA-256 hex), keys, channels, commands."""

    name: bytes
    enabled: bool = False
    nopass: bool = False
    sanitize: str = ""  # "", "sanitize-payload" or "skip-sanitize-payload"
    passwords: list[str] = field(default_factory=list)
    allkeys: bool = False
    keys: list[tuple[str, bytes]] = field(default_factory=list)  # (perm, pattern)
    allchannels: bool = False
    channels: list[bytes] = field(default_factory=list)
    allcommands: bool = False  # +@all: future commands too
    allowed: set[str] = field(default_factory=set)
    #: +@all and allchannels: the check every command makes, kept as one flag
    unrestricted: bool = False

    def copy(self) -> User:
        return User(
            self.name,
            self.enabled,
            self.nopass,
            self.sanitize,
            list(self.passwords),
            self.allkeys,
            list(self.keys),
            self.allchannels,
            list(self.channels),
            self.allcommands,
            set(self.allowed),
            self.unrestricted,
        )

    # ------------------------------------------------------------ rules

    def apply(self, rule: bytes) -> None:
        """Apply one rule (Redis's ``ACLSetUser``); AclError on a bad one."""
        try:
            self._apply(rule)
        finally:
            self.unrestricted = (
                self.allcommands
                and self.allchannels
                and len(self.allowed) == len(COMMAND_CATEGORIES)
            )

    def _apply(self, rule: bytes) -> None:
        if not rule:
            return
        low = rule.lower()
        first = rule[:1]
        if low == b"on" or low == b"off":
            self.enabled = low == b"on"
        elif low in (b"sanitize-payload", b"skip-sanitize-payload"):
            self.sanitize = low.decode()
        elif low == b"nopass":
            self.nopass, self.passwords = True, []
        elif low == b"resetpass":
            self.nopass, self.passwords = False, []
        elif first in (b">", b"#"):
            digest = hash_password(rule[1:]) if first == b">" else _checked_hash(rule[1:])
            if digest not in self.passwords:
                self.passwords.append(digest)
            self.nopass = False
        elif first in (b"<", b"!"):
            digest = hash_password(rule[1:]) if first == b"<" else _checked_hash(rule[1:])
            if digest not in self.passwords:
                raise AclError("The password you are trying to remove from the user does not exist")
            self.passwords.remove(digest)
        elif low == b"reset":
            for step in (b"resetpass", b"resetkeys", b"resetchannels", b"off", b"-@all"):
                self.apply(step)
            self.sanitize = "sanitize-payload"
        else:
            self._apply_selector(rule, low)

    def _apply_selector(self, rule: bytes, low: bytes) -> None:
        if low in (b"allkeys", b"~*"):
            self.allkeys, self.keys = True, []
        elif low == b"resetkeys":
            self.allkeys, self.keys = False, []
        elif low in (b"allchannels", b"&*"):
            self.allchannels, self.channels = True, []
        elif low == b"resetchannels":
            self.allchannels, self.channels = False, []
        elif low in (b"allcommands", b"+@all"):
            self.allcommands, self.allowed = True, set(COMMAND_CATEGORIES)
        elif low in (b"nocommands", b"-@all"):
            self.allcommands, self.allowed = False, set()
        elif rule[:1] in (b"~", b"%"):
            self._key_rule(rule)
        elif rule[:1] == b"&":
            if self.allchannels:
                raise AclError(_CHANNEL_PERM_ERR)
            if b" " in rule:
                raise AclError(SYNTAX)
            if rule[1:] not in self.channels:
                self.channels.append(rule[1:])
        elif rule[:2] in (b"+@", b"-@"):
            category = low[2:].decode(errors="replace")
            if category not in CATEGORIES:
                raise AclError(UNKNOWN)
            names = {n for n, cats in COMMAND_CATEGORIES.items() if category in cats}
            self._change(names, rule[:1] == b"+")
        elif rule[:1] in (b"+", b"-"):
            self._command_rule(low[1:].decode(errors="replace"), rule[:1] == b"+")
        else:
            raise AclError(SYNTAX)

    def _key_rule(self, rule: bytes) -> None:
        if self.allkeys:
            raise AclError(_KEY_PERM_ERR)
        perm, offset = "", 1
        if rule[:1] == b"%":
            perm = "%"
            while offset < len(rule):
                c = rule[offset : offset + 1].upper()
                if c in (b"R", b"W") and c.decode() not in perm:
                    perm += c.decode()
                elif c == b"~":
                    offset += 1
                    break
                else:
                    raise AclError(SYNTAX)
                offset += 1
            if perm == "%":  # "%", "%~x": no permission (7.0.15: syntax error; "%W" is fine)
                raise AclError(SYNTAX)
            perm = "%" + "".join(sorted(perm[1:], key="RW".index)) + "~"
            if perm == "%RW~":
                perm = "~"
        else:
            perm = "~"
        pattern = rule[offset:]
        if b" " in pattern:
            raise AclError(SYNTAX)
        for i, (old, pat) in enumerate(self.keys):
            if pat == pattern:
                if old != perm:
                    self.keys[i] = ("~", pat)
                return
        self.keys.append((perm, pattern))

    def _command_rule(self, name: str, allow: bool) -> None:
        if "|" in name and allow:
            parent, _, sub = name.rpartition("|")
            if parent not in COMMAND_CATEGORIES:
                raise AclError(UNKNOWN)
            if "|" in parent:
                raise AclError("Allowing first-arg of a subcommand is not supported")
            if not sub:
                raise AclError(SYNTAX)
            if parent not in SUBCOMMANDS:
                raise AclError(SYNTAX)  # first-arg rules (SELECT|0): not kept by this node
        if name not in COMMAND_CATEGORIES:
            raise AclError(UNKNOWN)
        self._change({name, *SUBCOMMANDS.get(name, ())}, allow)

    def _change(self, names: set[str], allow: bool) -> None:
        if allow:
            self.allowed |= names
        else:
            self.allowed -= names
            # a parent whose subcommand was denied is still allowed as a name
            # (Redis keeps the parent's bit); nothing else to do

    # ------------------------------------------------------------ checks

    def can_run(self, fullname: str) -> bool:
        return fullname in self.allowed or (self.allcommands and fullname not in COMMAND_CATEGORIES)

    def may_use_channel(self, channel: bytes, is_pattern: bool) -> bool:
        """Redis's ``ACLCheckChannelAgainstList``: a pattern (PSUBSCRIBE) must be
        one of the user's patterns literally; a channel must match one."""
        if self.allchannels:
            return True
        from router.glob import stringmatch

        for allowed in self.channels:
            if allowed == channel if is_pattern else stringmatch(allowed, channel):
                return True
        return False

    def check_password(self, password: bytes) -> bool:
        return self.nopass or hash_password(password) in self.passwords


def _checked_hash(raw: bytes) -> str:
    text = raw.decode(errors="replace")
    if not _HASH.match(text):
        raise AclError(
            "The password hash must be exactly 64 characters and contain only lowercase "
            "hexadecimal characters"
        )
    return text


def describe_commands(user: User) -> str:
    """Redis's ``ACLDescribeSelectorCommandRules`` over Redis's whole table."""
    additive = not user.allcommands
    rules = ["-@all" if additive else "+@all"]
    fake: set[str] = set() if additive else set(COMMAND_CATEGORIES)
    temp = set(user.allowed)
    members = {
        cat: {n for n, cats in COMMAND_CATEGORIES.items() if cat in cats} for cat in CATEGORIES
    }
    applied: set[str] = set()
    while True:
        best, mindiff, maxsame = None, 1 << 31, 0
        for cat in CATEGORIES:
            if cat in applied:
                continue
            on = len(members[cat] & temp)
            off = len(members[cat]) - on
            diff, same = (off, on) if additive else (on, off)
            if same > diff and (diff < mindiff or (diff == mindiff and same > maxsame)):
                best, mindiff, maxsame = cat, diff, same
        if best is None:
            break
        if additive:
            fake |= members[best]
            temp -= members[best]
        else:
            fake -= members[best]
            temp |= members[best]
        rules.append(("+@" if additive else "-@") + best)
        applied.add(best)
    for parent in sorted(n for n in COMMAND_CATEGORIES if "|" not in n):
        for name in [parent, *sorted(SUBCOMMANDS.get(parent, ()))]:
            has = name in user.allowed
            if has != (name in fake):
                rules.append(("+" if has else "-") + name)
                change = {name, *SUBCOMMANDS.get(name, ())}
                fake = fake | change if has else fake - change
    return " ".join(rules)


def describe_keys(user: User) -> str:
    if user.allkeys:
        return "~*"
    return " ".join(perm + pat.decode(errors="surrogateescape") for perm, pat in user.keys)


def describe_channels(user: User, reset: bool) -> str:
    if user.allchannels:
        return "&*"
    pats = ["&" + c.decode(errors="surrogateescape") for c in user.channels]
    return " ".join((["resetchannels"] if reset else []) + pats)


def flags(user: User) -> list[str]:
    out = ["on" if user.enabled else "off"]
    if user.nopass:
        out.append("nopass")
    if user.sanitize:
        out.append(user.sanitize)
    return out


def describe(user: User) -> str:
    """One ACL LIST line (Redis's ``ACLDescribeUser`` after ``user <name>``)."""
    parts = [*flags(user), *("#" + p for p in user.passwords)]
    keys = describe_keys(user)
    if keys:
        parts.append(keys)
    parts += [describe_channels(user, reset=True), describe_commands(user)]
    return "user " + user.name.decode(errors="surrogateescape") + " " + " ".join(parts)
