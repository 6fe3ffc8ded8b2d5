"""Inline requests: Redis's ``sdssplitargs`` (``src/sds.c``), the splitting of
a request line that does not start with ``*`` (used by
:class:`router.parser.RequestParser`)."""

from __future__ import annotations

_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
# sdssplitargs skips isspace() between arguments and after a closing quote,
# but ends an unquoted argument only at these (so "ECHO\va" is one argument)
_SPACE = frozenset(b" \n\r\t\v\f")
_END = frozenset(b" \n\r\t")
_HEX = frozenset(b"0123456789abcdefABCDEF")


def split_args(line: bytes) -> list[bytes] | None:
    """Redis ``sdssplitargs``: split an inline command line; None on unbalanced quotes.

    Double quotes take ``\\xHH``, ``\\n``, ``\\r``, ``\\t``, ``\\b``, ``\\a`` and
    ``\\<c>`` escapes; single quotes only ``\\'``. A closing quote must be
    followed by a space or the end of the line. Blanks (``isspace``) are
    skipped between arguments, but only space, tab, CR and LF end an unquoted
    one: ``\\v`` and ``\\f`` inside or right after it belong to it.
    """
    # (ints, not one-byte strings: ``bytes in bytes`` raises and clears a
    # TypeError inside CPython before its substring search, ~2,000
    # instructions each; an int is one memchr)
    if 0x22 not in line and 0x27 not in line and 0x0B not in line and 0x0C not in line:
        return line.split()
    out: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return out
        cur = bytearray()
        inq = insq = False
        while True:
            if inq:
                if i >= n:
                    return None
                c = line[i]
                if (
                    c == 0x5C
                    and i + 3 < n
                    and line[i + 1] == ord("x")
                    and line[i + 2] in _HEX
                    and line[i + 3] in _HEX
                ):
                    cur.append(int(line[i + 2 : i + 4], 16))
                    i += 3
                elif c == 0x5C and i + 1 < n:
                    i += 1
                    cur.append(_ESCAPES.get(line[i], line[i]))
                elif c == 0x22:
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            elif insq:
                if i >= n:
                    return None
                c = line[i]
                if c == 0x5C and i + 1 < n and line[i + 1] == 0x27:
                    i += 1
                    cur.append(0x27)
                elif c == 0x27:
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            else:
                if i >= n:
                    break
                c = line[i]
                if c in _END:
                    break
                if c == 0x22:
                    inq = True
                elif c == 0x27:
                    insq = True
                else:
                    cur.append(c)
            i += 1
        out.append(bytes(cur))
