"""``bloomcast stats top``: a distribution the job wrote, decayed to now.

Reads Redis (``--redis``) or the file sink (``--out``, default
``bloomcast-stats``). Unknown distributions and missing output are errors
(exit 2) whose one line lists what exists.

``--live HOST:PORT`` reads no job's output: it asks that node for
``BLOOMCAST.HOTCHANNELS CLUSTER`` (issue 51: every node's decayed summary,
merged) and prints the same table: ``channels:<h>`` for the half-lives the
summary keeps (10s, 1m, 10m), its publishes per second as the rate, the
decayed count that rate gives (C = rate x half-life / ln 2) and each
channel's probability among the channels the summaries hold; ``trending``
is 10 s over 10 m. The title states the error bound: the most a channel's
rate may be short by.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, cast

from spark.decay import decay_rate, decay_to, parse_half_life, trending
from spark.nodes import node_label

DEFAULT_OUT = "bloomcast-stats"
#: the job's statistics (spark.job.STATS; not imported: that module needs pyspark types)
STATS = ("channels", "forwarded", "receiver", "false_positive", "forwards")
VIEWS = "false_positive_rate:<half-life>, trending:<short>/<long>"

# -- stats top ------------------------------------------------------------------------


def split_dist(dist: str) -> tuple[str, float]:
    """``channels:1m`` -> (``channels``, 60.0). Raises ValueError."""
    stat, sep, label = dist.rpartition(":")
    if not sep or not stat:
        raise ValueError(f"distribution {dist!r} has no half-life (e.g. channels:1m)")
    return stat, parse_half_life(label)


def redis_client(url: str) -> Any:
    """A redis-py client for ``url`` (decoded replies) that gives up on an unreachable
    server after 5 s instead of hanging. ValueError for a bad URL."""
    import redis

    return redis.Redis.from_url(
        url, decode_responses=True, socket_connect_timeout=5, socket_timeout=30
    )


def redis_errors() -> tuple[type[BaseException], ...]:
    """What redis-py raises for a server it cannot reach or talk to (plus OSError)."""
    import redis

    return (redis.RedisError, OSError)


class Source:
    """Distributions written by the job, from Redis or from the file sink."""

    def __init__(self, redis_url: str | None, out: str | None) -> None:
        self.redis_url = redis_url
        self.out = out or DEFAULT_OUT
        self._files: dict[str, tuple[dict[str, float], float, float]] | None = None

    def load(self, dist: str) -> tuple[dict[str, float], float | None]:
        """bin -> decayed count at T, and T (None when the distribution is empty)."""
        if self.redis_url:
            client = redis_client(self.redis_url)
            with client.pipeline(transaction=True) as pipe:
                pipe.zrange(dist, 0, -1, withscores=True)
                pipe.get(f"{dist}._T")
                pairs, raw_t = pipe.execute()
            client.close()
            return {b: float(s) for b, s in pairs}, (float(raw_t) if raw_t else None)
        if self._files is None:
            from spark.sinks import read_file_distributions

            self._files = read_file_distributions(self.out)
        counts, t, _h = self._files.get(dist, ({}, None, 0.0))
        return counts, t

    def addresses(self) -> dict[str, str]:
        """node id -> announced address, as the job recorded them (spark.nodes)."""
        if self.redis_url:
            from spark.sinks import NODES_KEY

            client = redis_client(self.redis_url)
            nodes = cast("dict[str, str]", client.hgetall(NODES_KEY))
            client.close()
            return dict(nodes)
        from spark.sinks import read_file_nodes

        return read_file_nodes(self.out) if (Path(self.out) / "batches").is_dir() else {}

    def where(self) -> str:
        return f"Redis {self.redis_url}" if self.redis_url else self.out

    def names(self) -> list[str]:
        """The distributions there. Raises ValueError (one line) when there are none."""
        if self.redis_url:
            client = redis_client(self.redis_url)
            found = [
                k for stat in STATS for k in client.scan_iter(match=f"{stat}:*") if "._" not in k
            ]
            client.close()
            if not found:
                raise ValueError(
                    f"Redis {self.redis_url} holds no bloomcast statistics "
                    f"(write them with: bloomcast stats run --redis {self.redis_url})"
                )
            return sorted(found)
        if not (Path(self.out) / "batches").is_dir():
            raise ValueError(
                f"no statistics in {self.out}: {Path(self.out) / 'batches'} does not exist "
                f"(write them with: bloomcast stats run --out {self.out}, or read --redis URL)"
            )
        if self._files is None:
            from spark.sinks import read_file_distributions

            self._files = read_file_distributions(self.out)
        return sorted(self._files)

    def require(self, dist: str) -> None:
        """Raises ValueError naming what exists when ``dist`` is not there."""
        names = self.names()
        if dist not in names:
            raise ValueError(
                f"unknown distribution {dist!r}; {self.where()} has: "
                f"{', '.join(names) or 'none'} (views: {VIEWS})"
            )

    def decayed(self, dist: str, now: float) -> dict[str, float]:
        _stat, h = split_dist(dist)
        counts, t = self.load(dist)
        return decay_to(counts, t, decay_rate(h), now) if t is not None else {}


#: distributions whose bins are node ids (shown with their address)
NODE_STATS = ("forwarded", "receiver", "false_positive")

#: C x ln 2 / half-life: the event rate that, held steady, gives the decayed count C
RATE_COLUMN = "steady-state rate/s"


def top_rows(source: Source, dist: str, n: int, now: float) -> tuple[list[str], list[list[Any]]]:
    """(column names, rows) for ``stats top``; raises ValueError on an unknown view."""
    stat, _, label = dist.partition(":")
    if stat == "trending":
        if label:
            short_label, slash, long_label = label.partition("/")
            if not slash:
                raise ValueError(
                    f"{dist!r}: trending takes two half-lives, trending:<short>/<long> "
                    "(e.g. trending:1m/1h), or none (shortest and longest found)"
                )
            short, long_ = f"channels:{short_label}", f"channels:{long_label}"
            source.require(short)
            source.require(long_)
        else:
            found = sorted(
                (split_dist(d)[1], d) for d in source.names() if d.startswith("channels:")
            )
            if len(found) < 2:
                raise ValueError("trending needs channels under two half-lives")
            short, long_ = found[0][1], found[-1][1]
        s, lg = source.decayed(short, now), source.decayed(long_, now)
        rows: list[list[Any]] = [list(r) for r in trending(s, lg)]
        return ["channel", f"share {short}", f"share {long_}", "ratio"], rows[:n]
    if stat == "false_positive_rate":
        source.require(f"receiver:{label}")
        fp = source.decayed(f"false_positive:{label}", now)
        recv = source.decayed(f"receiver:{label}", now)
        rows = [
            [node, fp.get(node, 0.0), c, fp.get(node, 0.0) / c] for node, c in recv.items() if c > 0
        ]
        rows.sort(key=lambda r: (-float(r[3]), str(r[0])))
        return ["node", "false positives", "received", "false-positive rate"], rows[:n]
    _, h = split_dist(dist)
    source.require(dist)
    counts = source.decayed(dist, now)
    z = sum(counts.values())
    a = decay_rate(h)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    # a decayed count C with rate a estimates an event rate of C * a per second
    return ["bin", "decayed count", "probability", RATE_COLUMN], [
        [b, c, c / z if z else 0.0, c * a] for b, c in ranked
    ]


# -- stats top --live -----------------------------------------------------------------

#: the half-lives a node's summary keeps (BLOOMCAST.HOTCHANNELS HALFLIFE)
LIVE_HALF_LIVES = ("10s", "1m", "10m")
LIVE_DISTS = "channels:10s, channels:1m, channels:10m, trending (10s/10m)"
#: COUNT asked for a channels table: every name the summaries hold (the
#: probabilities' denominator); a node holds hot-channels-size names at most
LIVE_ALL = 1_000_000


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``; ValueError naming ``--live``."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"--live {text}: expected HOST:PORT, the client port of a node")
    return host, int(port)


def live_query(dist: str) -> list[str]:
    """The BLOOMCAST.HOTCHANNELS arguments that answer ``dist``; ValueError
    (one line naming what --live reads) for anything else."""
    stat, _, label = dist.partition(":")
    if stat == "trending" and label in ("", "10s/10m"):
        return ["CLUSTER", "TRENDING"]
    if stat == "channels" and label in LIVE_HALF_LIVES:
        return ["CLUSTER", "HALFLIFE", label, "COUNT", str(LIVE_ALL)]
    raise ValueError(
        f"--live cannot read {dist!r}: a node's summary answers {LIVE_DISTS} "
        "(the other distributions are the Spark job's: --redis or --out)"
    )


def live_entries(reply: Any) -> list[dict[str, Any]]:
    """BLOOMCAST.HOTCHANNELS's entries (RESP2 flat arrays or RESP3 maps) ->
    dicts, the name as text and every other field a float."""
    out = []
    for item in reply if isinstance(reply, list) else ():
        pairs = item.items() if isinstance(item, dict) else zip(item[::2], item[1::2], strict=True)
        entry = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in pairs}
        name = entry.pop("name")
        row: dict[str, Any] = {k: float(v) for k, v in entry.items()}
        row["name"] = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
        out.append(row)
    return out


def live_rows(address: str, dist: str, n: int) -> tuple[list[str], list[list[Any]], float, int]:
    """(columns, rows, the largest error of a row shown in events/s, nodes) of
    ``dist`` from the node at ``address``. ValueError for a mistake, the redis
    errors for a node that cannot be reached or refuses."""
    host, port = parse_address(address)
    args = live_query(dist)
    import os

    import redis

    client = redis.Redis(
        host=host,
        port=port,
        socket_connect_timeout=5,
        socket_timeout=10,
        password=os.environ.get("REDISCLI_AUTH"),
    )
    try:
        if args[1] == "TRENDING":
            entries = live_entries(
                client.execute_command("BLOOMCAST.HOTCHANNELS", *args, "COUNT", str(n))
            )
        else:
            entries = live_entries(client.execute_command("BLOOMCAST.HOTCHANNELS", *args))
    finally:
        client.close()
    nodes = max((int(e.get("nodes", 1)) for e in entries), default=0)
    if args[1] == "TRENDING":
        rows: list[list[Any]] = [
            [e["name"], e["share-10s"], e["share-10m"], e["ratio"]] for e in entries[:n]
        ]
        worst = max((e.get("error", 0.0) for e in entries[:n]), default=0.0)
        return ["channel", "share channels:10s", "share channels:10m", "ratio"], rows, worst, nodes
    h = parse_half_life(args[2])
    a = decay_rate(h)
    z = sum(e["publishes"] for e in entries)
    shown = entries[:n]  # the node ranked them by publishes
    rows = [[e["name"], e["publishes"] / a, e["publishes"] / z if z else 0.0, e["publishes"]]
            for e in shown]  # fmt: skip
    worst = max((e["error"] for e in shown), default=0.0)
    return ["bin", "decayed count", "probability", RATE_COLUMN], rows, worst, nodes


def top_live(args: argparse.Namespace) -> int:
    """``stats top --live``: exit 2 for a mistake, 1 for a node that cannot be
    reached or refuses (one line each), else print the rows."""
    if args.now is not None:
        print("bloomcast stats top: --now does not apply to --live (it reads now)", file=sys.stderr)
        return 2
    try:
        columns, rows, worst, nodes = live_rows(args.live, args.dist, args.n)
    except ValueError as exc:
        print(f"bloomcast stats top: {exc}", file=sys.stderr)
        return 2
    except redis_errors() as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"bloomcast stats top: cannot read --live {args.live}: {why}", file=sys.stderr)
        return 1
    if args.json:
        clean = [[None if x == float("inf") else x for x in r] for r in rows]
        print(json.dumps([dict(zip(columns, r, strict=True)) for r in clean]))
        return 0
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())
    title = (
        f"{args.dist}, live from {args.live} (merged over {nodes} node{'s' * (nodes != 1)} "
        f"at {when}; a rate may be short by at most {worst:.3g}/s)"
    )
    _print_table(title, columns, rows)
    return 0


def top(args: argparse.Namespace) -> int:
    """``stats top``: exit 2 for an unknown distribution or no output (one line listing
    what exists), 1 when Redis cannot be reached (one line), else print the rows."""
    if getattr(args, "live", None):
        return top_live(args)
    now = args.now if args.now is not None else time.time()
    source = Source(args.redis, args.out)
    try:
        columns, rows = top_rows(source, args.dist, args.n, now)
        stat = args.dist.partition(":")[0]
        node_view = stat in NODE_STATS or stat == "false_positive_rate"
        addresses = source.addresses() if node_view else {}
    except ValueError as exc:
        print(f"bloomcast stats top: {exc}", file=sys.stderr)
        return 2
    except redis_errors() as exc:
        print(f"bloomcast stats top: cannot read Redis {args.redis}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        clean = [[None if x == float("inf") else x for x in r] for r in rows]
        objects = [dict(zip(columns, r, strict=True)) for r in clean]
        if node_view:
            for o, r in zip(objects, rows, strict=True):
                o["address"] = addresses.get(str(r[0]))
        print(json.dumps(objects))
        return 0
    if node_view:
        rows = [[node_label(str(r[0]), addresses), *r[1:]] for r in rows]
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(now))
    _print_table(f"{args.dist} (decayed to {when})", columns, rows)
    return 0


def _print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, c in enumerate(columns):
        # bins are never cut with "..." (a node shows as "host:port (id prefix)")
        if i == 0:
            table.add_column(c, justify="left", no_wrap=True, overflow="fold")
        else:
            table.add_column(c, justify="right")
    for r in rows:
        table.add_row(*(str(x) if isinstance(x, str) else f"{x:.6g}" for x in r))
    Console().print(table)
