"""PatternIndex: the node's pattern subscriptions indexed by literal prefix.

Every match of a glob pattern starts with the pattern's literal prefix
(:func:`router.glob.literal_prefix`), so a channel can only match patterns
whose prefix is one of the channel's own prefixes. Patterns are bucketed by
prefix length, then by prefix (``{length: {prefix: {pattern: subscribers}}}``);
a PUBLISH looks up ``channel[:L]`` once per prefix length in use and runs the
glob only on the patterns found there — never a scan of all patterns. (This is
a trie flattened by level: one dict probe per level that has patterns at all,
which in practice is a handful.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from router.glob import Glob, literal_prefix

S = TypeVar("S")


class PatternIndex(Generic[S]):
    """pattern -> set of subscribers, with prefix-indexed matching."""

    __slots__ = ("_by_len", "_globs", "_subs", "lengths")

    def __init__(self) -> None:
        self._subs: dict[bytes, set[S]] = {}
        self._globs: dict[bytes, Glob] = {}  # compiled once, lazily (router/glob.py)
        self._by_len: dict[int, dict[bytes, dict[bytes, set[S]]]] = {}
        #: prefix lengths in use, ascending; empty exactly when there are no
        #: patterns (a plain attribute: PUBLISH tests it on every call)
        self.lengths: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self._subs)

    def __contains__(self, pattern: bytes) -> bool:
        return pattern in self._subs

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._subs)

    def subscribers(self, pattern: bytes) -> set[S]:
        return self._subs.get(pattern, set())

    def add(self, pattern: bytes, sub: S) -> bool:
        """Add a subscriber; True when the pattern is new (its first subscriber)."""
        subs = self._subs.get(pattern)
        if subs is not None:
            subs.add(sub)
            return False
        subs = {sub}
        self._subs[pattern] = subs
        self._globs[pattern] = Glob(pattern)
        prefix = literal_prefix(pattern)
        level = self._by_len.get(len(prefix))
        if level is None:
            level = self._by_len[len(prefix)] = {}
            self.lengths = tuple(sorted(self._by_len))
        level.setdefault(prefix, {})[pattern] = subs
        return True

    def remove(self, pattern: bytes, sub: S) -> bool:
        """Remove a subscriber; True when the pattern lost its last subscriber."""
        subs = self._subs.get(pattern)
        if subs is None or sub not in subs:
            return False
        subs.discard(sub)
        if subs:
            return False
        del self._subs[pattern]
        del self._globs[pattern]
        prefix = literal_prefix(pattern)
        level = self._by_len[len(prefix)]
        bucket = level[prefix]
        del bucket[pattern]
        if not bucket:
            del level[prefix]
            if not level:
                del self._by_len[len(prefix)]
                self.lengths = tuple(sorted(self._by_len))
        return True

    def matches(self, channel: bytes) -> Iterator[tuple[bytes, set[S]]]:
        """(pattern, subscribers) for every pattern that matches ``channel``."""
        n = len(channel)
        by_len = self._by_len
        globs = self._globs
        for length in self.lengths:
            if length > n:
                break
            bucket = by_len[length].get(channel[:length])
            if bucket is None:
                continue
            for pattern, subs in bucket.items():
                if globs[pattern].match(channel):
                    yield pattern, subs
