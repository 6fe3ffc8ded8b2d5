"""Pub/sub: the node's subscriptions, the pattern index, delivery and fan-out,
in one place, as Redis's ``src/pubsub.c``.

Every operation takes a kind (:mod:`router.kinds`, Redis's ``pubsubtype``
as descriptors): ``CHANNELS`` and ``SHARD_CHANNELS`` differ only in their
table here (``kind.slot``), their reply names, their message frame, the count
their confirmations carry and whether pattern subscribers also receive;
``PATTERNS`` is kept in a :class:`PatternIndex`.

Redis's rules (7.0.15): one confirmation per argument, ``[kind, name, count]``
where count is the client's channels + patterns (shard channels counted apart);
a bare unsubscribe walks the client's names of that kind, or replies
``[kind, nil, count]`` when it has none; the first local subscriber of a
name adds it to the node's filters, the last one removes it
(:mod:`router.registry`).

Every bulk operation (a (P|S)(UN)SUBSCRIBE of many names, bare or not, a
gone client's cleanup, RESET) runs under the node's shared per-loop-turn
:class:`Budget`; one :class:`Bulk` job does all of them, and there is one
unsubscribe-all (:meth:`PubSub.drop`).

Memory (issue 28): a name with one subscriber maps to that client, not to a
set of one (a set costs ~230 bytes and is one more object for the collector
to walk); two or more share a set.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from cluster_bus.api import FilterChange
from router import resp
from router.budget import OPS_PER_TURN, Budget, Work
from router.channel_table import MASK, ChannelTable
from router.kinds import (
    ALL_KINDS,
    PATTERN_WEIGHT,
    Kind,
    Subscriber,
    weight,
)
from router.pattern_index import PatternIndex

if TYPE_CHECKING:
    from router.connection import Connection
    from router.node import Node
    from router.registry import Registry

Reply = bytes | asyncio.Future[bytes]


#: bytes of messages one loop turn queues before a publisher waits for the
#: next turn: the end-of-turn write copies them all (1,000 slow subscribers of
#: 10 KB messages: 10 MB a PUBLISH), as Redis writes at most 64 KB per
#: client per event-loop turn (``NET_MAX_WRITES_PER_EVENT``)
FANOUT_BYTES_PER_TURN = 8 << 20


class PubSub:
    """The subscriptions of one node and their delivery; one asyncio loop."""

    __slots__ = (
        "_gone",
        "_shards",
        "after",
        "budget",
        "channels",
        "filters",
        "filters_changed",
        "node",
        "patterns",
        "publish",
        "shard_channels",
        "tables",
    )

    def __init__(self, node: Node, filters: Registry) -> None:
        self.node = node
        self.filters = filters
        self.channels = ChannelTable()  # name -> client, or set of clients
        self.shard_channels = ChannelTable()
        self.tables = (self.channels, self.shard_channels)
        # each kind's shard list, for the one lookup on the PUBLISH path
        self._shards = (self.channels.shards, self.shard_channels.shards)
        self.patterns: PatternIndex[Connection] = PatternIndex()
        self.budget = Budget()
        self._gone = _Gone(self)
        filters.channel_names = self.channel_names
        # what commands reach through their context (router/context.py), bound
        # once: no call of ours between a PUBLISH handler and the node's code
        self.publish = node.publish  # (channel, message, kind) -> receivers
        self.filters_changed = node.filters_changed
        self.after = node.after

    def tables_to_freeze(self) -> tuple[dict[bytes, Any], ...]:
        """The big tables, for :func:`router.collector.settle`."""
        return (*self.channels.shards, *self.shard_channels.shards, self.patterns.table)

    def channel_names(self) -> set[bytes]:
        """Every name in the channel filter (both channel kinds)."""
        return set(self.channels) | set(self.shard_channels)

    # ------------------------------------------------------------ one name

    def add(self, kind: Kind, client: Subscriber, name: bytes) -> list[FilterChange]:
        """Subscribe ``client`` to ``name``; the filter changes, if any."""
        own: dict[bytes, None] = getattr(client, kind.own)
        if name in own:
            return []
        own[name] = None
        if kind.slot == 2:
            if self.patterns.add(name, client):  # type: ignore[arg-type]
                return self.filters.pattern_added(name)
            return []
        table = self.tables[kind.slot].shard(name)
        subs = table.get(name)
        if subs is None:
            table[name] = client
            if name in self.tables[kind.slot ^ 1]:  # already in the filter
                return []
            return self.filters.channel_added(name)
        if type(subs) is set:
            subs.add(client)
        else:
            table[name] = {subs, client}
        return []

    def remove(self, kind: Kind, client: Subscriber, name: bytes) -> list[FilterChange]:
        """Unsubscribe ``client`` from ``name`` (already off its own set)."""
        if kind.slot == 2:
            if self.patterns.remove(name, client):  # type: ignore[arg-type]
                return self.filters.pattern_removed(name)
            return []
        table = self.tables[kind.slot].shard(name)
        subs = table.get(name)
        if subs is None:
            return []
        if type(subs) is set:
            subs.discard(client)
            if len(subs) == 1:
                table[name] = next(iter(subs))
            return []
        if subs is not client:
            return []
        del table[name]
        if name in self.tables[kind.slot ^ 1]:
            return []
        return self.filters.channel_removed(name)

    def count(self, kind: Kind, name: bytes) -> int:
        """Subscribers of ``name`` (PUBSUB NUMSUB / SHARDNUMSUB)."""
        subs = self.tables[kind.slot].get(name)
        return 0 if subs is None else len(subs) if type(subs) is set else 1

    # ------------------------------------------------------------ commands

    def subscribe(self, kind: Kind, client: Connection, names: list[bytes]) -> Reply:
        """(P|S)SUBSCRIBE: one confirmation per name, written once every
        announced filter change was acknowledged (subscribe visibility)."""
        return self.run(Bulk(self, client, (kind,), names, adding=True))

    def unsubscribe(self, kind: Kind, client: Connection, names: list[bytes]) -> Reply:
        """(P|S)UNSUBSCRIBE: the names given, or (none given) every name of
        ``kind`` the client has, or ``[kind, nil, count]`` when it has none."""
        if not names and not getattr(client, kind.own):
            return resp.confirmation(kind.unsubscribe, None, kind.count(client), client.resp)
        return self.run(Bulk(self, client, (kind,), names or None, adding=False))

    def drop(self, client: Connection) -> asyncio.Future[bytes] | None:
        """The one unsubscribe-all: every subscription of a client that went
        away or sent RESET, no confirmation; None when done at once (or, for
        a gone client, queued), else the future of its end.

        A gone client that does not fit in this turn's budget joins the
        queue of gone clients, one job for all of them: 10,000 connections
        closing at once cost a deque append each, nothing the collector
        tracks."""
        if client.closed:
            n = len(client.channels) + len(client.shard_channels)
            if not self.budget.admit(n + PATTERN_WEIGHT * len(client.patterns)):
                self._gone.add(client)
                return None
            Bulk(self, client, ALL_KINDS, None, adding=False, confirm=False).step(1 << 62)
            return None
        reply = self.run(Bulk(self, client, ALL_KINDS, None, adding=False, confirm=False))
        return None if type(reply) is bytes else cast("asyncio.Future[bytes]", reply)

    def run(self, job: Work) -> Reply:
        """Run ``job`` now if the loop turn's budget has room for it (or in
        EXEC, whose commands never wait), else queue it and return the
        future of its reply: the client waits, blocked, behind it."""
        if job.client.in_exec or self.budget.admit(job.weight):
            job.step(1 << 62)
            return job.reply if job.waits is None or job.client.in_exec else job.waited()
        self.budget.queue(job)
        if job.client.closed:  # a gone client's drop: nobody waits for it
            return b""
        job.future = asyncio.get_running_loop().create_future()
        return job.future

    # ------------------------------------------------------------ delivery

    def after_turn(self, reply: bytes) -> asyncio.Future[bytes]:
        """``reply`` once this turn's output is written: a PUBLISH whose
        messages took the turn past :data:`FANOUT_BYTES_PER_TURN` holds its
        client's next commands (a blocked client) until then."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()
        loop.call_soon(_resolve, done, reply)  # after the flush scheduled before it
        return done

    def deliver(self, kind: Kind, channel: bytes, message: bytes) -> int:
        """Write a message to this node's subscribers of ``channel`` (then,
        for CHANNELS, to those of the matching patterns: Redis's
        ``pubsubPublishMessage`` order); returns how many got it. Each frame
        is encoded once, nothing is encoded without a receiver."""
        subs = self._shards[kind.slot][hash(channel) & MASK].get(channel)
        patterned = kind.patterned and self.patterns.table
        if subs is None and not patterned:
            return 0
        node = self.node
        n = 0 if subs is None else write_to_all(node, subs, kind.frame(channel, message))
        if patterned:
            pmessage = resp.pmessage
            for pattern, psubs in self.patterns.matches(channel):
                n += write_to_all(node, psubs, pmessage(pattern, channel, message))
        node.stats.messages_delivered += n
        return n


