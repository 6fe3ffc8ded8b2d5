"""PeerTable: which peers may have a subscriber for a channel.

Every peer gets a small slot number; a set of peers is an int bitmask over
slots. Peer channel filters of one size m live in one bit-sliced index (row j
= the peers whose bit j is set), so routing a channel is: hash it once, reduce
the positions per filter size in use, AND k rows per size (cost independent of
the number of peers; redis/redis #122; docs/architecture.md §3). Pattern filters: for
each prefix length L in use by some peer, the channel's first L bytes are
tested the same way against the pattern index, restricted to the peers that
use length L. The peers with a match-all pattern and the peers whose filter
we do not hold (or could not verify) are ORed in: fail open.

Shard channels (SPUBLISH) are in the channel filter; patterns never match them
(Redis: PSUBSCRIBE does not see SPUBLISH), so a shard route skips patterns.

A route is cached per (channel, shard) until the table next changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import cython
from bitarray import bitarray

from bloom import BitSlicedIndex, BloomFilter, bit_flips, crc64, key_positions
from cluster_bus.frames import FilterKind

ROUTE_CACHE_SIZE = 65536


@dataclass(slots=True)
class PeerFilter:
    """Our copy of one peer filter. ``bits`` is None while unknown (fail open)."""

    m: int = 0
    k: int = 0
    bits: bitarray | None = None
    fingerprint: int | None = None
    epoch: int = 0
    prefix_mask: int = 0
    match_all: bool = False
    #: the CRC64 of ``bits`` alone (the fingerprint before the pattern
    #: metadata), kept up to date by each delta's flips (bloom.crc64.bit_flips)
    bits_crc: int = 0


def filter_fingerprint(kind: FilterKind, bits: bytes, prefix_mask: int, match_all: bool) -> int:
    """The fingerprint a node announces for a filter: Redis CRC64 of the bit bytes
    (``CountingBloomFilter.fingerprint``); for patterns continued over the prefix
    mask (8 bytes big-endian) and the match-all byte (``PatternFilter.fingerprint``),
    so a change of any of the three shows in PING/PONG."""
    return _with_meta(kind, crc64(bits), prefix_mask, match_all)


def _with_meta(kind: FilterKind, bits_crc: int, prefix_mask: int, match_all: bool) -> int:
    """:func:`filter_fingerprint` from the CRC64 of the bits alone."""
    if kind is FilterKind.CHANNELS:
        return bits_crc
    return crc64(prefix_mask.to_bytes(8, "big") + (b"\x01" if match_all else b"\x00"), bits_crc)


@cython.final
@cython.cclass
class PeerTable:
    """Peer filters and the routing decision of a node (compiled on the
    compiled data plane, ``cluster_bus._routing``: the forwarding reads a
    route from its cache in C)."""

    def __init__(self) -> None:
        self._slot: dict[str, int] = {}
        #: len(self._slot), kept as a plain attribute: every PUBLISH reads it
        self.peer_count = 0
        self._node: list[str | None] = []
        self._filters: dict[tuple[str, FilterKind], PeerFilter] = {}
        self._chan_index: dict[tuple[int, int], BitSlicedIndex] = {}
        self._pat_index: dict[tuple[int, int], BitSlicedIndex] = {}
        self._chan_open = 0  # peers whose channel filter is unknown
        self._pat_open = 0  # peers whose pattern filter is unknown
        self._match_all = 0
        self._by_length: dict[int, int] = {}  # prefix length -> peers using it
        self._k_max = 0
        # route() results: channels, and shard channels apart (a key without
        # a tuple to build and hash on every PUBLISH)
        self._cache: dict[bytes, int] = {}
        self._shard_cache: dict[bytes, int] = {}
        self._nodes_cache: dict[int, tuple[str, ...]] = {}

    # -- peers ---------------------------------------------------------------------

    def node_ids(self) -> set[str]:
        return set(self._slot)

    def has_peer(self, node_id: str) -> bool:
        return node_id in self._slot

    def add_peer(self, node_id: str) -> int:
        """Add a peer with unknown filters (it gets everything until we hold them)."""
        if node_id in self._slot:
            return self._slot[node_id]
        try:
            slot = self._node.index(None)
            self._node[slot] = node_id
        except ValueError:
            slot = len(self._node)
            self._node.append(node_id)
        self._slot[node_id] = slot
        self.peer_count = len(self._slot)
        bit = 1 << slot
        self._chan_open |= bit
        self._pat_open |= bit
        for kind in FilterKind:
            self._filters[(node_id, kind)] = PeerFilter()
        self._peers_changed()
        return slot

    def remove_peer(self, node_id: str) -> None:
        slot = self._slot.pop(node_id, None)
        if slot is None:
            return
        self.peer_count = len(self._slot)
        bit = 1 << slot
        for kind in FilterKind:
            self._drop_from_index(node_id, kind, slot)
            self._filters.pop((node_id, kind), None)
        self._chan_open &= ~bit
        self._pat_open &= ~bit
        self._match_all &= ~bit
        for length in list(self._by_length):
            self._by_length[length] &= ~bit
            if not self._by_length[length]:
                del self._by_length[length]
        self._node[slot] = None
        self._peers_changed()

    def nodes_of(self, mask: int) -> tuple[str, ...]:
        """The node ids of a peer bitmask."""
        cached = self._nodes_cache.get(mask)
        if cached is not None:
            return cached
        out = []
        m = mask
        while m:
            low = m & -m
            node = self._node[low.bit_length() - 1]
            if node is not None:
                out.append(node)
            m ^= low
        result = tuple(out)
        if len(self._nodes_cache) < 4096:
            self._nodes_cache[mask] = result
        return result

    # -- filter copies -------------------------------------------------------------

    def fingerprint(self, node_id: str, kind: FilterKind) -> int | None:
        pf = self._filters.get((node_id, kind))
        return None if pf is None or pf.bits is None else pf.fingerprint

    def epoch(self, node_id: str, kind: FilterKind) -> int:
        pf = self._filters.get((node_id, kind))
        return 0 if pf is None else pf.epoch

    def holds_filters(self, node_id: str) -> bool:
        """Both of the peer's filters are held and verified."""
        for kind in FilterKind:  # noqa: SIM110 (a generator expression: Cython warns, setup.py)
            if self.fingerprint(node_id, kind) is None:
                return False
        return True

    def mark_unknown(self, node_id: str, kind: FilterKind) -> None:
        """Forget our copy: the peer gets every PUBLISH until a verified copy arrives."""
        slot = self._slot.get(node_id)
        if slot is None:
            return
        bit = 1 << slot
        pf = self._filters[(node_id, kind)]
        if pf.bits is None:
            return
        self._drop_from_index(node_id, kind, slot)
        pf.bits = None
        pf.fingerprint = None
        if kind is FilterKind.CHANNELS:
            self._chan_open |= bit
        else:
            self._pat_open |= bit
        self._changed()

    def set_filter(
        self,
        node_id: str,
        kind: FilterKind,
        m: int,
        k: int,
        bits: bytes,
        fingerprint: int,
        epoch: int,
        prefix_mask: int = 0,
        match_all: bool = False,
    ) -> bool:
        """Install a whole filter; False (and fail open) if its CRC64 is not ``fingerprint``."""
        slot = self._slot.get(node_id)
        if slot is None:
            return False
        bits_crc = crc64(bits) if len(bits) * 8 == m and 1 <= k <= 255 else -1
        if bits_crc < 0 or _with_meta(kind, bits_crc, prefix_mask, match_all) != fingerprint:
            self.mark_unknown(node_id, kind)
            return False
        bit = 1 << slot
        self._drop_from_index(node_id, kind, slot)
        arr = bitarray(endian="big")
        arr.frombytes(bits)
        index = self._index_for(kind, m, k)
        index.set(slot, BloomFilter(m, k, arr))
        pf = self._filters[(node_id, kind)]
        # our copy is the index's (one bit vector, changed once per delta)
        pf.m, pf.k, pf.bits, pf.fingerprint, pf.epoch = m, k, index.held(slot), fingerprint, epoch
        pf.bits_crc = bits_crc
        if kind is FilterKind.CHANNELS:
            self._chan_open &= ~bit
        else:
            self._pat_open &= ~bit
            self._set_pattern_meta(bit, prefix_mask, match_all)
            pf.prefix_mask, pf.match_all = prefix_mask, match_all
        self._changed()
        return True

    def apply_delta(
        self,
        node_id: str,
        kind: FilterKind,
        m: int,
        base_fp: int,
        new_fp: int,
        set_positions: Iterable[int],
        cleared_positions: Iterable[int],
        epoch: int,
        prefix_mask: int = 0,
        match_all: bool = False,
    ) -> bool:
        """Apply explicit bit changes (idempotent). True when our copy now has
        CRC64 ``new_fp``; False when we hold no copy, the size differs, or the
        result does not verify (the caller then marks it unknown and asks)."""
        slot = self._slot.get(node_id)
        pf = self._filters.get((node_id, kind))
        if slot is None or pf is None:
            return False
        if kind is FilterKind.PATTERNS:
            self._set_pattern_meta(1 << slot, prefix_mask, match_all)
            pf.prefix_mask, pf.match_all = prefix_mask, match_all
        bits = pf.bits
        if bits is None or pf.m != m:
            self._changed()
            return False
        # the bits, the index's rows and the CRC64 in one pass (issue 48: a
        # CRC64 of the whole copy per delta was most of a peer's cost of a
        # remote SUBSCRIBE; then the copy and the index were two bit vectors)
        flips = bit_flips(m >> 3)
        index = self._index_for(kind, m, pf.k)  # (there since set_filter made the copy)
        crc: int = index.apply_delta(slot, set_positions, cleared_positions, flips, pf.bits_crc)
        if flips is None:
            crc = crc64(bits.tobytes())
        pf.bits_crc = crc
        pf.epoch = max(pf.epoch, epoch)
        fp = _with_meta(kind, crc, pf.prefix_mask, pf.match_all)
        pf.fingerprint = fp
        self._changed()
        return fp == new_fp

    def set_pattern_meta(self, node_id: str, prefix_mask: int, match_all: bool, epoch: int) -> None:
        """Prefix-length mask and match-all flag from a heartbeat (newest wins)."""
        slot = self._slot.get(node_id)
        pf = self._filters.get((node_id, FilterKind.PATTERNS))
        if slot is None or pf is None or epoch < pf.epoch:
            return
        if pf.prefix_mask == prefix_mask and pf.match_all == match_all:
            return
        pf.prefix_mask, pf.match_all = prefix_mask, match_all
        self._set_pattern_meta(1 << slot, prefix_mask, match_all)
        self._changed()

    # -- routing -------------------------------------------------------------------

    def route(self, channel: bytes, shard: bool = False) -> int:
        """Bitmask of the peers that may have a subscriber for ``channel``."""
        cache = self._shard_cache if shard else self._cache
        cached = cache.get(channel)
        if cached is not None:
            return cached
        mask = self._chan_open
        if self._chan_index:
            hashes = key_positions(channel, self._k_max)
            for index in self._chan_index.values():
                mask |= index.query(hashes)
        if not shard:
            mask |= self._pat_open | self._match_all
            if self._pat_index:
                n = len(channel)
                for length, users in self._by_length.items():
                    if length > n or not users & ~mask:
                        continue
                    hashes = key_positions(channel[:length], self._k_max)
                    for index in self._pat_index.values():
                        mask |= index.query(hashes) & users
        if len(cache) >= ROUTE_CACHE_SIZE:
            cache.clear()
        cache[channel] = mask
        return mask

    # -- internals -----------------------------------------------------------------

    def _changed(self) -> None:
        self._cache.clear()
        self._shard_cache.clear()

    def _peers_changed(self) -> None:
        """A peer came or went: a slot's bit may now mean another node, so the
        mask -> node ids cache goes too (else a restarted node, new id in the
        old slot, would never be routed to again)."""
        self._cache.clear()
        self._shard_cache.clear()
        self._nodes_cache.clear()

    def _index_for(self, kind: FilterKind, m: int, k: int) -> BitSlicedIndex:
        table = self._chan_index if kind is FilterKind.CHANNELS else self._pat_index
        index = table.get((m, k))
        if index is None:
            index = table[(m, k)] = BitSlicedIndex(m, k)
            self._k_max = max(self._k_max, k)
        return index

    def _drop_from_index(self, node_id: str, kind: FilterKind, slot: int) -> None:
        pf = self._filters.get((node_id, kind))
        if pf is None or pf.bits is None:
            return
        table = self._chan_index if kind is FilterKind.CHANNELS else self._pat_index
        index = table.get((pf.m, pf.k))
        if index is not None:
            index.remove(slot)
            if not index.peers:
                del table[(pf.m, pf.k)]

    def _set_pattern_meta(self, bit: int, prefix_mask: int, match_all: bool) -> None:
        if match_all:
            self._match_all |= bit
        else:
            self._match_all &= ~bit
        for length in list(self._by_length):
            self._by_length[length] &= ~bit
            if not self._by_length[length]:
                del self._by_length[length]
        m = prefix_mask & ~1  # bit L = prefixes of length L in use (bloom.PatternFilter)
        while m:
            low = m & -m
            length = low.bit_length() - 1
            self._by_length[length] = self._by_length.get(length, 0) | bit
            m ^= low
