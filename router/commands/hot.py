"""``BLOOMCAST.HOTCHANNELS``: what is hot now (issue 51), in the node's own
namespace (a dotted name, as a Redis module's commands are, so Redis never
takes it)::

    BLOOMCAST.HOTCHANNELS [COUNT n]
                          [BY publishes|bytes|deliveries|forwards|received]
                          [HALFLIFE 10s|1m|10m] [KIND channel|pattern|shard]
                          [TRENDING] [CLUSTER]

The top ``COUNT`` (10) names of this node's summary of ``KIND`` (channels) by
``BY`` (publishes) under ``HALFLIFE`` (1m), from :mod:`router.hotchannels`:
one entry per name, a map in RESP3 and a flat array of field, value in RESP2
(as Redis answers XINFO): ``name``, ``publishes`` (from this node's clients),
``bytes`` (theirs), ``deliveries`` (to local subscribers), ``forwards``
(sent to peers), ``received`` (forwarded here by peers), each per second
(the decayed count times ``ln 2 / half-life``, ``stats top``'s steady-state
rate); ``error``: the most the name's messages handled (publishes +
received) under 1 m may be short by, per second (the summary's bound); and
``seconds``, how long the name has been held. ``TRENDING`` ranks by the
share of publishes under 10 s over the share under 10 m
(:func:`spark.decay.trending`, the Spark job's definition) and adds
``share-10s``, ``share-10m``, ``ratio``.

``CLUSTER`` merges every live node's summary, fetched over the bus on demand
(STATS_REQUEST / STATS_REPLY, :mod:`cluster_bus.stats_query`; a peer that
does not answer within a second is left out and counted in CLUSTER INFO
``cluster_stats_stats_unanswered``): a name's counts summed over the nodes
that sent it, its error the sum of their errors plus the floor of each node
that did not (:func:`merge`), and ``nodes``, how many nodes sent it. A peer
sends its rows ranked by the query's measure, at most :data:`REPLY_BUDGET`
bytes (64 KiB): bytes moved per call, at most ``(N - 1) x (32 + 18 +
64 KiB + 2 KiB)`` for N nodes (a request, a reply and their headers).

A node with ``hot-channels-size 0`` answers an error naming the setting.
"""

from __future__ import annotations

import asyncio
import time
from struct import Struct
from struct import error as StructError
from typing import TYPE_CHECKING, Any

from router import resp
from router.commands.base import Command, Reply
from router.parser import string2ll

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext

#: the half-lives (router.hotchannels.HALF_LIVES), by the words HALFLIFE takes
HALF_LIFE_WORDS = {"10s": 0, "1m": 1, "10m": 2}
MEASURE_WORDS = {"publishes": 0, "bytes": 1, "deliveries": 2, "forwards": 3, "received": 4}
KIND_WORDS = ("channel", "pattern", "shard")
DEFAULT_COUNT = 10
#: the fields of a row, after its name
FIELDS = ("publishes", "bytes", "deliveries", "forwards", "received", "error", "seconds")


class Query:
    """One request's options, checked (:func:`parse`)."""

    __slots__ = ("cluster", "count", "half_life", "kind", "measure", "trending")

    def __init__(self) -> None:
        self.count = DEFAULT_COUNT
        self.measure = 0
        self.half_life = 1
        self.kind = "channel"
        self.trending = False
        self.cluster = False


def parse(args: list[bytes]) -> Query | bytes:
    """The options, or Redis's error reply."""
    q = Query()
    i = 1
    while i < len(args):
        word = args[i].lower()
        value = args[i + 1].decode(errors="replace").lower() if i + 1 < len(args) else None
        if word == b"trending":
            q.trending = True
            i += 1
            continue
        if word == b"cluster":
            q.cluster = True
            i += 1
            continue
        if value is None:
            return resp.error("ERR syntax error")
        if word == b"count":
            n = string2ll(args[i + 1])
            if n is None:
                return resp.error("ERR value is not an integer or out of range")
            if n <= 0:
                return resp.error("ERR value is out of range, must be positive")
            q.count = n
        elif word == b"by":
            if value not in MEASURE_WORDS:
                return resp.error(
                    "ERR BY must be one of publishes, bytes, deliveries, forwards, received"
                )
            q.measure = MEASURE_WORDS[value]
        elif word == b"halflife":
            if value not in HALF_LIFE_WORDS:
                return resp.error("ERR HALFLIFE must be one of 10s, 1m, 10m")
            q.half_life = HALF_LIFE_WORDS[value]
        elif word == b"kind":
            if value not in KIND_WORDS:
                return resp.error("ERR KIND must be one of channel, pattern, shard")
            q.kind = value
        else:
            return resp.error("ERR syntax error")
        i += 2
    return q


