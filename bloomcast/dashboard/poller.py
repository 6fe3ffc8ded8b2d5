"""The dashboard's poller: every node of the cluster, every interval, over
redis-py's asyncio client (one connection per node, one pipelined round trip:
``INFO all``, ``CLUSTER NODES`` and the node's own top channels,
``BLOOMCAST.HOTCHANNELS COUNT 3``).

The channels view (issue 51): after each poll, one node (the joined one while
it answers, else the first that did) is asked for the whole cluster's
``BLOOMCAST.HOTCHANNELS CLUSTER COUNT 10`` and ``... CLUSTER TRENDING COUNT
10`` in one round trip; that node merges every node's summary over the bus.
A node without the summary (``hot-channels-size 0``) answers an error, shown
in the view in its place.

Membership, as nsqadmin finds nsqd's through nsqlookupd: the CLUSTER NODES of
the node given to ``--join`` (client port: the ``port`` of
``host:port@busport``); while that node does not answer, the CLUSTER NODES of
any node that did. A node that does not answer within the timeout is shown as
down with the error, and polled again next time; the dashboard carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from bloomcast.dashboard.model import (
    NodeEntry,
    Rates,
    Sample,
    cluster_totals,
    hot_rows,
    parse_cluster_nodes,
    rates,
    rates_json,
)


@dataclass
class NodeState:
    """What the dashboard knows of one node (keyed by node id)."""

    entry: NodeEntry  # as the membership view lists it
    client: aioredis.Redis | None = None
    sample: Sample | None = None  # the latest answer, None while down
    rates: Rates | None = None  # between the last two answers in a row
    links: list[NodeEntry] = field(default_factory=list)  # its own CLUSTER NODES, peers only
    error: str = ""
    last_seen: float | None = None  # Unix time of the latest answer
    hot: list[dict[str, Any]] = field(default_factory=list)  # its own top channels, 1 m
    hot_error: str = ""  # why it gave none (the summary off, an older node)

    @property
    def up(self) -> bool:
        return self.sample is not None

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            with contextlib.suppress(Exception):
                await client.aclose()


def error_text(exc: BaseException) -> str:
    """One short line on why a node did not answer: the OS's words for a
    socket error ("Connection refused"), "no answer" for a timeout, else the
    first line of the error."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TimeoutError | RedisTimeoutError):
            return "no answer (timeout)"
        if isinstance(seen, OSError) and seen.errno:
            return os.strerror(seen.errno)
        seen = seen.__cause__ or seen.__context__
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


#: polls kept for the chart (2 minutes at the default interval)
HISTORY = 120
#: channels in the cluster-wide top and trending lists, and per node
HOT_COUNT = 10
HOT_PER_NODE = 3


