"""Glob matching with the semantics of Redis ``stringmatchlen`` (``src/util.c``,
7.0.15 as Debian ships it), at a cost no pattern can blow up.

``*`` any run of bytes, ``?`` one byte, ``[abc]`` a class, ``[^abc]`` its
negation, ``[a-z]`` a range (reversed ranges are swapped, bytes compared as
signed chars as C does on x86; a range's end may be ``]``: ``[a-]`` is the
range a..``]``), ``\\x`` the literal x (inside a class too), an unclosed ``[``
class runs to the end of the pattern. Quirk kept from Redis: an empty string
matches only the empty pattern (``*`` does not match ``""``).

Redis's abuse guards (CVE-2022-36021, CVE-2024-31228): it recurses at each
``*`` group; once the rest of the pattern failed at every later offset it
stops trying longer matches for earlier stars (``skipLongerMatches``), and a
call nested more than 1000 stars deep answers "no match". Both are properties
of the result, and this module computes the same result differently:

- With ``skipLongerMatches`` the search is the classic greedy one: the
  segment before the first ``*`` must match at offset 0, every segment
  between two ``*`` groups is placed at its leftmost occurrence (never moved
  again), and the last segment, unless the pattern ends with ``*``, must end
  the string. That is one Python regex with an atomic group per middle
  segment (``(?>.*?seg)``), matched in C with no backtracking into a placed
  segment: O(len(pattern) * len(string)) at worst, as for Redis.
- A match has to pass every ``*`` group that is not the pattern's last byte,
  with bytes left, so past 1000 such groups Redis can never answer "match"
  (checked against redis-server 7.0.15: ``*a`` * 1000 matches ``a`` * 1100,
  ``*a`` * 1001 does not): such a pattern matches nothing.
- Every ``?``, class and literal byte consumes exactly one byte, so a pattern
  with more of them than a string's length cannot match it. The pattern is
  read lazily, only as far as the longest string asked about, so a huge
  pattern costs no more than the strings it is matched against.

Tokens and class bodies are split by C regexes, so reading a pattern costs
one pass in C plus a Python step per token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

MAX_STAR_NESTING = 1000
#: a subscribed pattern is read and compiled for strings up to this long
#: (:meth:`Glob.prepare`); a longer string reads it further lazily
PREPARE_WIDTH = 4096

# one token of a pattern, in Redis's order of tests: a '*' group, '?', a class
# (group 3: '^', group 4: its body, up to an unescaped ']' or the pattern's
# end), '\x' (x literal), a run of plain bytes, a lone '\' at the end
# (a class item is '\x', a range 'a-z' whose end may be any byte, or one byte;
# a run of plain bytes not followed by '-x' is taken whole, for speed: only
# its last byte could start a range)
_TOKEN = re.compile(
    rb"(\*+)|(\?)"
    rb"|\[(\^?)((?:[^\]\\\-]*[^\]\\\-](?!-.)|\\.|[^\]]-.|[^\]])*+)\]?"
    rb"|\\(.)|([^*?\[\\]+)|(\\)",
    re.S,
)
# the items of a class body: '\x', a range, a run of single bytes
_CLASS_ITEM = re.compile(rb"\\(.)|([^\]])-(.)|([^\]\\\-]*[^\]\\\-](?!-.)|[^\]])", re.S)


def _signed(c: int) -> int:
    return c - 256 if c > 127 else c


def _class_bytes(negate: bytes, body: bytes) -> bytes:
    """The bytes a class matches (sorted), from its body."""
    members = bytearray(256)
    if b"\\" not in body and b"-" not in body:
        singles: Iterable[int] = set(body)
        ranges: set[tuple[bytes, bytes]] = set()
    else:
        items = set(_CLASS_ITEM.findall(body))
        singles = set(b"".join(x[0] or x[3] for x in items))
        ranges = {(x[1], x[2]) for x in items if x[1]}
    for c in singles:
        members[c] = 1
    for lo_b, hi_b in ranges:
        lo, hi = sorted((_signed(lo_b[0]), _signed(hi_b[0])))
        for c in range(lo, hi + 1):
            members[c & 0xFF] = 1
    if negate:
        return bytes(c for c in range(256) if not members[c])
    return bytes(c for c in range(256) if members[c])


def _charset(members: bytes) -> bytes:
    """Regex source for one byte out of ``members`` (non-empty)."""
    if len(members) == 256:
        return b"."
    if len(members) == 1:
        return re.escape(members)
    parts = []
    i = 0
    while i < len(members):
        j = i
        while j + 1 < len(members) and members[j + 1] == members[j] + 1:
            j += 1
        parts.append(b"\\x%02x" % members[i])
        if j > i:
            parts.append(b"-\\x%02x" % members[j])
        i = j + 1
    return b"[" + b"".join(parts) + b"]"


class Glob:
    """A compiled pattern: :meth:`match` one string, :meth:`filter` many.

    Two stages, both lazy: reading the pattern (its regex source, the number
    of bytes a match consumes, the literal bytes every match starts and ends
    with) and compiling the regex, which only a string that passes those
    cheap checks pays for."""

    __slots__ = ("_head", "_regex", "_segments", "_short", "_source", "_tail", "_width", "pattern")

    def __init__(self, pattern: bytes) -> None:
        self.pattern = pattern
        self._source: bytes | None = None
        self._regex: re.Pattern[bytes] | None = None
        #: strings up to this length are known not to match (before the regex)
        self._short = 0
        self._width = 0  # bytes every match consumes ('?', classes, literals)
        self._head = b""  # literal bytes every match starts with
        self._tail = b""  # ... and ends with
        # a pattern without '?' or '[' is matched by its literal segments, no
        # regex to compile (match_segments)
        self._segments: tuple[bytes, ...] | None = None
        if b"?" not in pattern and b"[" not in pattern:
            self._segments = plain_segments(pattern)

    def match(self, string: bytes) -> bool:
        if self._segments is not None:
            return match_segments(self._segments, string)
        if not string:
            return not self.pattern
        if self._source is None and not self._read(len(string)):
            return False
        if (
            len(string) < self._width
            or not string.startswith(self._head)
            or not string.endswith(self._tail)
        ):
            return False
        return self._compiled().match(string) is not None

    def filter(self, names: Iterable[bytes]) -> list[bytes]:
        """The names that match, in order (the regex runs in one C loop)."""
        if self._segments is not None:
            segments = self._segments
            return [n for n in names if match_segments(segments, n)]
        names = list(names)
        if not self.pattern:
            return [n for n in names if not n]
        if not names or (self._source is None and not self._read(max(map(len, names)))):
            return []
        width, head, tail = self._width, self._head, self._tail
        # (a non-empty name only: a '*' would match b"", Redis's quirk says no)
        candidates = [
            n for n in names if n and len(n) >= width and n.startswith(head) and n.endswith(tail)
        ]
        if not candidates:
            return []
        return list(filter(self._compiled().match, candidates))

    def prepare(self) -> None:
        """Read and compile now what strings up to PREPARE_WIDTH bytes use
        (at PSUBSCRIBE, under the node's work budget), so that no PUBLISH
        compiles: one pattern's cost, paid by its subscriber."""
        if self._source is None and self._read(PREPARE_WIDTH):
            self._compiled()

    def _compiled(self) -> re.Pattern[bytes]:
        regex = self._regex
        if regex is None:
            assert self._source is not None
            regex = self._regex = re.compile(self._source, re.S)
        return regex

    def _read(self, need: int) -> bool:
        """Read the pattern as far as strings of ``need`` bytes could use it.
        False (and recorded) when no string that long can match."""
        if need <= self._short:
            return False
        limit = max(need, 2 * self._short)  # amortise re-reading for longer strings
        # per segment between '*' groups: (regex piece, literal bytes or None)
        segments: list[list[tuple[bytes, bytes | None]]] = [[]]
        width = 0
        trailing_star = False
        for m in _TOKEN.finditer(self.pattern):
            star, qmark, negate, body, escaped, run, lone = m.groups()
            trailing_star = star is not None and m.end() == len(self.pattern)
            if star is not None:
                if trailing_star:
                    break
                if len(segments) > MAX_STAR_NESTING:
                    self._short = _UNBOUNDED  # Redis's nesting limit: never a match
                    return False
                segments.append([])
                continue
            literal: bytes | None = None
            if qmark is not None:
                piece, size = b".", 1
            elif body is not None:
                members = _class_bytes(negate, body)
                if not members:
                    self._short = _UNBOUNDED  # an empty class: never a match
                    return False
                piece, size = _charset(members), 1
            else:
                literal = escaped if escaped is not None else run if run is not None else lone
                piece, size = re.escape(literal), len(literal)
            width += size
            if width > limit:
                self._short = limit
                return False
            segments[-1].append((piece, literal))
        self._width = width
        self._head = _literal_run(segments[0])
        if not trailing_star:
            self._tail = _literal_run(segments[-1][::-1], reverse=True)
        parts = [b"".join(piece for piece, _ in seg) for seg in segments]
        if len(parts) == 1:
            source = parts[0] + (b"" if trailing_star else b"\\Z")
        else:
            middle = b"".join(b"(?>.*?" + p + b")" for p in parts[1:-1])
            last = b"(?>.*?" + parts[-1] + b")" if trailing_star else b".*" + parts[-1] + b"\\Z"
            source = parts[0] + middle + last
        self._source = source
        return True


def _literal_run(pieces: list[tuple[bytes, bytes | None]], reverse: bool = False) -> bytes:
    """The literal bytes of the leading pieces (trailing ones, reversed)."""
    run = []
    for _, literal in pieces:
        if literal is None:
            break
        run.append(literal)
    return b"".join(run[::-1] if reverse else run)


_UNBOUNDED = 1 << 62
_CACHE: dict[bytes, Glob] = {}
_CACHE_MAX = 4096


def compile_glob(pattern: bytes) -> Glob:
    """The :class:`Glob` of ``pattern`` (kept in a bounded cache)."""
    glob = _CACHE.get(pattern)
    if glob is None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        glob = _CACHE[pattern] = Glob(pattern)
    return glob


def stringmatch(pattern: bytes, string: bytes) -> bool:
    """True when ``string`` matches glob ``pattern`` exactly as Redis decides."""
    return compile_glob(pattern).match(string)


def literal_prefix(pattern: bytes) -> bytes:
    """The bytes every match of ``pattern`` starts with: up to the first unescaped
    ``*``, ``?`` or ``[``, with ``\\x`` escapes resolved (b"" for a leading glob).
    The same rule as the pattern filter's prefix (:func:`bloom.literal_prefix`),
    without its length cap, read by one C regex (a 100,000-byte pattern of
    escapes costs microseconds, not a Python step per byte)."""
    return unescape(_LITERAL_RUN.match(pattern).group())  # type: ignore[union-attr]


def unescape(run: bytes) -> bytes:
    """A run of literal bytes and ``\\x`` pairs (and maybe a lone trailing
    backslash, literal) as the bytes it stands for, in C: ``\\\\`` pairs
    become a byte absent from the run, every other backslash goes, then that
    byte becomes a backslash (``re.sub``'s template costs a Python call per
    escape: a second for 500,000 of them)."""
    if b"\\" not in run:
        return run
    lone = (len(run) - len(run.rstrip(b"\\"))) % 2 == 1
    body = run[:-1] if lone else run
    absent = next((bytes((c,)) for c in range(256) if bytes((c,)) not in body), None)
    if absent is None:  # every byte value present: the slower way
        out = b"\\".join(part.replace(b"\\", b"") for part in body.split(b"\\\\"))
    else:
        out = body.replace(b"\\\\", absent).replace(b"\\", b"").replace(absent, b"\\")
    return out + b"\\" if lone else out


# plain bytes, '\x' pairs, a lone '\' at the end (a literal backslash)
_LITERAL_RUN = re.compile(rb"(?:[^*?\[\\]|\\.|\\\Z)*+", re.S)
# a plain pattern's tokens: a '*' group, a '?' or '[' (then it is not plain),
# a run of literal bytes and escapes
_PLAIN_TOKEN = re.compile(rb"(\*+)|([?\[])|((?:[^*?\[\\]|\\.|\\\Z)+)", re.S)

#: a pattern no string matches (more than MAX_STAR_NESTING inner '*' groups)
NEVER: tuple[bytes, ...] = ()


def plain_segments(pattern: bytes) -> tuple[bytes, ...] | None:
    """The literal segments between the ``*`` groups of a pattern without
    ``?`` or classes (escapes resolved; ``b""`` first / last when it starts /
    ends with ``*``), ``NEVER`` past Redis's nesting limit (more than
    MAX_STAR_NESTING groups before the last byte), None for a pattern with
    ``?`` or ``[`` (matched by :class:`Glob`)."""
    tokens = _PLAIN_TOKEN.findall(pattern)
    segments: list[bytes] = [b""]
    for star, other, run in tokens:
        if other:
            return None
        if star:
            segments.append(b"")
        else:
            segments[-1] = unescape(run)
    inner = len(segments) - 1 - (1 if tokens and tokens[-1][0] else 0)
    return NEVER if inner > MAX_STAR_NESTING else tuple(segments)


def match_segments(segments: Sequence[bytes], string: bytes) -> bool:
    """Redis's answer for a plain pattern split into ``segments``: the first
    must start ``string``, the last end it, the others are placed leftmost in
    order between them (``skipLongerMatches``: never moved again). A
    ``find`` in C per segment: O(len(pattern) + len(string)) at worst."""
    if len(segments) == 1:
        return string == segments[0]
    if not segments or not string:
        return False
    head = segments[0]
    tail = segments[-1]
    pos = len(head)
    end = len(string) - len(tail)
    if end < pos or not string.startswith(head) or not string.endswith(tail):
        return False
    find = string.find
    for seg in segments[1:-1]:
        if seg:
            i = find(seg, pos, end)
            if i < 0:
                return False
            pos = i + len(seg)
    return True
