"""(P|S)(UN)SUBSCRIBE and the other bulk work of pub/sub, under the node's
shared per-loop-turn budget (:mod:`router.budget`).

Every bulk operation (a (P|S)(UN)SUBSCRIBE of many names, bare or not, a
gone client's cleanup, RESET, a PUBSUB listing) runs under the budget; one
:class:`Bulk` job does all of the subscription changes, and there is one
unsubscribe-all (:meth:`Subscriptions.drop`). What fits in the turn's budget
runs at once; a bigger job runs in slices over later turns, its client
blocked meanwhile (replies in order, later commands behind it). The tables
themselves and the filter changes are :class:`router.pubsub.PubSub`'s.

Redis's rules (7.0.15, ``src/pubsub.c``): one confirmation per argument,
``[kind, name, count]`` where count is the client's channels + patterns
(shard channels counted apart); a bare unsubscribe walks the client's names
of that kind, or replies ``[kind, nil, count]`` when it has none.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from router import resp
from router.budget import OPS_PER_TURN, Budget, Work
from router.kinds import ALL_KINDS, PATTERN_WEIGHT, PATTERNS, Kind, weight

if TYPE_CHECKING:
    from cluster_bus.api import FilterChange
    from router.context import CommandClient, Reply
    from router.pubsub import PubSub


class Subscriptions:
    """The bulk work of one node's pub/sub (module doc); one asyncio loop."""

    __slots__ = ("_gone", "budget", "confirming", "pubsub")

    def __init__(self, pubsub: PubSub, budget: Budget | None = None) -> None:
        self.pubsub = pubsub
        self.budget = budget if budget is not None else Budget()
        self._gone = _Gone(pubsub, self.budget)
        #: the last reply that awaits only subscribe visibility (its work is
        #: done, its bytes known): the request loop runs the pipeline's next
        #: (un)subscribes behind it, in the same announced batch
        #: (:func:`router.dispatch.process`)
        self.confirming: asyncio.Future[bytes] | None = None

    def subscribe(self, kind: Kind, client: CommandClient, names: list[bytes]) -> Reply:
        """(P|S)SUBSCRIBE: one confirmation per name, written once every
        announced filter change was acknowledged (subscribe visibility).

        One name that fits in the turn's budget (the common case: a client
        joining a room) is done here, as a :class:`Bulk` would do it, without
        making one (issue 48: a fifth of a SUBSCRIBE's instructions)."""
        if len(names) == 1:
            name = names[0]
            in_exec = client.in_exec
            cost = (PATTERN_WEIGHT if kind is PATTERNS else 1) + (len(name) >> 10)  # weight()
            if in_exec or self.budget.admit(cost):
                pubsub = self.pubsub
                wait = pubsub.filters_changed(pubsub.add(kind, client, name))
                reply = resp.confirmation(kind.subscribe, name, kind.count(client), client.resp)
                if wait is None or in_exec:
                    return reply
                future = self.confirming = pubsub.after(wait, reply)
                return future
        return self.run(Bulk(self.pubsub, client, (kind,), names, adding=True))

    def unsubscribe(self, kind: Kind, client: CommandClient, names: list[bytes]) -> Reply:
        """(P|S)UNSUBSCRIBE: the names given, or (none given) every name of
        ``kind`` the client has, or ``[kind, nil, count]`` when it has none
        (one name that fits in the turn's budget: done here, as
        :meth:`subscribe` does; an unsubscribe never waits)."""
        if len(names) == 1:
            name = names[0]
            cost = (PATTERN_WEIGHT if kind is PATTERNS else 1) + (len(name) >> 10)  # weight()
            if client.in_exec or self.budget.admit(cost):
                own: dict[bytes, None] = getattr(client, kind.own)
                if name in own:
                    del own[name]
                    pubsub = self.pubsub
                    pubsub.filters_changed(pubsub.remove(kind, client, name))
                return resp.confirmation(kind.unsubscribe, name, kind.count(client), client.resp)
        if not names and not getattr(client, kind.own):
            return resp.confirmation(kind.unsubscribe, None, kind.count(client), client.resp)
        return self.run(Bulk(self.pubsub, client, (kind,), names or None, adding=False))

    def after_all(self, replies: list[Reply]) -> asyncio.Future[bytes]:
        """The replies of a pipeline's run of (un)subscribes, from the first
        that waits (a future each, or bytes), as one reply: resolved, in
        their order, once every future is done (a cancelled or failed one
        adds nothing: its client is gone)."""
        done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        futures = [reply for reply in replies if type(reply) is not bytes]
        left = len(futures)

        def finish(_: asyncio.Future[bytes]) -> None:
            nonlocal left
            left -= 1
            if left or done.done():
                return
            parts: list[bytes] = []
            for reply in replies:
                if type(reply) is bytes:
                    parts.append(reply)
                else:
                    future = cast("asyncio.Future[bytes]", reply)
                    if not future.cancelled() and future.exception() is None:
                        parts.append(future.result())
            done.set_result(b"".join(parts))

        for future in futures:
            cast("asyncio.Future[bytes]", future).add_done_callback(finish)
        return done

    def drop(self, client: CommandClient) -> asyncio.Future[bytes] | None:
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
            Bulk(self.pubsub, client, ALL_KINDS, None, adding=False, confirm=False).step(1 << 62)
            return None
        reply = self.run(Bulk(self.pubsub, client, ALL_KINDS, None, adding=False, confirm=False))
        return None if type(reply) is bytes else cast("asyncio.Future[bytes]", reply)

    def run(self, job: Work) -> Reply:
        """Run ``job`` now if the loop turn's budget has room for it (or in
        EXEC, whose commands never wait), else queue it and return the
        future of its reply: the client waits, blocked, behind it."""
        if job.client.in_exec or self.budget.admit(job.weight):
            job.step(1 << 62)
            if job.waits is None or job.client.in_exec:
                return job.reply
            future = self.confirming = job.waited()
            return future
        self.budget.queue(job)
        if job.client.closed:  # a gone client's drop: nobody waits for it
            return b""
        job.future = asyncio.get_running_loop().create_future()
        return job.future


class Bulk(Work):
    """Subscribe or unsubscribe one client to many names of some kinds:
    ``names`` given, or (None) every name of each kind the client has, taken
    off its dict one by one (``popitem``: O(1), no copy of a million names).
    A name costs its kind's weight plus one operation per KiB of it."""

    __slots__ = ("adding", "confirm", "kinds", "names", "pubsub")

    client: CommandClient

    def __init__(
        self,
        pubsub: PubSub,
        client: CommandClient,
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
        super().__init__(pubsub.after, client, total)
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
        wait = self.pubsub.filters_changed(changes)
        if wait is not None and self.adding:
            if self.waits is None:
                self.waits = []
            self.waits.append(wait)


class _Gone:
    """The gone clients whose subscriptions are still to drop, one at a time
    (a :class:`router.budget.Job` while any is left)."""

    __slots__ = ("budget", "clients", "current", "done", "pubsub")

    def __init__(self, pubsub: PubSub, budget: Budget) -> None:
        self.pubsub = pubsub
        self.budget = budget
        self.clients: deque[CommandClient] = deque()
        self.current: Bulk | None = None
        self.done = True

    def add(self, client: CommandClient) -> None:
        self.clients.append(client)
        if self.done:
            self.done = False
            self.budget.queue(self)

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
