"""Glob matching with the semantics of Redis ``stringmatchlen`` (``src/util.c``).

``*`` any run of bytes, ``?`` one byte, ``[abc]`` a class, ``[^abc]`` its
negation, ``[a-z]`` a range (reversed ranges are swapped, bytes compared as
signed chars as C does on x86), ``\\x`` the literal x (inside a class too),
an unclosed ``[`` class runs to the end of the pattern. Quirk kept from Redis:
an empty string matches only the empty pattern (``*`` does not match ``""``).

Abuse guards (CVE-2022-36021, CVE-2024-31228): Redis recurses at each ``*``;
once the rest of the pattern failed at every later offset it stops trying
longer matches for earlier stars (``skipLongerMatches``), and it gives up (no
match) past 1000 nested stars. This version is iterative: it backtracks only
to the most recent ``*`` (which is exactly what skipLongerMatches achieves),
so the work is O(len(pattern) * len(string)) in the worst case and there is no
recursion to overflow; the 1000-star limit is kept for identical results.
"""

from __future__ import annotations

from bloom import literal_prefix as bloom_literal_prefix

MAX_STAR_NESTING = 1000

_STAR, _QMARK, _LBRACKET, _RBRACKET, _BACKSLASH, _CARET, _DASH = b"*?[]\\^-"


def _signed(c: int) -> int:
    return c - 256 if c > 127 else c


def _class_match(pattern: bytes, p: int, plen: int, c: int) -> tuple[bool, int]:
    """Match byte c against the class opening at pattern[p] == '['.

    Returns (matched, index of the class's last byte: the ']' or the pattern end).
    """
    p += 1
    negate = p < plen and pattern[p] == _CARET
    if negate:
        p += 1
    matched = False
    while True:
        if p < plen and pattern[p] == _BACKSLASH and plen - p >= 2:
            p += 1
            if pattern[p] == c:
                matched = True
        elif p < plen and pattern[p] == _RBRACKET:
            break
        elif p >= plen:
            p -= 1  # unclosed class: it ends with the pattern
            break
        elif plen - p >= 3 and pattern[p + 1] == _DASH:
            start, end = _signed(pattern[p]), _signed(pattern[p + 2])
            if start > end:
                start, end = end, start
            p += 2
            if start <= _signed(c) <= end:
                matched = True
        elif pattern[p] == c:
            matched = True
        p += 1
    return matched != negate, p


def stringmatch(pattern: bytes, string: bytes) -> bool:
    """True when ``string`` matches glob ``pattern`` exactly as Redis decides."""
    plen, slen = len(pattern), len(string)
    p = s = 0
    star_p = -1  # index of the most recent '*' (the only one we backtrack to)
    star_s = 0  # offset of string the rest of the pattern is tried at
    depth = 0  # '*' groups passed: Redis's recursion nesting
    while True:
        if p < plen and s < slen:
            c = pattern[p]
            if c == _STAR:
                while p + 1 < plen and pattern[p + 1] == _STAR:
                    p += 1
                if p == plen - 1:
                    return True  # a trailing '*' matches the rest
                depth += 1
                if depth > MAX_STAR_NESTING:
                    return False
                star_p, star_s = p, s
                p += 1
                continue
            if c == _QMARK:
                ok = True
            elif c == _LBRACKET:
                ok, p = _class_match(pattern, p, plen, string[s])
            else:
                if c == _BACKSLASH and plen - p >= 2:
                    p += 1
                ok = pattern[p] == string[s]
            if ok:
                s += 1
                p += 1
                if s < slen:
                    continue
                while p < plen and pattern[p] == _STAR:
                    p += 1
                if p >= plen:
                    return True
        elif p >= plen and s >= slen:
            return True
        # mismatch: retry the rest of the pattern one byte later after the last '*'
        if star_p < 0:
            return False
        star_s += 1
        if star_s >= slen:
            return False
        p, s = star_p + 1, star_s


def literal_prefix(pattern: bytes) -> bytes:
    """The bytes every match of ``pattern`` starts with: up to the first unescaped
    ``*``, ``?`` or ``[``, with ``\\x`` escapes resolved (b"" for a leading glob).
    The same rule as the pattern filter's prefix (:func:`bloom.literal_prefix`),
    without its length cap."""
    return bloom_literal_prefix(pattern, len(pattern))