class Bulk(Work):
    """Subscribe or unsubscribe one client to many names of some kinds:
    ``names`` given, or (None) every name of each kind the client has, taken
    off its dict one by one (``popitem``: O(1), no copy of a million names).
    A name costs its kind's weight plus one operation per KiB of it."""

    __slots__ = ("adding", "confirm", "kinds", "names", "pubsub")

    def __init__(
        self,
        pubsub: PubSub,
        client: Connection,
        kinds: Sequence[Kind],
        names: list[bytes] | None,
        adding: bool,
        confirm: bool = True,
    ) -> None:
        total = 0
        for kind in kinds:
            some = names if names is not None else getattr(client, kind.own)
            total += len(some) * weight(kind)
            if confirm and len(some) <= OPS_PER_TURN:  # (a bigger one is sliced anyway)
                total += sum(map(len, some)) >> 10
        super().__init__(pubsub.node, client, total)
        self.pubsub = pubsub
        self.kinds = list(kinds)
        if names is not None:
            names.reverse()  # taken with pop(): each name is freed once done
        self.names = names
        self.adding = adding
        self.confirm = confirm

    def step(self, ops: int) -> int:
        client = self.client
        if client.closed and self.confirm:  # the disconnect's own drop takes over
            self.finish()
            return 1
        changes: list[FilterChange] = []
        used = 0
        while self.kinds and used < ops:
            used += self._some(self.kinds[0], ops - used, changes)
        self._announce(changes)
        if not self.kinds:
            self.finish()
        return used

    def _some(self, kind: Kind, ops: int, changes: list[FilterChange]) -> int:
        """Names of ``kind`` for about ``ops`` operations; returns those used
        (at least one); drops the kind once it is done."""
        client = self.client
        pubsub = self.pubsub
        confirm = self.confirm
        name_b = kind.subscribe if self.adding else kind.unsubscribe
        count = kind.count
        version = client.resp
        cost = weight(kind)
        own: dict[bytes, None] = getattr(client, kind.own)
        names = self.names
        out: list[bytes] = []
        used = 0
        if names is None:  # bare: every name the client has, popped
            remove = pubsub.remove
            popitem = own.popitem
            while own and used < ops:
                name = popitem()[0]
                used += cost + (len(name) >> 10)
                changes += remove(kind, client, name)
                if confirm:
                    out.append(resp.confirmation(name_b, name, count(client), version))
            done = not own
        else:
            adding = self.adding
            pop = names.pop
            while names and used < ops:
                name = pop()
                used += cost + (len(name) >> 10)
                if adding:
                    changes += pubsub.add(kind, client, name)
                elif name in own:
                    del own[name]
                    changes += pubsub.remove(kind, client, name)
                out.append(resp.confirmation(name_b, name, count(client), version))
            done = not names
        self.parts.append(b"".join(out))  # one part per slice: a short list
        if done:
            self.kinds.pop(0)
        return max(used, 1)

    def _announce(self, changes: list[FilterChange]) -> None:
        """One announcement per slice: one delta round, one wait (subscribe
        visibility; unsubscribes never wait)."""
        wait = self.node.filters_changed(changes)
        if wait is not None and self.adding:
            if self.waits is None:
                self.waits = []
            self.waits.append(wait)


