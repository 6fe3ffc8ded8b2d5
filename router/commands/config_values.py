"""The values of CONFIG parameters that have a syntax of their own, parsed and
printed as Redis 7.0 does (``src/config.c``, ``src/notify.c``, ``memtoull``)."""

from __future__ import annotations

from router.parser import string2ll
from router.settings import OutputLimits

_CLASSES = {"normal": "normal", "slave": "slave", "replica": "slave", "pubsub": "pubsub"}
_UNITS = {b"": 1, b"b": 1, b"k": 1000, b"kb": 1024, b"m": 1000**2, b"mb": 1024**2,
          b"g": 1000**3, b"gb": 1024**3}  # fmt: skip


def memtoull(text: bytes) -> int | None:
    """Redis ``memtoull``: digits then an optional unit (k = 1000, kb = 1024, any case)."""
    digits = text.rstrip(b"bBkKmMgG")
    unit = _UNITS.get(text[len(digits) :].lower())
    if unit is None or not digits.isdigit():
        return None
    return int(digits) * unit


def output_limits_text(limits: OutputLimits) -> str:
    return " ".join(f"{c} {h} {s} {sec}" for c, (h, s, sec) in limits)


def parse_output_limits(value: bytes, current: OutputLimits) -> OutputLimits | str:
    """The limits after ``value`` ("<class> <hard> <soft> <seconds> ..."), or
    Redis's error text."""
    words = value.split()
    if len(words) % 4:
        return "Wrong number of arguments in buffer limit configuration."
    limits = dict(current)  # Redis's order kept: every class is in ``current``
    for i in range(0, len(words), 4):
        kind = _CLASSES.get(words[i].decode(errors="replace").lower())
        if kind is None:
            return "Invalid client class specified in buffer limit configuration."
        hard, soft = memtoull(words[i + 1]), memtoull(words[i + 2])
        seconds = string2ll(words[i + 3])
        if hard is None or soft is None or seconds is None or seconds < 0:
            return "Error in hard, soft or soft_seconds setting in buffer limit configuration."
        limits[kind] = (hard, soft, seconds)
    return tuple(limits.items())


# notify-keyspace-events: Redis's NOTIFY_* bits by flag character
_EVENT_CLASSES = "g$lshzxetd"  # A = all of these; then n (new), K, E, m
_BITS = {c: 1 << i for i, c in enumerate(_EVENT_CLASSES + "nKEm")}
_ALL = sum(_BITS[c] for c in _EVENT_CLASSES)
KEYSPACE_EVENTS_ERROR = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'."


def keyspace_events_flags(value: bytes) -> int | None:
    """Redis ``keyspaceEventsStringToFlags``; None for an unknown character."""
    flags = 0
    for c in value.decode(errors="replace"):
        if c == "A":
            flags |= _ALL
        elif c in _BITS:
            flags |= _BITS[c]
        else:
            return None
    return flags


def keyspace_events_text(flags: int) -> str:
    """Redis ``keyspaceEventsFlagsToString``: A for all classes, else each class
    (n last), then K, E, m."""
    if flags & _ALL == _ALL:
        text = "A"
    else:
        text = "".join(c for c in _EVENT_CLASSES + "n" if flags & _BITS[c])
    return text + "".join(c for c in "KEm" if flags & _BITS[c])
