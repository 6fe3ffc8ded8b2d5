"""RESP replies, sans-IO: every frame the node writes, encoded to bytes.

Requests are parsed in :mod:`router.parser`. Everything a client reads is
built here: replies (Redis's ``addReply*`` family in ``src/networking.c``),
RESP3 push and map headers, and the pub/sub frames — ``message``,
``pmessage``, ``smessage`` and the (un)subscribe confirmations — in Redis's
layout (``src/pubsub.c``: ``addReplyPubsubMessage``,
``addReplyPubsubPatMessage``, ``addReplyPubsubSubscribed``). Pub/sub frames
are built once per PUBLISH as RESP2 bytes; :func:`as_push` turns them into
RESP3 push frames (same count, ``>`` for ``*``) for RESP3 receivers.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: what a command answers: the encoded reply, or a future of it when the
#: reply waits (subscribe visibility, CLIENT PAUSE, a bulk job)
Reply = bytes | asyncio.Future[bytes]

OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
NULL2 = b"$-1\r\n"
NULL3 = b"_\r\n"


def simple(text: str) -> bytes:
    return b"+" + text.encode() + b"\r\n"


def c_string(raw: bytes) -> str:
    """``raw`` as Redis's ``%s`` prints it in an error: up to the first NUL,
    bytes kept (surrogate-escaped; :func:`error` writes them back raw)."""
    return raw.split(b"\0", 1)[0].decode(errors="surrogateescape")


def error(text: str) -> bytes:
    """An error reply; like Redis's addReplyError, newlines become spaces.
    Bytes decoded with ``surrogateescape`` go out as they came in."""
    return (
        b"-" + text.replace("\r", " ").replace("\n", " ").encode(errors="surrogateescape") + b"\r\n"
    )


#: ``:0`` .. ``:1023``, encoded once (PUBLISH replies are small counts; Redis
#: likewise keeps shared integer objects)
SMALL_INTEGERS = tuple(b":%d\r\n" % n for n in range(1024))


def integer(n: int) -> bytes:
    return SMALL_INTEGERS[n] if 0 <= n < 1024 else b":%d\r\n" % n


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(data), data)


def null(resp: int) -> bytes:
    return NULL3 if resp == 3 else NULL2


def array_header(n: int) -> bytes:
    return b"*%d\r\n" % n


def push_header(n: int, resp: int) -> bytes:
    """Out-of-band pub/sub frames: ``>`` in RESP3, a plain array in RESP2."""
    return b">%d\r\n" % n if resp == 3 else b"*%d\r\n" % n


def map_header(n: int, resp: int) -> bytes:
    """n key/value pairs: ``%n`` in RESP3, a flat array of 2n in RESP2."""
    return b"%%%d\r\n" % n if resp == 3 else b"*%d\r\n" % (2 * n)


def verbatim(text: bytes, resp: int) -> bytes:
    """Text for humans (INFO, CLIENT LIST): RESP3 verbatim ``=`` (txt), else bulk."""
    if resp == 3:
        return b"=%d\r\ntxt:%b\r\n" % (len(text) + 4, text)
    return bulk(text)


def bulk_array(items: list[bytes]) -> bytes:
    return array_header(len(items)) + b"".join(bulk(x) for x in items)


class Status(str):
    """A simple string (``+text``) for :func:`encode_value`."""

    __slots__ = ()


class Set(tuple[Any, ...]):
    """A set for :func:`encode_value`: ``~n`` in RESP3, an array in RESP2."""

    __slots__ = ()


def encode_value(value: object, resp: int) -> bytes:
    """Encode nested Python values: bytes/str -> bulk, Status -> simple string,
    int -> integer, float -> double, None -> null, list -> array, Set -> set, dict -> map. For
    replies built rarely (HELLO, COMMAND)."""
    if isinstance(value, bytes):
        return bulk(value)
    if isinstance(value, Status):
        return simple(value)
    if isinstance(value, Set):
        head = b"~%d\r\n" % len(value) if resp == 3 else array_header(len(value))
        return head + b"".join(encode_value(v, resp) for v in value)
    if isinstance(value, str):
        return bulk(value.encode())
    if isinstance(value, bool):
        return integer(int(value))
    if isinstance(value, int):
        return integer(value)
    if isinstance(value, float):  # Redis addReplyDouble: "%.17g"
        text = b"%.17g" % value
        return b",%s\r\n" % text if resp == 3 else bulk(text)
    if value is None:
        return null(resp)
    if isinstance(value, list | tuple):
        return array_header(len(value)) + b"".join(encode_value(v, resp) for v in value)
    if isinstance(value, dict):
        return map_header(len(value), resp) + b"".join(
            encode_value(k, resp) + encode_value(v, resp) for k, v in value.items()
        )
    raise TypeError(f"cannot encode {type(value).__name__}")


def unknown_command_text(args: list[bytes]) -> str:
    """Redis's unknown-command error: name and the first arguments, each cut so
    the argument list stays within 128 bytes (``processCommand``)."""
    shown = ""
    for arg in args[1:]:
        if len(shown) >= 128:
            break
        shown += f"'{c_string(arg[: 128 - len(shown)])}' "
    return f"ERR unknown command '{c_string(args[0][:128])}', with args beginning with: {shown}"


# ---------------------------------------------------------------- pub/sub frames

_MESSAGE_HEAD = b"*3\r\n$7\r\nmessage\r\n"
#: bulk headers of short strings, encoded once (channels and payloads are mostly short)
_BULK = tuple(b"$%d\r\n" % n for n in range(1024))
_CRLF = b"\r\n"
_MESSAGE = b"*3\r\n$7\r\nmessage\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"
_SMESSAGE = b"*3\r\n$8\r\nsmessage\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"
_PMESSAGE = b"*4\r\n$8\r\npmessage\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n"


def message(channel: bytes, payload: bytes) -> bytes:
    """``[message, channel, payload]`` (RESP2)."""
    size_c, size_m = len(channel), len(payload)
    if size_c < 1024 and size_m < 1024:  # the common case, without %-formatting
        return b"".join(
            (_MESSAGE_HEAD, _BULK[size_c], channel, _CRLF, _BULK[size_m], payload, _CRLF)
        )
    return _MESSAGE % (size_c, channel, size_m, payload)


def smessage(channel: bytes, payload: bytes) -> bytes:
    """``[smessage, shard channel, payload]`` (RESP2)."""
    return _SMESSAGE % (len(channel), channel, len(payload), payload)


def pmessage(pattern: bytes, channel: bytes, payload: bytes) -> bytes:
    """``[pmessage, pattern, channel, payload]`` (RESP2)."""
    return _PMESSAGE % (len(pattern), pattern, len(channel), channel, len(payload), payload)


def as_push(frame2: bytes) -> bytes:
    """A RESP2 pub/sub frame as a RESP3 push frame (same count, ``>`` for ``*``)."""
    return b">" + frame2[1:]


_KINDS = {
    kind: b"$%d\r\n%b\r\n" % (len(kind), kind)
    for kind in (
        b"subscribe",
        b"unsubscribe",
        b"psubscribe",
        b"punsubscribe",
        b"ssubscribe",
        b"sunsubscribe",
    )
}


#: a confirmation's head by protocol and kind: the push (RESP3) or array
#: header and the kind's bulk, encoded once
_HEADS2 = {kind: push_header(3, 2) + data for kind, data in _KINDS.items()}
_HEADS3 = {kind: push_header(3, 3) + data for kind, data in _KINDS.items()}
#: ``$n\r\n`` for a name of up to 255 bytes
_BULK_LENGTHS = tuple(b"$%d\r\n" % n for n in range(256))
#: a name's end and the count, ``\r\n:n\r\n``, for counts up to 1023
_TAILS = tuple(b"\r\n:%d\r\n" % n for n in range(1024))


def confirmation(kind: bytes, name: bytes | None, count: int, resp: int) -> bytes:
    """``[kind, name, count]``: the reply to each argument of (P|S)(UN)SUBSCRIBE;
    ``name`` None for a bare unsubscribe with nothing subscribed; a push in RESP3.
    The usual one is three concatenations of parts encoded once (issue 48:
    four calls and two formats were a tenth of a SUBSCRIBE's local cost)."""
    head = (_HEADS3 if resp == 3 else _HEADS2)[kind]
    if name is not None and len(name) < 256 and count < 1024:
        return head + _BULK_LENGTHS[len(name)] + name + _TAILS[count]
    target = bulk(name) if name is not None else null(resp)
    return head + target + integer(count)