class Poller:
    """Polls every node of the cluster ``seed`` belongs to; :meth:`snapshot`
    is what ``/api/cluster`` serves."""

    def __init__(
        self,
        host: str,
        port: int,
        interval: float = 1.0,
        *,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        self.seed = (host, port)
        # AUTH on every connection (redis-py sends it first): a cluster with
        # requirepass or ACL users answers nothing else
        self.username = username
        self.password = password
        self.interval = interval
        self.timeout = max(0.5, min(2.0, interval))
        self.nodes: dict[str, NodeState] = {}
        self.seed_id = ""
        self.polls = 0
        self.view_from = ""  # address whose CLUSTER NODES lists the nodes shown
        self._closing: set[asyncio.Task[None]] = set()
        #: cluster rates of the last HISTORY polls, oldest first (the page's chart)
        self.history: deque[dict[str, float | None]] = deque(maxlen=HISTORY)
        #: the channels view: the whole cluster's top and trending channels
        self.hot: dict[str, Any] = {"from": "", "top": [], "trending": [], "error": ""}

    def _client(self, host: str, port: int) -> aioredis.Redis:
        return aioredis.Redis(
            host=host,
            port=port,
            socket_timeout=self.timeout,
            socket_connect_timeout=self.timeout,
            retry=Retry(NoBackoff(), 0),  # the next poll is the retry
            username=self.username,
            password=self.password,
        )

    async def discover(self) -> None:
        """First contact: the seed's CLUSTER NODES (raises OSError / RedisError /
        TimeoutError when the seed does not answer)."""
        client = self._client(*self.seed)
        try:
            async with asyncio.timeout(self.timeout * 2):
                pipe = client.pipeline(transaction=False)
                pipe.info("server")
                pipe.execute_command("CLUSTER", "NODES")
                info, raw = await pipe.execute(raise_on_error=False)
        finally:
            await client.aclose()
        if isinstance(info, Exception):
            raise info
        entries = parse_cluster_nodes(_nodes_text(raw, info, *self.seed))
        if not entries:
            raise RedisError("CLUSTER NODES is empty")
        self._apply_view(entries, f"{self.seed[0]}:{self.seed[1]}")

    def _host(self, entry: NodeEntry) -> str:
        # a node bound to every address shows 0.0.0.0 or nothing: reach it like the seed
        return self.seed[0] if entry.host in ("", "0.0.0.0", "::") else entry.host

    def _apply_view(self, entries: list[NodeEntry], source: str) -> None:
        entries = [e for e in entries if e.port > 0]
        self.view_from = source
        if source == f"{self.seed[0]}:{self.seed[1]}":
            self.seed_id = next((e.node_id for e in entries if e.myself), self.seed_id)
        for seen_as in entries:
            entry = NodeEntry(
                seen_as.node_id,
                self._host(seen_as),
                seen_as.port,
                seen_as.bus_port,
                tuple(f for f in seen_as.flags if f != "myself"),
                seen_as.link_state,
            )
            state = self.nodes.get(entry.node_id)
            if state is None:
                self.nodes[entry.node_id] = NodeState(entry)
            else:
                state.entry = entry
        seen = {e.node_id for e in entries}
        for node_id in [n for n in self.nodes if n not in seen]:
            state = self.nodes.pop(node_id)
            if state.client is not None:  # forgotten by the cluster: close later
                task = asyncio.get_running_loop().create_task(state.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    async def _poll_node(self, state: NodeState) -> list[NodeEntry] | None:
        """One round trip to a node; its CLUSTER NODES, or None when it is down."""
        entry = state.entry
        try:
            if state.client is None:
                state.client = self._client(entry.host, entry.port)
            async with asyncio.timeout(self.timeout):
                pipe = state.client.pipeline(transaction=False)
                pipe.info("all")
                pipe.execute_command("CLUSTER", "NODES")
                pipe.execute_command("BLOOMCAST.HOTCHANNELS", "COUNT", HOT_PER_NODE)
                info, raw, hot = await pipe.execute(raise_on_error=False)
            if isinstance(info, Exception):
                raise info
            sample = Sample.from_info(time.monotonic(), info)
            state.hot = [] if isinstance(hot, Exception) else hot_rows(hot)
            state.hot_error = error_text(hot) if isinstance(hot, Exception) else ""
            lines = parse_cluster_nodes(_nodes_text(raw, info, entry.host, entry.port))
        except Exception as exc:  # whatever a node answers, the dashboard carries on
            state.error = error_text(exc)
            state.sample = None
            state.rates = None
            state.hot = []
            await state.close()  # a fresh connection next time
            return None
        state.rates = rates(state.sample, sample) if state.sample is not None else None
        state.sample = sample
        state.error = ""
        state.last_seen = time.time()
        state.links = [e for e in lines if not e.myself]
        return lines

    async def poll(self) -> None:
        """Poll every node at once, then refresh membership from the answers."""
        states = list(self.nodes.values())
        answers = await asyncio.gather(*(self._poll_node(s) for s in states))
        self.polls += 1
        totals = cluster_totals((s.sample, s.rates) for s in states)
        if totals["broadcast_per_s"] is not None:
            keys = ("publish_per_s", "forwards_per_s", "broadcast_per_s", "saving_percent")
            self.history.append({"t": round(time.time(), 3), **{k: totals[k] for k in keys}})
        by_id = {s.entry.node_id: a for s, a in zip(states, answers, strict=True)}
        await self._poll_hot(states)
        order = [self.seed_id, *sorted(by_id)]
        for node_id in order:
            lines = by_id.get(node_id)
            if lines:
                self._apply_view(lines, self.nodes[node_id].entry.address)
                return

    async def _poll_hot(self, states: list[NodeState]) -> None:
        """The channels view: the cluster-wide top and trending channels, from
        the joined node while it answers, else from the first node that did."""
        up = [s for s in states if s.up and s.client is not None]
        up.sort(key=lambda s: s.entry.node_id != self.seed_id)
        if not up:
            self.hot = {"from": "", "top": [], "trending": [], "error": "no node answers"}
            return
        state = up[0]
        assert state.client is not None
        cmd = ("BLOOMCAST.HOTCHANNELS", "CLUSTER", "COUNT", HOT_COUNT)
        try:
            async with asyncio.timeout(self.timeout + 1.0):  # peers have a second to answer
                pipe = state.client.pipeline(transaction=False)
                pipe.execute_command(*cmd)
                pipe.execute_command(*cmd, "TRENDING")
                top, rising = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # shown in the view; the next poll asks again
            await state.close()  # a reply may still be on its way: a fresh connection
            self.hot = {"from": state.entry.address, "top": [], "trending": [],
                        "error": error_text(exc)}  # fmt: skip
            return
        failed = next((r for r in (top, rising) if isinstance(r, Exception)), None)
        self.hot = {
            "from": state.entry.address,
            "top": [] if isinstance(top, Exception) else hot_rows(top),
            "trending": [] if isinstance(rising, Exception) else hot_rows(rising),
            "error": "" if failed is None else error_text(failed),
        }

    async def run(self, stop: asyncio.Event) -> None:
        """Poll every ``interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            started = time.monotonic()
            await self.poll()
            delay = max(0.05, self.interval - (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    async def close(self) -> None:
        for state in self.nodes.values():
            await state.close()

    # -- what /api/cluster serves ---------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        states = sorted(self.nodes.values(), key=lambda s: (s.entry.host, s.entry.port))
        return {
            "seed": f"{self.seed[0]}:{self.seed[1]}",
            "membership_from": self.view_from,
            "interval_s": self.interval,
            "polls": self.polls,
            "generated_at": time.time(),
            "cluster": cluster_totals((s.sample, s.rates) for s in states),
            "nodes": [self._node_json(s) for s in states],
            "history": list(self.history),
            "channels": self.hot,
        }

    def _node_json(self, state: NodeState) -> dict[str, Any]:
        entry, sample = state.entry, state.sample
        out: dict[str, Any] = {
            "id": entry.node_id,
            "address": entry.address,
            "bus_port": entry.bus_port,
            "seed": entry.node_id == self.seed_id,
            "up": sample is not None,
            "error": state.error,
            "flags": [f for f in entry.flags if f != "master"],
            "last_seen": state.last_seen,
            "hot": state.hot,
            "hot_error": state.hot_error,
            "links": [
                {
                    "peer": link.node_id,
                    "address": link.address,
                    "state": link.link_state,
                    "flags": [f for f in link.flags if f != "master"],
                }
                for link in state.links
            ],
        }
        if sample is None:
            return out
        g, c = sample.gauges, sample.counters
        out.update(
            {
                "cluster_state": sample.cluster_state,
                **{k: int(g.get(k, 0)) for k in ("clients", "pubsub_clients", "channels",
                                                 "patterns", "shard_channels", "memory_bytes",
                                                 "uptime_s", "known_nodes", "nodes_lost")},
                "links_up": sum(1 for link in state.links if link.link_state == "connected"),
                "links_total": len(state.links),
                "converged": bool(g.get("filters_converged", 0)),
                "filters": {
                    kind: {
                        "m": int(g.get(f"{kind}_filter_m", 0)),
                        "fill_ratio": g.get(f"{kind}_filter_fill", 0.0),
                        "fp_rate": g.get(f"{kind}_filter_fp", 0.0),
                    }
                    for kind in ("channel", "pattern")
                },
                **rates_json(state.rates),
                **{k: int(c.get(k, 0)) for k in ("publish", "false_positives", "forwards_lost",
                                                 "slow_consumer_disconnections", "suppressed")},
                "forwards_routed": int(sample.routed),
            }
        )  # fmt: skip
        return out


def _nodes_text(raw: Any, info: dict[str, Any], host: str, port: int) -> Any:
    """CLUSTER NODES as the node answered, or, from a standalone node (no bus:
    ``cluster support disabled``, as Redis), one ``myself`` line naming it by
    its INFO ``run_id``; any other error is raised."""
    if not isinstance(raw, Exception):
        return raw
    if "cluster support disabled" not in str(raw):
        raise raw
    return f"{info.get('run_id', '0' * 40)} {host}:{port}@0 myself,master - 0 0 0 connected\n"
