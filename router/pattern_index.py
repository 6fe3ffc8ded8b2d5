"""PatternIndex: the node's pattern subscriptions, indexed by a literal every
match must contain, so a PUBLISH never scans all patterns.

Each pattern is filed under one key, the longest of three literals every
match contains (:func:`router.glob.literal_prefix`, and for a pattern of
literals and ``*``: its last segment and its longest inner segment, cut at
:data:`INFIX_MAX` bytes):

- its literal prefix: a PUBLISH looks up ``channel[:L]`` once per prefix
  length in use (a trie flattened by level, as before);
- its literal suffix: ``channel[-L:]`` once per suffix length in use;
- an inner literal (``*1234*``): every substring of the channel of each
  length in use, or, when that costs more, a scan of those patterns;
- none of them (``*``, ``?*``): scanned.

A PUBLISH then matches only the patterns found there. Redis scans every
pattern on every PUBLISH (``pubsubPublishMessage``), in C; 100,000 patterns
scanned in Python were 50 ms per PUBLISH, looked up they are microseconds.

Matching never compiles at PUBLISH time (issue 28): a pattern of literals,
escapes and ``*`` (nearly all of them) is matched by
:func:`router.glob.match_segments`, a ``find`` in C per segment, with nothing
kept per pattern; a pattern with ``?`` or a class gets its
:class:`router.glob.Glob`, prepared when it is subscribed (under the node's
work budget, :mod:`router.pubsub`).

Memory (the issue's 1.2x Redis): a bucket holding one pattern is that
pattern (bytes), not a container; the subscribers of a pattern with one
subscriber are that subscriber, not a set.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar, cast

from router.glob import Glob, literal_prefix, match_segments, plain_segments

S = TypeVar("S")
#: an inner literal key is cut at this many bytes (any part of it is in every match)
INFIX_MAX = 8
PREFIX, SUFFIX, INFIX, REST = range(4)
Bucket = bytes | dict[bytes, None]  # one pattern, or several


class PatternIndex(Generic[S]):
    """pattern -> subscribers, with literal-indexed matching."""

    __slots__ = (
        "_infix_count",
        "_lens",
        "_rest",
        "_special",
        "_subs",
        "_tables",
        "lengths",
        "table",
    )

    def __init__(self) -> None:
        self._subs: dict[bytes, S | set[S]] = {}
        #: pattern -> its subscriber or set of subscribers (empty: no pattern,
        #: which PUBLISH tests first)
        self.table = self._subs
        # how to match a pattern that is not split(b"*"): its segments (escapes),
        # NEVER (nesting limit) or its Glob ('?', classes)
        self._special: dict[bytes, tuple[bytes, ...] | Glob] = {}
        # PREFIX, SUFFIX, INFIX: {length: {key: bucket}}
        self._tables: tuple[dict[int, dict[bytes, Bucket]], ...] = ({}, {}, {})
        self._lens: list[tuple[int, ...]] = [(), (), ()]  # lengths in use, ascending
        self._rest: dict[bytes, None] = {}
        self._infix_count = 0
        #: prefix lengths in use, ascending (the pattern filter's view)
        self.lengths: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self._subs)

    def __bool__(self) -> bool:
        return bool(self._subs)

    def __contains__(self, pattern: bytes) -> bool:
        return pattern in self._subs

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._subs)

    def subscribers(self, pattern: bytes) -> set[S]:
        subs = self._subs.get(pattern)
        if subs is None:
            return set()
        return set(subs) if type(subs) is set else {cast(S, subs)}

    # ------------------------------------------------------------ changes

    def add(self, pattern: bytes, sub: S) -> bool:
        """Add a subscriber; True when the pattern is new (its first subscriber)."""
        subs = self._subs.get(pattern)
        if subs is not None:
            if type(subs) is set:
                subs.add(sub)
            elif subs is not sub:
                self._subs[pattern] = {cast(S, subs), sub}
            return False
        self._subs[pattern] = sub
        segments = plain_segments(pattern)
        if segments is None:
            glob = Glob(pattern)
            glob.prepare()
            self._special[pattern] = glob
        elif b"\\" in pattern or not segments:
            self._special[pattern] = segments
        where, key = _key(pattern, segments)
        if where == REST:
            self._rest[pattern] = None
            return True
        if where == INFIX:
            self._infix_count += 1
        level = self._tables[where].get(len(key))
        if level is None:
            level = self._tables[where][len(key)] = {}
            self._relength(where)
        bucket = level.get(key)
        if bucket is None:
            level[key] = pattern
        elif type(bucket) is bytes:
            level[key] = {bucket: None, pattern: None}
        else:
            cast("dict[bytes, None]", bucket)[pattern] = None
        return True

    def remove(self, pattern: bytes, sub: S) -> bool:
        """Remove a subscriber; True when the pattern lost its last subscriber."""
        subs = self._subs.get(pattern)
        if subs is None:
            return False
        if type(subs) is set:
            if sub not in subs:
                return False
            subs.discard(sub)
            if len(subs) == 1:
                self._subs[pattern] = next(iter(subs))
            return False
        if subs is not sub:
            return False
        del self._subs[pattern]
        special = self._special.pop(pattern, None)
        segments = None if type(special) is Glob else plain_segments(pattern)
        where, key = _key(pattern, segments)
        if where == REST:
            del self._rest[pattern]
            return True
        if where == INFIX:
            self._infix_count -= 1
        level = self._tables[where][len(key)]
        bucket = level[key]
        if type(bucket) is dict:
            del bucket[pattern]
            if len(bucket) == 1:
                level[key] = next(iter(bucket))
            return True
        del level[key]
        if not level:
            del self._tables[where][len(key)]
            self._relength(where)
        return True

    def _relength(self, where: int) -> None:
        self._lens[where] = tuple(sorted(self._tables[where]))
        if where == PREFIX:
            self.lengths = self._lens[PREFIX]

    # ------------------------------------------------------------ matching

    def matches(self, channel: bytes) -> Iterator[tuple[bytes, S | set[S]]]:
        """(pattern, subscribers) for every pattern that matches ``channel``."""
        match = self._match
        subs = self._subs
        for bucket in self._buckets(channel):
            if type(bucket) is bytes:
                if match(bucket, channel):
                    yield bucket, subs[bucket]
                continue
            for pattern in cast("dict[bytes, None]", bucket):
                if match(pattern, channel):
                    yield pattern, subs[pattern]

    def _buckets(self, channel: bytes) -> Iterator[Bucket]:
        """Every bucket whose key ``channel`` contains where the key says."""
        n = len(channel)
        prefixes, suffixes, infixes = self._tables
        for length in self._lens[PREFIX]:
            if length > n:
                break
            bucket = prefixes[length].get(channel[:length])
            if bucket is not None:
                yield bucket
        for length in self._lens[SUFFIX]:
            if length > n:
                break
            bucket = suffixes[length].get(channel[n - length :])
            if bucket is not None:
                yield bucket
        lengths = self._lens[INFIX]
        if lengths:
            if self._infix_count <= n * len(lengths):  # a scan costs less
                for level in infixes.values():
                    yield from level.values()
            else:
                for length in lengths:
                    level = infixes[length]
                    seen: set[bytes] = set()
                    for i in range(n - length + 1):
                        key = channel[i : i + length]
                        bucket = level.get(key)
                        if bucket is not None and key not in seen:
                            seen.add(key)
                            yield bucket
        if self._rest:
            yield from self._rest

    def candidates(self, channel: bytes) -> int:
        """How many patterns :meth:`matches` would test for ``channel``."""
        return sum(1 if type(b) is bytes else len(b) for b in self._buckets(channel))

    def _match(self, pattern: bytes, channel: bytes) -> bool:
        special = self._special.get(pattern)
        if special is None:
            return match_segments(pattern.split(b"*"), channel)
        if type(special) is tuple:
            return match_segments(special, channel)
        return cast(Glob, special).match(channel)


def _key(pattern: bytes, segments: tuple[bytes, ...] | None) -> tuple[int, bytes]:
    """Where a pattern is filed: the longest literal every match contains,
    the prefix first on a tie (one lookup per length), then the suffix."""
    if segments is None or len(segments) < 2:  # '?' / classes, no '*', or NEVER
        key = literal_prefix(pattern)
        if len(key) == len(pattern):
            key = pattern  # no glob, no escape: the pattern itself (re's group is a copy)
        elif segments and key == segments[0]:
            key = segments[0]  # no '*': the key is the one segment (one copy, not two)
        return PREFIX, key
    prefix = segments[0]  # a plain pattern's literal prefix
    suffix = segments[-1]
    inner = max(segments[1:-1], key=len, default=b"")[:INFIX_MAX]
    best = max(len(prefix), len(suffix), len(inner))
    if best == 0:
        return REST, b""
    if len(prefix) == best:
        return PREFIX, prefix
    if len(suffix) == best:
        return SUFFIX, suffix
    return INFIX, inner
