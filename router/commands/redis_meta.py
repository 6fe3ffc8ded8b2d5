"""Redis 7.0.15's COMMAND INFO and COMMAND DOCS entries for the pub/sub
commands, as data: what ``redis-server`` 7.0.15 replies (from its
``src/commands/*.json``), each value with its RESP type (``S``: a simple
string, ``Set``: ``~`` in RESP3, an array in RESP2).

Cluster clients route by these: SSUBSCRIBE and SUNSUBSCRIBE have their shard
channels as keys (first 1, last -1, step 1), SPUBLISH its shard channel
(first 1, last 1, step 1), each with one ``not_key`` key spec; the other
pub/sub commands have no keys. ``tests/differential/test_command_docs.py``
compares every entry with the binary, RESP2 and RESP3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from router.resp import Set
from router.resp import Status as S

_NONE = Set()


@dataclass(frozen=True)
class Meta:
    """One command's COMMAND INFO fields (but name, arity and subcommands,
    which the Command has) and its COMMAND DOCS map (but subcommands)."""

    flags: Set
    keys: tuple[int, int, int]  # first key, last key, step
    acl: Set
    docs: dict[str, Any]
    key_specs: Set = _NONE
    tips: Set = _NONE


def _set(*names: str) -> Set:
    return Set(S(n) for n in names)


def _arg(name: str, type_: str, *flags: str, **more: Any) -> dict[str, Any]:
    arg: dict[str, Any] = {"name": name, "type": type_}
    if flags:
        arg["flags"] = _set(*flags)
    return arg | more


def _docs(summary: str, since: str, complexity: str, *arguments: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "summary": summary,
        "since": since,
        "group": "pubsub",
        "complexity": complexity,
    }
    if arguments:
        doc["arguments"] = list(arguments)
    return doc


def _shard_keys(lastkey: int) -> Set:
    """One key spec: the keys from argument 1, up to ``lastkey`` (-1: the last)."""
    return Set(
        (
            {
                "flags": _set("not_key"),
                "begin_search": {"type": "index", "spec": {"index": 1}},
                "find_keys": {
                    "type": "range",
                    "spec": {"lastkey": lastkey, "keystep": 1, "limit": 0},
                },
            },
        )
    )


_SUBSCRIBING = _set("pubsub", "noscript", "loading", "stale")
_PUBLISHING = _set("pubsub", "loading", "stale", "fast")
_INTROSPECTING = _set("pubsub", "loading", "stale")
_SLOW = _set("@pubsub", "@slow")
_FAST = _set("@pubsub", "@fast")
_NO_KEYS = (0, 0, 0)
_ALL_KEYS = (1, -1, 1)
_PATTERNS = "O(N) where N is the number of patterns the client is already subscribed to."

REDIS_META: dict[str, Meta] = {
    "subscribe": Meta(
        _SUBSCRIBING, _NO_KEYS, _SLOW,
        _docs(
            "Listen for messages published to the given channels", "2.0.0",
            "O(N) where N is the number of channels to subscribe to.",
            _arg("channel", "string", "multiple"),
        ),
    ),
    "unsubscribe": Meta(
        _SUBSCRIBING, _NO_KEYS, _SLOW,
        _docs(
            "Stop listening for messages posted to the given channels", "2.0.0",
            "O(N) where N is the number of clients already subscribed to a channel.",
            _arg("channel", "string", "optional", "multiple"),
        ),
    ),
    "psubscribe": Meta(
        _SUBSCRIBING, _NO_KEYS, _SLOW,
        _docs(
            "Listen for messages published to channels matching the given patterns", "2.0.0",
            _PATTERNS,
            _arg("pattern", "block", "multiple", arguments=[_arg("pattern", "pattern")]),
        ),
    ),
    "punsubscribe": Meta(
        _SUBSCRIBING, _NO_KEYS, _SLOW,
        _docs(
            "Stop listening for messages posted to channels matching the given patterns",
            "2.0.0",
            "O(N+M) where N is the number of patterns the client is already subscribed and "
            "M is the number of total patterns subscribed in the system (by any client).",
            _arg("pattern", "pattern", "optional", "multiple"),
        ),
    ),
    "ssubscribe": Meta(
        _SUBSCRIBING, _ALL_KEYS, _SLOW,
        _docs(
            "Listen for messages published to the given shard channels", "7.0.0",
            "O(N) where N is the number of shard channels to subscribe to.",
            _arg("shardchannel", "string", "multiple"),
        ),
        key_specs=_shard_keys(-1),
    ),
    "sunsubscribe": Meta(
        _SUBSCRIBING, _ALL_KEYS, _SLOW,
        _docs(
            "Stop listening for messages posted to the given shard channels", "7.0.0",
            "O(N) where N is the number of clients already subscribed to a shard channel.",
            _arg("shardchannel", "string", "optional", "multiple"),
        ),
        key_specs=_shard_keys(-1),
    ),
    "publish": Meta(
        _PUBLISHING, _NO_KEYS, _FAST,
        _docs(
            "Post a message to a channel", "2.0.0",
            "O(N+M) where N is the number of clients subscribed to the receiving channel and "
            "M is the total number of subscribed patterns (by any client).",
            _arg("channel", "string"), _arg("message", "string"),
        ),
    ),
    "spublish": Meta(
        _PUBLISHING, (1, 1, 1), _FAST,
        _docs(
            "Post a message to a shard channel", "7.0.0",
            "O(N) where N is the number of clients subscribed to the receiving shard channel.",
            _arg("shardchannel", "string"), _arg("message", "string"),
        ),
        key_specs=_shard_keys(0),
    ),
    "pubsub": Meta(
        _set(), _NO_KEYS, _set("@slow"),
        _docs("A container for Pub/Sub commands", "2.8.0", "Depends on subcommand."),
    ),
    "pubsub|channels": Meta(
        _INTROSPECTING, _NO_KEYS, _SLOW,
        _docs(
            "List active channels", "2.8.0",
            "O(N) where N is the number of active channels, and assuming constant time "
            "pattern matching (relatively short channels and patterns)",
            _arg("pattern", "pattern", "optional"),
        ),
    ),
    "pubsub|numsub": Meta(
        _INTROSPECTING, _NO_KEYS, _SLOW,
        _docs(
            "Get the count of subscribers for channels", "2.8.0",
            "O(N) for the NUMSUB subcommand, where N is the number of requested channels",
            _arg("channel", "string", "optional", "multiple"),
        ),
    ),
    "pubsub|numpat": Meta(
        _INTROSPECTING, _NO_KEYS, _SLOW,
        _docs("Get the count of unique patterns pattern subscriptions", "2.8.0", "O(1)"),
    ),
    "pubsub|shardchannels": Meta(
        _INTROSPECTING, _NO_KEYS, _SLOW,
        _docs(
            "List active shard channels", "7.0.0",
            "O(N) where N is the number of active shard channels, and assuming constant time "
            "pattern matching (relatively short shard channels).",
            _arg("pattern", "pattern", "optional"),
        ),
    ),
    "pubsub|shardnumsub": Meta(
        _INTROSPECTING, _NO_KEYS, _SLOW,
        _docs(
            "Get the count of subscribers for shard channels", "7.0.0",
            "O(N) for the SHARDNUMSUB subcommand, where N is the number of requested "
            "shard channels",
            _arg("shardchannel", "string", "optional", "multiple"),
        ),
    ),
    "pubsub|help": Meta(
        _set("loading", "stale"), _NO_KEYS, _set("@slow"),
        _docs("Show helpful text about the different subcommands", "6.2.0", "O(1)"),
    ),
}  # fmt: skip
