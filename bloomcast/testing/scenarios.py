"""One fault run: a numbered publisher on node A, subscribers on node B, a fault
in the middle, and the ledger's verdicts. Shared by tests/integration/test_faults.py
and ``bloomcast bench faults`` (bench/faults.py), so that the test's claim and
the benchmark's table come from the same code.

The protocol of a run (:class:`FaultRun`):

1. subscribers on B confirm (``SUBSCRIBE`` on :data:`CHANNEL`, ``PSUBSCRIBE``
   :data:`PATTERN`); the publisher starts on A at ``rate`` PUBLISH/s;
2. priming: every subscriber has received a message (so every cache on the
   path, routes and filters, is warm), and the window opens at the next number;
3. the caller applies its fault (:meth:`FaultRun.mark` reopens the window
   after a restart, :meth:`FaultRun.resubscribe` replaces dead subscribers);
4. publishing goes on for ``after`` seconds, stops, subscribers drain, and
   :meth:`FaultRun.verdicts` gives one :class:`Verdict` per live subscriber.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bloomcast.testing.ledger import Ledger, Publisher, Subscriber, Verdict

CHANNEL = "faults:c"
PATTERN = "faults:*"

#: node flags of every fault run: a short node timeout (faults past it are
#: seen as failures within seconds) and subscribe visibility (a SUBSCRIBE's
#: confirmation means every live peer routes the channel there already)
NODE_ARGS = ("--node-timeout-ms", "2000", "--subscribe-visibility-timeout", "3000")

Address = tuple[str, int]


@dataclass
class FaultRun:
    """Publisher at ``pub`` (node A), subscribers at ``sub`` (node B)."""

    pub: Address
    sub: Address
    rate: float = 300.0
    netns: str | None = None
    extra_channels: tuple[str, ...] = ()  # e.g. the loss channel: a third subscriber
    ledger: Ledger = field(init=False)
    first: int = 0
    last: int = 0
    current: list[str] = field(default_factory=list)  # this generation's numbered subscribers
    _generation: int = 0

    def __post_init__(self) -> None:
        self.ledger = Ledger(Publisher(self.pub, CHANNEL, rate=self.rate, netns=self.netns))

    def _subscribe(self) -> None:
        g = f"{self._generation}" if self._generation else ""
        ns = self.netns
        self.current = [f"channel{g}", f"pattern{g}"]
        self.ledger.add(Subscriber(f"channel{g}", self.sub, channels=(CHANNEL,), netns=ns).start())
        self.ledger.add(Subscriber(f"pattern{g}", self.sub, patterns=(PATTERN,), netns=ns).start())
        if self.extra_channels:
            self.ledger.add(
                Subscriber(f"extra{g}", self.sub, channels=self.extra_channels, netns=ns).start()
            )

    def start(self, prime_timeout: float = 20.0) -> None:
        """Subscribe, publish, wait until every subscriber got a message, open the window."""
        self._subscribe()
        self.ledger.publisher.start()
        self._prime(prime_timeout)

    def _prime(self, timeout: float) -> None:
        pub = self.ledger.publisher.name
        deadline = time.monotonic() + timeout
        subs = self.live_subscribers(numbered=True)
        while not all(s.numbers(pub) for s in subs):
            if time.monotonic() > deadline:
                raise TimeoutError(f"priming: no message reached {[s.name for s in subs]}")
            time.sleep(0.02)
        self.mark()

    def mark(self) -> None:
        """Open the window at the next number to be published."""
        self.first = self.ledger.publisher.published + 1

    def resubscribe(self, prime_timeout: float = 20.0) -> None:
        """New subscribers on B (the old ones died with their node), confirmed;
        the window opens at the next number after the confirmation."""
        self._generation += 1
        self._subscribe()
        self.mark()
        self._prime_new(prime_timeout)

    def _prime_new(self, timeout: float) -> None:
        self.ledger.publisher.wait_published(self.first + 1, timeout)

    def live_subscribers(self, numbered: bool = False) -> list[Subscriber]:
        """The subscribers still connected (``numbered``: those of the publisher's channel)."""
        return [
            s
            for s in self.ledger.subscribers.values()
            if not s.closed and not (numbered and s.name.startswith("extra"))
        ]

    def publish_for(self, seconds: float) -> None:
        time.sleep(seconds)

    def finish(self, after: float = 1.5, drain_timeout: float = 20.0) -> None:
        """Publish ``after`` more seconds, stop, and let the subscribers drain."""
        time.sleep(after)
        self.last = self.ledger.publisher.stop()
        names = [s.name for s in self.live_subscribers(numbered=True)]
        self.ledger.drain(self.last, drain_timeout, names)

    def verdicts(self) -> dict[str, Verdict]:
        """Each live numbered subscriber's verdict over the window ``first..last``
        (a subscriber made after the window opened counts from its own start)."""
        return {
            s.name: self.ledger.verdict(s.name, self.first, self.last)
            for s in self.live_subscribers(numbered=True)
            if s.name in self.current
        }

    def stop(self) -> None:
        self.ledger.publisher.stop()
        for sub in self.ledger.subscribers.values():
            sub.stop()