#: one name's statistics: (name, publishes, bytes, deliveries, forwards,
#: received, error, seconds held, upper: the most its 1 m messages handled
#: may be), per second (router.hotchannels.Summary.rows)
Row = tuple[bytes, float, float, float, float, float, float, float, float]


class Part:
    """One node's part of an answer, for each half-life asked: its rows, the
    publishes per second of every name (held or not), and its floor: the most
    1 m publishes per second a name it did not send may have had there (its
    ``N / K``, or more when a reply's byte budget left held names out), in 1 m
    messages handled per second as a row's ``error``."""

    __slots__ = ("floor", "rows", "total")

    def __init__(self) -> None:
        self.rows: dict[int, list[Row]] = {}
        self.total: dict[int, float] = {}
        self.floor = 0.0


def half_lives(q: Query) -> list[int]:
    """The half-lives ``q`` reads: its own, and 10 s and 10 m for TRENDING."""
    return sorted({q.half_life, 0, 2} if q.trending else {q.half_life})


def local(ctx: CommandContext, q: Query) -> Part:
    """This node's part of ``q``'s answer: every held name."""
    part = Part()
    hot = ctx.pubsub.hot
    if hot is None:
        return part
    now = time.monotonic()
    hot.tick(now)
    summary = hot.summary(q.kind)
    for h in half_lives(q):
        part.rows[h] = summary.rows(h, now)
        part.total[h] = summary.total(h, now)
    part.floor = summary.error_bound(now)
    return part


