"""Settings: the node's live settings, one immutable object (``@dataclass(frozen)``).

The settings CONFIG SET may change while the node runs live here, not in
:class:`router.config.NodeConfig` (the startup settings: flags and TOML,
read once). CONFIG SET builds a new :class:`Settings` with
:func:`dataclasses.replace` and swaps it in whole
(:meth:`router.context.CommandContext.swap_settings`), so a reader sees one
consistent set and nothing is kept in step by hand: the pub/sub output limit
is read from ``output_limits`` only (:attr:`Settings.pubsub_limits`).

Each setting is Redis 7.0.15's (``src/config.c``), with its default:

- ``maxclients`` (10000), ``client-output-buffer-limit`` (``normal 0 0 0
  slave 268435456 67108864 60 pubsub 33554432 8388608 60``; the node holds
  its subscribers to the ``pubsub`` class and its other clients to the
  ``normal`` one, no limit by default; ``slave`` is shown only),
  ``notify-keyspace-events`` (stored only), ``requirepass``, ``protected-mode``;
- ``timeout`` (0: never): a client idle for more than this many seconds is
  closed, pub/sub and blocked clients excepted (``clientsCronHandleTimeout``);
- ``tcp-keepalive`` (300): SO_KEEPALIVE on each new connection, first probe
  after that many seconds idle (``anetKeepAlive``; 0: off);
- ``slowlog-log-slower-than`` (10000 us; -1: off), ``slowlog-max-len`` (128),
  ``latency-monitor-threshold`` (0 ms: off): :mod:`router.hooks`;
- ``hot-channels-size`` (bloomcast's, 128; 0: off): the names each
  hot-channels summary holds (:mod:`router.hotchannels`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from router.config import NodeConfig

#: class -> (hard bytes, soft bytes, soft seconds), in Redis's order
OutputLimits = tuple[tuple[str, tuple[int, int, int]], ...]

#: redis.conf's ``normal`` and ``slave`` classes (``slave`` is shown only)
NORMAL_LIMITS = (0, 0, 0)
SLAVE_LIMITS = (268435456, 67108864, 60)


@dataclass(frozen=True, slots=True)
class Settings:
    """One consistent set of the live settings; replaced whole, never changed."""

    maxclients: int = 10000
    output_limits: OutputLimits = (
        ("normal", NORMAL_LIMITS),
        ("slave", SLAVE_LIMITS),
        ("pubsub", (32 * 1024 * 1024, 8 * 1024 * 1024, 60)),
    )
    notify_keyspace_events: int = 0
    requirepass: str | None = None
    protected_mode: bool = True
    timeout: int = 0
    tcp_keepalive: int = 300
    #: the slow log's threshold (microseconds; -1: off) and length, and the
    #: latency monitor's threshold (milliseconds; 0: off): router/hooks.py
    slowlog_log_slower_than: int = 10000
    slowlog_max_len: int = 128
    latency_monitor_threshold: int = 0
    #: names each hot-channels summary holds (0: off): router/hotchannels.py
    hot_channels_size: int = 128
    #: the pubsub class's (hard, soft, seconds): derived from ``output_limits``
    pubsub_limits: tuple[int, int, int] = field(init=False, repr=False, compare=False)
    #: queued bytes that write a client's queue at once: the pubsub hard
    #: limit, or no bound (``sys.maxsize``) when it is 0
    queue_limit: int = field(init=False, repr=False, compare=False)
    #: the normal class's (hard, soft, seconds), and whether it limits at all
    #: (the flush of a normal client reads the flag only)
    normal_limits: tuple[int, int, int] = field(init=False, repr=False, compare=False)
    normal_limited: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        limits = dict(self.output_limits)
        pubsub, normal = limits["pubsub"], limits["normal"]
        object.__setattr__(self, "pubsub_limits", pubsub)
        object.__setattr__(self, "queue_limit", pubsub[0] or sys.maxsize)
        object.__setattr__(self, "normal_limits", normal)
        object.__setattr__(self, "normal_limited", bool(normal[0] or normal[1]))

    @classmethod
    def from_config(cls, config: NodeConfig) -> Settings:
        """The settings a node starts with: its flags and TOML file."""
        pubsub = (config.pubsub_hard_limit, config.pubsub_soft_limit, config.pubsub_soft_seconds)
        return cls(
            maxclients=config.maxclients,
            output_limits=(("normal", NORMAL_LIMITS), ("slave", SLAVE_LIMITS), ("pubsub", pubsub)),
            requirepass=config.requirepass,
            protected_mode=config.protected_mode,
            timeout=config.timeout,
            tcp_keepalive=config.tcp_keepalive,
            slowlog_log_slower_than=config.slowlog_log_slower_than,
            slowlog_max_len=config.slowlog_max_len,
            latency_monitor_threshold=config.latency_monitor_threshold,
            hot_channels_size=config.hot_channels_size,
        )
