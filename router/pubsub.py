"""Pub/sub: the node's subscriber tables, PUBLISH (local delivery, then one
call to the cluster), the delivery of a PUBLISH a peer forwarded, the fan-out
and the end-of-turn flush, in one place, as Redis's ``src/pubsub.c``
(``publishCommand`` delivers locally, then one call to the cluster).

Every operation on the tables takes a kind (:mod:`router.kinds`, Redis's
``pubsubtype`` as descriptors): ``CHANNELS`` and ``SHARD_CHANNELS`` differ
only in their table here (``kind.slot``), their reply names, their message
frame, the count their confirmations carry and whether pattern subscribers
also receive; ``PATTERNS`` is kept in a :class:`PatternIndex`. The
(P|S)(UN)SUBSCRIBE commands' bulk work is :mod:`router.subscriptions`.

The first local subscriber of a name adds it to the node's filters, the last
one removes it (:mod:`router.registry`); a change goes down the cluster seam
(:meth:`PubSub.filters_changed`). :class:`PubSub` is the bus's
:class:`cluster_bus.api.LocalDelivery`: a forwarded PUBLISH is delivered as
a local one is, judged by the registry's false-positive policy, and never
forwarded again.

Output: a message is queued on each subscriber's connection; every queue is
written once per loop turn (:meth:`PubSub.flush_all`, Redis's
``handleClientsWithPendingWrites`` in ``beforeSleep``), sooner when the
turn's messages pass the pubsub hard limit.

Memory (issue 28): a name with one subscriber maps to that client, not to a
set of one (a set costs ~230 bytes and is one more object for the collector
to walk); two or more share a set.

Compiled on the compiled data plane (``router._pubsub``, declared in
``router/_pubsub.pxd``), where the message frames come from
``router/_resp.pyx``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import cython

from cluster_bus.api import FilterChange, NoPeers, merge_changes
from router import resp
from router.channel_table import MASK, ChannelTable
from router.kinds import CHANNELS, Kind, Subscriber
from router.pattern_index import PatternIndex
from router.resp import SMALL_INTEGERS

if not cython.compiled:  # (compiled: router/_pubsub.pxd cimports them, C frames)
    from time import monotonic as _monotonic

    from router.connection import add_messages
    from router.hotchannels import HotChannels
    from router.resp import message as _message
    from router.resp import smessage as _smessage

    def _compiled_forwarding(forward: Any) -> Any:
        """The compiled bus's ``Forwarding`` whose ``forward`` is ``forward``
        (``ClusterLink.forwarder()``), which the compiled PubSub calls in C;
        None on the pure-Python data plane, which calls ``forward`` (router/_pubsub.pxd)."""
        return None


if TYPE_CHECKING:
    from collections.abc import Callable

    from cluster_bus.api import ClusterLink, FilterName, FilterSnapshot, Publish
    from router.context import CommandClient, Reply
    from router.stats import InstantaneousMetrics
    from spark.events import Role, TrafficRecorder
if not cython.compiled and TYPE_CHECKING:  # (compiled: the .pxd cimports them)
    from router.context import CommandContext
    from router.registry import SubscriptionFilters
    from router.stats import NodeStats

log = logging.getLogger("bloomcast.node")

#: bytes of messages one loop turn queues before a publisher waits for the
#: next turn: the end-of-turn write copies them all (1,000 slow subscribers of
#: 10 KB messages: 10 MB a PUBLISH), as Redis writes at most 64 KB per
#: client per event-loop turn (``NET_MAX_WRITES_PER_EVENT``)
FANOUT_BYTES_PER_ITERATION = 8 << 20
#: where a node tells its clients that forwarded messages were lost for good
LOSS_CHANNEL = b"__bloomcast__:loss"
#: origins INFO ``# Forwards_lost`` counts one by one (node ids come and go:
#: each restart is a new one); the losses of any further origin are summed
#: under :data:`OTHER_ORIGINS` (``from_others``)
FORWARDS_LOST_ORIGINS = 256
OTHER_ORIGINS = "others"


@cython.final
@cython.cclass
class PubSub:
    """The pub/sub of one node (module doc); one asyncio loop.

    ``context`` (the node's :class:`router.context.CommandContext`, for the
    pubsub hard limit) is set by the node once it made it; ``link`` (the
    cluster seam) and ``tap`` (the traffic recorder) by whoever wires it."""

    def __init__(
        self,
        node_id: str,
        filters: SubscriptionFilters,
        stats: NodeStats,
        metrics: InstantaneousMetrics,
        link: ClusterLink,
        clients: dict[int, Any],
        on_publish_loss: str = "notify",
    ) -> None:
        self.node_id = node_id
        self.filters = filters
        self.stats = stats
        self.metrics = metrics
        self.link = link
        #: whether the link forwards at all (a node without a bus, NoPeers: no)
        self.forwards = type(link) is not NoPeers
        #: the link's forward_publish, looked up once (ClusterLink.forwarder),
        #: and on the compiled plane the compiled Forwarding it belongs to
        self._forward = link.forwarder()
        self._forwarding = _compiled_forwarding(self._forward)
        self.tap: TrafficRecorder | None = None
        #: what is hot now (issue 51, router/hotchannels.py): None when off
        self.hot: HotChannels | None = None
        self.clients = clients
        self.on_publish_loss = on_publish_loss
        self.context: CommandContext | None = None
        self.channels = ChannelTable()  # name -> client, or set of clients
        self.shard_channels = ChannelTable()
        self.tables = (self.channels, self.shard_channels)
        # each kind's shard list, for the one lookup on the PUBLISH path
        self._shards = (self.channels.shards, self.shard_channels.shards)
        self.patterns: PatternIndex[Subscriber] = PatternIndex()
        self._pattern_table = self.patterns.table  # (made once: read on each PUBLISH)
        filters.channel_names = self.channel_names
        #: the last PUBLISH's number here (a traffic event's id, the bus's origin_seq)
        self.publish_seq = 0
        #: bytes write_to_all queued since the last flush (bounded by the
        #: pubsub hard limit: past it every queue is written at once)
        self.iteration_output = 0
        #: :data:`FANOUT_BYTES_PER_ITERATION` (a test may set it)
        self.fanout_limit = FANOUT_BYTES_PER_ITERATION
        #: origin node id -> frames lost (at most FORWARDS_LOST_ORIGINS ids; the
        #: rest under OTHER_ORIGINS)
        self.forwards_lost_from: dict[str, int] = {}
        self._dirty: list[Any] = []  # clients with output queued this turn
        # the running loop's call_soon, looked up once: asyncio.get_running_loop() makes a
        # getpid() system call, and schedule_flush runs once per loop turn
        self._call_soon: Callable[..., object] | None = None
        self._flush_all_soon = self.flush_all  # (bound once: scheduled each loop turn)

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
            if self.patterns.add(name, client):
                return self.filters.pattern_added(name)
            return []
        # the name's shard of each table (ChannelTable.shard, in line: two
        # Python calls less a change on the compiled plane, issue 48)
        shard = hash(name) & MASK
        table = self._shards[kind.slot][shard]
        subs = table.get(name)
        if subs is None:
            table[name] = client
            if name in self._shards[kind.slot ^ 1][shard]:  # already in the filter
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
            if self.patterns.remove(name, client):
                return self.filters.pattern_removed(name)
            return []
        shard = hash(name) & MASK  # (as in add)
        table = self._shards[kind.slot][shard]
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
        if name in self._shards[kind.slot ^ 1][shard]:
            return []
        return self.filters.channel_removed(name)

    def count(self, kind: Kind, name: bytes) -> int:
        """Subscribers of ``name`` (PUBSUB NUMSUB / SHARDNUMSUB)."""
        subs = self.tables[kind.slot].get(name)
        return 0 if subs is None else len(subs) if type(subs) is set else 1

    def set_hot_channels(self, k: int, now: float) -> None:
        """``hot-channels-size``: a summary of ``k`` names per kind (0: off);
        a new size keeps the largest (:mod:`router.hotchannels`)."""
        if k <= 0:
            self.hot = None
        elif self.hot is None:
            self.hot = HotChannels(k, now)
        else:
            self.hot.resize(k)

    def set_link(self, link: ClusterLink) -> None:
        """The cluster seam from now on (:meth:`router.node.Node.set_link`)."""
        self.link = link
        self.forwards = type(link) is not NoPeers
        self._forward = link.forwarder()
        self._forwarding = _compiled_forwarding(self._forward)

    def filters_changed(self, changes: list[FilterChange]) -> asyncio.Future[None] | None:
        """Tell the cluster what one command (or a disconnect) changed, folded
        into at most one change per filter (the bus folds a loop turn's into
        one delta round); returns the link's visibility future, if any."""
        if not changes:
            return None
        return self.link.filters_changed(changes if len(changes) == 1 else merge_changes(changes))

    # ------------------------------------------------------------ publish

    def publish(self, channel: bytes, message: bytes, shard: bool) -> int:
        """A client's PUBLISH (``shard``: SPUBLISH): local delivery, then the
        cluster (the link forwards it to the peers whose filters may match),
        then the traffic event; returns the local receivers (Redis Cluster's
        reply)."""
        self.stats.publish_received += 1
        receivers = self.deliver_to(channel, message, shard)
        self.publish_seq += 1
        seq = self.publish_seq
        forwarded = 0
        if self.forwards:
            forwarding = self._forwarding
            if forwarding is not None:  # compiled: a C call of the compiled bus's forward
                forwarded = forwarding.forward(channel, message, shard, seq)
            else:
                forwarded = self._forward(channel, message, shard, seq)
        hot = self.hot
        if hot is not None:  # (router/hotchannels.py: the summary's one update)
            (hot.shards if shard else hot.channels).add(channel, len(message), receivers, forwarded)
        if self.tap is not None:
            self._record("origin", self.node_id, seq, channel, message, shard, receivers, forwarded)
        return receivers

    def publish_command(self, client: CommandClient, args: list[bytes], shard: bool) -> Reply:
        """PUBLISH (SPUBLISH: ``shard``) ``channel message`` from ``client``,
        its checks passed: the one function the command's handlers
        (:mod:`router.commands.publish`, through the command table and
        :func:`router.dispatch.execute`) and the request loop's in-line path
        (:func:`router.dispatch.process`) both run. The reply is the local
        receivers, an integer. A PUBLISH that takes the loop turn's queued
        messages past :attr:`fanout_limit` answers on the next turn (outside
        EXEC), so a pipeline of big messages to many subscribers is written a
        turn at a time (Redis bounds each client's writes per turn instead)."""
        receivers = self.publish(args[1], args[2], shard)
        reply = SMALL_INTEGERS[receivers] if receivers < 1024 else resp.integer(receivers)
        if self.iteration_output > self.fanout_limit and not client.in_exec:
            return self.after_iteration(reply)  # the rest of its pipeline next iteration
        return reply

    def deliver(self, kind: Kind, channel: bytes, message: bytes) -> int:
        """Write a message to this node's subscribers of ``channel`` of
        ``kind`` (:meth:`deliver_to`)."""
        return self.deliver_to(channel, message, kind.shard)

    def deliver_to(self, channel: bytes, message: bytes, shard: bool) -> int:
        """Write a message to this node's subscribers of ``channel`` (a shard
        channel: ``shard``; else then to those of the matching patterns:
        Redis's ``pubsubPublishMessage`` order); returns how many got it.
        Each frame is encoded once, nothing is encoded without a receiver."""
        table = self._shards[1 if shard else 0][hash(channel) & MASK]
        subs = table.get(channel)
        patterned = not shard and len(self._pattern_table) != 0
        if subs is None and not patterned:
            return 0
        n = 0
        if subs is not None:
            frame = _smessage(channel, message) if shard else _message(channel, message)
            n = self.write_to_all(subs, frame)
        if patterned:
            hot = self.hot
            for pattern, psubs in self.patterns.matches(channel):
                m = self.write_to_all(psubs, resp.pmessage(pattern, channel, message))
                n += m
                if hot is not None:
                    hot.matched(pattern, len(message), m)
        self.stats.messages_delivered += n
        return n

    def write_to_all(self, subs: Any, frame2: bytes) -> int:
        """Queue one pub/sub frame (RESP2 bytes; a RESP3 client gets it as a
        push) for ``subs``: one client, or a set of clients; returns how many.

        The fan-out loop is :func:`router.connection.add_messages`, the
        connections' module, which owns their queues (one call per message:
        a call per receiver was a fifth of the cost of a delivered message,
        ``bench.hot_path``, 10 subscribers); it appends the frame in line to
        a queue already due to be flushed this loop turn, without counting
        it in the client's queued bytes (that read-modify-write was a third
        of the loop). The loop's bytes are added once to
        :attr:`iteration_output` instead. No queue holds more than all of them
        together, so when that total passes the pubsub hard limit, every
        queue is written at once (:meth:`flush_all`), where its client's
        own count would have had it written (``write()``)."""
        n = add_messages(subs, frame2)
        self.iteration_output += n * len(frame2)
        context = self.context
        if context is not None and self.iteration_output > context.queue_limit:
            self.flush_all()  # the pubsub hard limit (none: sys.maxsize)
        return n

    def after_iteration(self, reply: bytes) -> asyncio.Future[bytes]:
        """``reply`` once this iteration's output is written: a PUBLISH whose
        messages took the iteration past :attr:`fanout_limit` holds its client's
        next commands (a blocked client) until then."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()
        loop.call_soon(_resolve, done, reply)  # after the flush scheduled before it
        return done

    def after(self, future: asyncio.Future[Any], reply: bytes) -> asyncio.Future[bytes]:
        """A future of ``reply`` that resolves once ``future`` has, however it ends."""
        done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def finish(ended: asyncio.Future[Any]) -> None:
            if not ended.cancelled():
                ended.exception()  # retrieved: a failed wait still confirms
            if not done.done():
                done.set_result(reply)

        future.add_done_callback(finish)
        return done

    # ------------------------------------------------------------ the end of a loop turn

    def schedule_flush(self, client: Any) -> None:
        """Flush ``client``'s queued output at the end of this loop turn."""
        if not self._dirty:
            call_soon = self._call_soon
            try:
                if call_soon is None:
                    raise RuntimeError("no loop yet")
                call_soon(self._flush_all_soon)
            except RuntimeError:  # none yet, or the loop closed (another test's)
                self._call_soon = call_soon = asyncio.get_running_loop().call_soon
                call_soon(self._flush_all_soon)
        self._dirty.append(client)

    def flush_all(self) -> None:
        """Write every queued client's output: at the end of a loop turn, or
        sooner when the turn's output passed the pubsub hard limit; then
        INFO's metrics, when a 100 ms period passed. Timed (a ``fanout-turn``
        event) only while the latency monitor is on."""
        context = self.context
        threshold = context.latency_ms if context is not None else 0
        start = time.perf_counter_ns() if threshold else 0
        dirty = self._dirty
        self._dirty = []
        self.iteration_output = 0
        for client in dirty:
            client.flush()
        if threshold:  # the latency monitor's fanout-turn (router/latency.py)
            self._latency_event("fanout-turn", start)
        if _monotonic() >= self.metrics.next_sample:
            self.sample_metrics()

    def _latency_event(self, name: str, start: int) -> None:
        """An event of the latency monitor that began at ``start``
        (``perf_counter_ns``) and ends now."""
        context = self.context
        if context is not None:
            context.hooks.event(context, name, (time.perf_counter_ns() - start) / 1e6)

    def sample_metrics(self) -> None:
        """INFO's instantaneous metrics, sampled lazily (:mod:`router.stats`)."""
        stats = self.stats
        self.metrics.sample(
            time.monotonic(),
            (stats.commands_processed, stats.net_input_bytes, stats.net_output_bytes),
        )

    # ------------------------------------------------------------ from the cluster (LocalDelivery)

    def deliver_forwarded(
        self, origin: str, origin_seq: int, channel: bytes, message: bytes, shard: bool
    ) -> None:
        """A PUBLISH a peer forwarded: deliver it, never forward it again. No
        receiver makes it a false positive of our filter, which the
        registry's resize policy judges; a rebuilt filter is announced."""
        receivers = self.deliver_to(channel, message, shard)
        hot = self.hot
        if hot is not None:
            (hot.shards if shard else hot.channels).add_received(channel, receivers)
        changes = self.filters.forward_received(receivers == 0)
        if changes:
            self.link.filters_changed(changes)
        if self.tap is not None:
            self._record("receiver", origin, origin_seq, channel, message, shard, receivers, 0)

    def deliver_forwarded_run(self, origin: str, msgs: list[Publish], count: int) -> None:
        """The first ``count`` of a run of PUBLISH frames ``origin`` forwarded,
        each delivered as :meth:`deliver_forwarded` does; timed (a
        ``bus-forward-run`` event) only while the latency monitor is on."""
        context = self.context
        threshold = context.latency_ms if context is not None else 0
        start = time.perf_counter_ns() if threshold else 0
        for i in range(count):
            msg = msgs[i]
            # a Publish is a tuple: compiled, unpacked in C
            frame = cython.cast(tuple, msg) if isinstance(msg, tuple) else tuple(msg)
            _, origin_seq, shard, channel, payload = frame
            self.deliver_forwarded(origin, origin_seq, channel, payload, shard)
        if threshold:  # the latency monitor's bus-forward-run (router/latency.py)
            self._latency_event("bus-forward-run", start)

    def forwards_lost(self, origin: str, count: int, from_ms: int, to_ms: int) -> None:
        """``count`` forwards from ``origin`` are lost for good. Counted per
        origin (INFO), announced on ``__bloomcast__:loss`` to local
        subscribers (JSON: ``node``, ``lost``, and ``from`` / ``to``: seconds
        since the epoch, bounds on when ``origin`` received those PUBLISHes
        from its clients, as its replay buffer's stamps give them), and with
        ``--on-publish-loss disconnect`` every client subscribed to anything
        else is closed, so it resubscribes and knows it may have missed
        messages (redis/redis #122)."""
        self.stats.forwards_lost += count
        by_origin = self.forwards_lost_from
        if origin not in by_origin and len(by_origin) >= FORWARDS_LOST_ORIGINS:
            origin = OTHER_ORIGINS  # a churning cluster's ids do not grow the map
        by_origin[origin] = by_origin.get(origin, 0) + count
        note = {
            "node": origin,
            "lost": count,
            "from": round(from_ms / 1000, 3),
            "to": round(to_ms / 1000, 3),
        }
        self.deliver(CHANNELS, LOSS_CHANNEL, json.dumps(note, separators=(",", ":")).encode())
        if self.on_publish_loss != "disconnect":
            return
        for client in list(self.clients.values()):
            if (
                (client.channels.keys() - {LOSS_CHANNEL})
                or client.patterns
                or client.shard_channels
            ):
                self.stats.loss_disconnections += 1
                client.close_now()
        log.warning(
            "clients closed after a loss of %d forwards (on-publish-loss disconnect)", count
        )

    def filter_snapshot(self, name: FilterName) -> FilterSnapshot:
        """One of our filters whole (the bus sends it as FILTER_FULL)."""
        return self.filters.snapshot(name)

    # ------------------------------------------------------------ traffic events

    def _record(
        self,
        role: Role,
        origin: str,
        origin_seq: int,
        channel: bytes,
        message: bytes,
        shard: bool,
        receivers: int,
        forwarded: int,
    ) -> None:
        """The traffic event of one PUBLISH this node handled (spark.events)."""
        tap = self.tap
        event_id = f"{origin}-{origin_seq}"
        if tap is None or not tap.keeps(event_id):
            return
        # imported here: only a node with a tap records (and its tap, in
        # spark.tap, has imported the module already); ~0.45 MB on every other node
        from spark.events import TrafficEvent, channel_text

        tap.record(
            TrafficEvent(
                event_id=event_id,
                time=time.time(),
                node=self.node_id,
                role=role,
                channel=channel_text(channel),
                bytes=len(message),
                receivers=receivers,
                forwarded=forwarded,
                peers=self.link.peer_count(),
                false_positive=role == "receiver" and receivers == 0,
                shard=shard,
            )
        )


def _resolve(future: asyncio.Future[bytes], reply: bytes) -> None:
    if not future.done():  # (cancelled: its client went away)
        future.set_result(reply)