def hot_channels(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    q = parse(args)
    if isinstance(q, bytes):
        return q
    if ctx.pubsub.hot is None:
        return resp.error(
            "ERR the hot-channels summary is off: CONFIG SET hot-channels-size <n> to turn it on"
        )
    if not q.cluster:
        return answer(q, client.resp, [local(ctx, q)])
    future = ctx.link.stats_query(encode_query(q))
    protocol = client.resp
    done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def merged(f: asyncio.Future[list[bytes]]) -> None:
        if done.done():
            return
        answers = [] if f.cancelled() or f.exception() is not None else f.result()
        parts = [local(ctx, q)]
        for body in answers:
            part = decode_part(body)
            if part is not None:
                parts.append(part)
        done.set_result(answer(q, protocol, parts))

    future.add_done_callback(merged)
    return done


# -- over the bus (cluster_bus.stats_query carries these bytes) ------------------------

#: what a STATS_REQUEST of BLOOMCAST.HOTCHANNELS starts with (other queries may follow)
QUERY_TAG = b"HOT1"
_QUERY = Struct(">4sBBBBI")
_HALF = Struct(">BdI")  # h, total publishes/s, rows
_ROW = Struct(">I8d")
#: a reply's bytes for its rows, all half-lives together (cluster_bus's
#: STATS_REPLY allows 68 KiB: the rest is headers)
REPLY_BUDGET = 64 << 10


def encode_query(q: Query) -> bytes:
    kind = KIND_WORDS.index(q.kind)
    return _QUERY.pack(QUERY_TAG, kind, q.half_life, q.measure, q.trending, min(q.count, 2**32 - 1))


def decode_query(raw: bytes) -> Query | None:
    if len(raw) != _QUERY.size:
        return None
    tag, kind, h, measure, trending, count = _QUERY.unpack(raw)
    if tag != QUERY_TAG or kind > 2 or h > 2 or measure >= len(MEASURE_WORDS) or count == 0:
        return None
    q = Query()
    q.kind, q.half_life, q.measure = KIND_WORDS[kind], h, measure
    q.trending, q.count = bool(trending), count
    return q


def serve(ctx: CommandContext, raw: bytes) -> bytes:
    """A peer's query answered: this node's part, its rows ranked by the
    query's measure (TRENDING: publishes) and cut to :data:`REPLY_BUDGET`
    bytes; a held name left out raises the part's floor to its upper bound.
    Empty for a query it cannot read or while the summary is off."""
    q = decode_query(raw)
    if q is None or ctx.pubsub.hot is None:
        return b""
    part = local(ctx, q)
    hs = half_lives(q)
    budget = REPLY_BUDGET // len(hs)
    floor = part.floor
    chunks = [bytes([len(hs)])]
    for h in hs:
        rows = part.rows[h]
        m = 1 if q.trending else 1 + q.measure
        rows.sort(key=lambda r: (-float(r[m]), r[0]))
        body: list[bytes] = []
        used = 0
        for r in rows:
            size = _ROW.size + len(r[0])
            if used + size > budget:
                floor = max(floor, r[8])  # not sent: at most its upper bound
                continue
            used += size
            body.append(_ROW.pack(len(r[0]), *r[1:9]) + r[0])
        chunks.append(_HALF.pack(h, part.total[h], len(body)))
        chunks.extend(body)
    chunks.append(_FLOOR.pack(floor))
    return b"".join(chunks)


_FLOOR = Struct(">d")


def decode_part(raw: bytes) -> Part | None:
    """A peer's part (:func:`serve`); None for bytes that do not read as one."""
    try:
        part = Part()
        pos = 1
        for _ in range(raw[0]):
            h, total, n = _HALF.unpack_from(raw, pos)
            pos += _HALF.size
            if h > 2:
                return None
            rows: list[Row] = []
            for _ in range(n):
                name_len, *values = _ROW.unpack_from(raw, pos)
                pos += _ROW.size
                name = raw[pos : pos + name_len]
                if len(name) != name_len:
                    return None
                pos += name_len
                rows.append((name, *values))
            part.rows[h], part.total[h] = rows, total
        (part.floor,) = _FLOOR.unpack_from(raw, pos)
        if pos + _FLOOR.size != len(raw):
            return None
        return part
    except (IndexError, StructError):
        return None


# -- the answer -------------------------------------------------------------------------


def merge(parts: list[Part], h: int) -> list[tuple[Row, int]]:
    """The nodes' rows under half-life ``h`` merged (Agarwal et al., "Mergeable
    Summaries", PODS 2012): a name's counts summed over the nodes that sent
    it, and its error the sum of their errors plus the floor of every node
    that did not (each bounds what that node may have had of it); with the
    number of nodes that sent it."""
    floors = sum(p.floor for p in parts) if len(parts) > 1 else 0.0
    out: dict[bytes, list[Any]] = {}
    for p in parts:
        for r in p.rows.get(h, ()):
            have = out.get(r[0])
            if have is None:
                out[r[0]] = [*r, 1, p.floor]
            else:
                for j in (1, 2, 3, 4, 5, 6, 8):
                    have[j] += r[j]
                have[7] = min(have[7], r[7])
                have[9] += 1
                have[10] += p.floor
    rows: list[tuple[Row, int]] = []
    for v in out.values():
        # plus the floors of the nodes that did not send it (none: one node)
        missing = floors - v[10] if len(parts) > 1 else 0.0
        row = (v[0], v[1], v[2], v[3], v[4], v[5], v[6] + missing, v[7], v[8] + missing)
        rows.append((row, v[9]))
    return rows


def answer(q: Query, protocol: int, parts: list[Part]) -> bytes:
    """The reply of ``q`` over the parts of one or more nodes."""
    rows = merge(parts, q.half_life)
    if q.trending:
        from spark.decay import trending

        short = {r[0]: r[1] for r, _ in merge(parts, 0)}
        long_ = {r[0]: r[1] for r, _ in merge(parts, 2)}
        totals = [sum(p.total.get(h, 0.0) for p in parts) for h in (0, 2)]
        ranked = trending(short, long_, totals[0], totals[1])[: q.count]
        by_name = {r[0]: (r, n) for r, n in rows}
        out = []
        for name, share_s, share_l, ratio in ranked:
            entry: dict[str, Any] = {"name": name}
            if name in by_name:
                entry = _entry(*by_name[name], q.cluster)
            entry.update({"share-10s": share_s, "share-10m": share_l, "ratio": ratio})
            out.append(entry)
        return resp.encode_value(out, protocol)
    m = 1 + q.measure
    ranked_rows = sorted(rows, key=lambda rn: (-float(rn[0][m]), rn[0][0]))[: q.count]
    return resp.encode_value([_entry(r, n, q.cluster) for r, n in ranked_rows], protocol)


def _entry(r: Row, nodes: int, cluster: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": r[0]}
    entry.update(zip(FIELDS, (float(x) for x in r[1:8]), strict=True))
    if cluster:
        entry["nodes"] = nodes
    return entry


COMMANDS = (
    Command(
        "bloomcast.hotchannels",
        -1,
        hot_channels,
        "The node's (or, with CLUSTER, the cluster's) hottest channels, decayed.",
        group="pubsub",
        flags=("readonly", "loading", "stale"),
    ),
)