class _Gone:
    """The gone clients whose subscriptions are still to drop, one at a time
    (a :class:`router.budget.Job` while any is left)."""

    __slots__ = ("clients", "current", "done", "pubsub")

    def __init__(self, pubsub: PubSub) -> None:
        self.pubsub = pubsub
        self.clients: deque[Connection] = deque()
        self.current: Bulk | None = None
        self.done = True

    def add(self, client: Connection) -> None:
        self.clients.append(client)
        if self.done:
            self.done = False
            self.pubsub.budget.queue(self)

    def step(self, ops: int) -> int:
        used = 0
        while used < ops and (self.current is not None or self.clients):
            if self.current is None:
                client = self.clients.popleft()
                self.current = Bulk(self.pubsub, client, ALL_KINDS, None, False, confirm=False)
            used += self.current.step(ops - used)
            if self.current.done:
                self.current = None
        self.done = self.current is None and not self.clients
        return max(used, 1)


def _resolve(future: asyncio.Future[bytes], reply: bytes) -> None:
    if not future.done():  # (cancelled: its client went away)
        future.set_result(reply)


def write_to_all(node: Node, subs: Any, frame2: bytes) -> int:
    """Queue one pub/sub frame (RESP2 bytes; a RESP3 client gets it as a push)
    for ``subs``: one client, or a set of clients; returns how many.

    The fan-out loop. For a client whose queue already holds output this loop
    turn (so it is already due to be flushed), the frame is appended in line:
    the call per receiver was a fifth of the cost of a delivered message
    (``bench.hot_path``, 10 subscribers). Anything else (a first frame this
    turn, a held or closed client, a RESP3 client) goes through ``write()``.

    A frame appended in line is not added to its client's ``_out_bytes``:
    that read-modify-write of an int was a third of the loop. The loop's bytes
    are added once to ``node.turn_output`` instead. No queue holds more than
    all of them together, so when that total passes the pubsub hard limit,
    every queue is written at once (``node.flush_all``), where its client's
    own count would have had it written (``write()``)."""
    if type(subs) is not set:
        subs = (subs,)
    frame3: bytes | None = None
    for client in subs:
        if client.resp == 2:
            out = client._out
            if out and client.blocked is None and not client.closed:
                out.append(frame2)
            else:
                client.write(frame2)
        else:
            if frame3 is None:
                frame3 = resp.as_push(frame2)
            client.write(frame3)
    n = len(subs)
    queued = node.turn_output + n * len(frame2)
    node.turn_output = queued
    if queued > node.context.settings.queue_limit:  # the pubsub hard limit, or no limit
        node.flush_all()
    return n
