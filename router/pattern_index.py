"""PatternIndex: the node's pattern subscriptions indexed by literal prefix.

Every match of a glob pattern starts with the pattern's literal prefix
(:func:`router.glob.literal_prefix`), so a channel can only match patterns
whose prefix is one of the channel's own prefixes. Patterns are bucketed by
prefix length, then by prefix (``{length: {prefix: bucket}}``); a PUBLISH
looks up ``channel[:L]`` once per prefix length in use and runs the glob only
on the patterns found there — never a scan of all patterns. (This is a trie
flattened by level: one dict probe per level that has patterns at all, which
in practice is a handful.)

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


class PatternIndex(Generic[S]):
    """pattern -> subscribers, with prefix-indexed matching."""

    __slots__ = ("_by_len", "_special", "_subs", "lengths")

    def __init__(self) -> None:
        self._subs: dict[bytes, S | set[S]] = {}
        # how to match a pattern that is not split(b"*"): its segments (escapes),
        # NEVER (nesting limit) or its Glob ('?', classes)
        self._special: dict[bytes, tuple[bytes, ...] | Glob] = {}
        self._by_len: dict[int, dict[bytes, bytes | dict[bytes, None]]] = {}
        #: prefix lengths in use, ascending; empty exactly when there are no
        #: patterns (a plain attribute: PUBLISH tests it on every call)
        self.lengths: tuple[int, ...] = ()

    @property
    def table(self) -> dict[bytes, S | set[S]]:
        """pattern -> its subscriber or set of subscribers."""
        return self._subs

    def __len__(self) -> int:
        return len(self._subs)

    def __contains__(self, pattern: bytes) -> bool:
        return pattern in self._subs

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._subs)

    def subscribers(self, pattern: bytes) -> set[S]:
        subs = self._subs.get(pattern)
        if subs is None:
            return set()
        return set(subs) if type(subs) is set else {subs}  # type: ignore[arg-type]

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
        prefix = literal_prefix(pattern)
        level = self._by_len.get(len(prefix))
        if level is None:
            level = self._by_len[len(prefix)] = {}
            self.lengths = tuple(sorted(self._by_len))
        bucket = level.get(prefix)
        if bucket is None:
            level[prefix] = pattern
        elif type(bucket) is bytes:
            level[prefix] = {bucket: None, pattern: None}
        else:
            bucket[pattern] = None  # type: ignore[index]
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
        self._special.pop(pattern, None)
        prefix = literal_prefix(pattern)
        level = self._by_len[len(prefix)]
        bucket = level[prefix]
        if type(bucket) is dict:
            del bucket[pattern]
            if len(bucket) == 1:
                level[prefix] = next(iter(bucket))
            return True
        del level[prefix]
        if not level:
            del self._by_len[len(prefix)]
            self.lengths = tuple(sorted(self._by_len))
        return True

    def matches(self, channel: bytes) -> Iterator[tuple[bytes, S | set[S]]]:
        """(pattern, subscribers) for every pattern that matches ``channel``."""
        n = len(channel)
        by_len = self._by_len
        for length in self.lengths:
            if length > n:
                break
            bucket = by_len[length].get(channel[:length])
            if bucket is None:
                continue
            if type(bucket) is bytes:
                if self._match(bucket, channel):
                    yield bucket, self._subs[bucket]
                continue
            for pattern in cast("dict[bytes, None]", bucket):
                if self._match(pattern, channel):
                    yield pattern, self._subs[pattern]

    def candidates(self, channel: bytes) -> int:
        """How many patterns :meth:`matches` would test for ``channel``."""
        n = len(channel)
        total = 0
        for length in self.lengths:
            if length > n:
                break
            bucket = self._by_len[length].get(channel[:length])
            if bucket is not None:
                total += 1 if type(bucket) is bytes else len(bucket)
        return total

    def _match(self, pattern: bytes, channel: bytes) -> bool:
        special = self._special.get(pattern)
        if special is None:
            return match_segments(pattern.split(b"*"), channel)
        if type(special) is tuple:
            return match_segments(special, channel)
        return special.match(channel)  # type: ignore[union-attr]
