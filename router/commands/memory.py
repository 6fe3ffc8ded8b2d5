"""MEMORY STATS | USAGE | DOCTOR | HELP (Redis 7.0.15 ``memoryCommand`` in
``src/object.c``): where a node's memory is, in Redis's reply shapes.

A node has no allocator total as cheap as Redis's ``zmalloc_used_memory``
(INFO says ``mem_allocator:pymalloc``), so, as in INFO, the process's
resident set stands for what Redis calls allocated:

- MEMORY STATS: Redis's 27 fields in Redis's order (a node holds no keys:
  no ``db.<n>`` map, as an empty Redis), with ``total.allocated`` = the RSS,
  ``peak.allocated`` = the peak RSS, ``startup.allocated`` = the RSS when
  the node was built, ``clients.normal`` = the clients' output (queued and
  in their sockets' buffers), ``cluster.links`` = the bus links' send
  buffers, the allocator's and fragmentation fields as no fragmentation
  measured (ratio 1, 0 bytes); then the node's own fields: the number of
  channels, shard channels and patterns subscribed, the bytes of the
  subscriber tables' hash tables (``pubsub.tables.bytes``: the tables
  themselves, not the names or the client sets), the bus's replay buffers
  (``cluster.replay-buffers``) and the local Bloom filters' bits
  (``filters.bytes``: m/8 each).
- MEMORY USAGE <key> [SAMPLES <count>]: a node has no keys: a channel name
  answers as a key Redis does not have (nil), after Redis's checks of the
  options.
- MEMORY DOCTOR: Redis's report, its checks applied to those numbers (the
  "empty" test on what the node allocated since it was built, so a fresh
  node is empty as a fresh Redis is).

- MEMORY MALLOC-STATS: what a Redis built without jemalloc answers;
  MEMORY PURGE: glibc's ``malloc_trim`` (:func:`router.allocator.purge`), OK.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from router import allocator, resp
from router.commands.base import Command, Reply, subcommand_table
from router.commands.diagnostics import help_reply
from router.parser import string2ll

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext

_SYNTAX = resp.error("ERR syntax error")
_NOT_INTEGER = resp.error("ERR value is not an integer or out of range")


def memory_usage(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    j = 3
    while j < len(args):
        if args[j].lower() == b"samples" and j + 1 < len(args):
            samples = string2ll(args[j + 1])
            if samples is None:
                return _NOT_INTEGER
            if samples < 0:
                return _SYNTAX
            j += 2
        else:
            return _SYNTAX
    return resp.null(client.resp)


def overhead(ctx: CommandContext) -> dict[str, Any]:
    """Redis's ``getMemoryOverheadData`` for a node (module doc), then the
    node's own fields."""
    view = ctx.view
    total, peak = view.rss()
    startup = view.startup_rss
    clients = sum(c.output_buffer_size() + c.queued_bytes() for c in ctx.clients.values())
    links = sum(link.send_buffer_allocated for link in ctx.link.links())
    over = startup + clients + links
    dataset = max(total - over, 0)
    net = total - startup if total > startup else 1
    pubsub: Any = ctx.pubsub
    channels, shard_channels = ctx.pubsub.tables
    tables = sum(sys.getsizeof(shard) for t in (channels, shard_channels) for shard in t.shards)
    filters = ctx.pubsub.filters.filter_info()  # type: ignore[attr-defined]
    replay = ctx.link.info_fields().get("cluster_replay_buffer_bytes", 0)
    return {
        "peak.allocated": peak,
        "total.allocated": total,
        "startup.allocated": startup,
        "replication.backlog": 0,
        "clients.slaves": 0,
        "clients.normal": clients,
        "cluster.links": links,
        "aof.buffer": 0,
        "lua.caches": 0,
        "functions.caches": 0,
        "overhead.total": over,
        "keys.count": 0,
        "keys.bytes-per-key": 0,
        "dataset.bytes": dataset,
        "dataset.percentage": dataset * 100 / net,
        "peak.percentage": total * 100 / peak,
        "allocator.allocated": total,
        "allocator.active": total,
        "allocator.resident": total,
        "allocator-fragmentation.ratio": 1.0,
        "allocator-fragmentation.bytes": 0,
        "allocator-rss.ratio": 1.0,
        "allocator-rss.bytes": 0,
        "rss-overhead.ratio": 1.0,
        "rss-overhead.bytes": 0,
        "fragmentation": 1.0,
        "fragmentation.bytes": 0,
        # the node's own
        "pubsub.channels": len(channels),
        "pubsub.shard-channels": len(shard_channels),
        "pubsub.patterns": len(pubsub.patterns),
        "pubsub.tables.bytes": tables,
        "cluster.replay-buffers": int(replay),
        "filters.bytes": sum(int(v) for k, v in filters.items() if k.endswith("_filter_m")) // 8,
    }


def memory_stats(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.encode_value(overhead(ctx), client.resp)


_DOCTOR_OK = (
    "Hi Sam, I can't find any memory issue in your instance. "
    "I can only account for what occurs on this base.\n"
)
_DOCTOR_EMPTY = (
    "Hi Sam, this instance is empty or is using very little memory, "
    "my issues detector can't be used in these conditions. "
    "Please, leave for your mission on Earth and fill it with some data. "
    "The new Sam and I will be back to our programming as soon as I "
    "finished rebooting.\n"
)
_BIG_PEAK = (
    " * Peak memory: In the past this instance used more than 150% the memory that is "
    "currently using. The allocator is normally not able to release memory after a peak, so "
    "you can expect to see a big fragmentation ratio, however this is actually harmless and "
    "is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is "
    "currently bigger than expected, the memory will be used as soon as you fill the Redis "
    "instance with more data. If the memory peak was only occasional and you want to try to "
    "reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is "
    "to shutdown and restart the instance.\n\n"
)
_BIG_CLIENT_BUF = (
    " * Big client buffers: The clients output buffers in this instance are greater than 200K "
    "per client (on average). This may result from different causes, like Pub/Sub clients "
    "subscribed to channels bot not receiving data fast enough, so that data piles on the "
    "Redis instance output buffer, or clients sending commands with large replies or very "
    "large sequences of commands in the same pipeline. Please use the CLIENT LIST command in "
    "order to investigate the issue if it causes problems in your instance, or to understand "
    "better why certain clients are using a big amount of memory.\n\n"
)


def doctor_report(mh: dict[str, Any], clients: int) -> str:
    """``getMemoryDoctorReport``: the checks that apply to a node (module doc)."""
    if mh["total.allocated"] - mh["startup.allocated"] < 5 * 1024 * 1024:
        return _DOCTOR_EMPTY
    issues = []
    if mh["peak.allocated"] / mh["total.allocated"] > 1.5:
        issues.append(_BIG_PEAK)
    if clients and mh["clients.normal"] // clients > 200 * 1024:
        issues.append(_BIG_CLIENT_BUF)
    if not issues:
        return _DOCTOR_OK
    return (
        "Sam, I detected a few issues in this Redis instance memory implants:\n\n"
        + "".join(issues)
        + "I'm here to keep you safe, Sam. I want to help you.\n"
    )


def memory_doctor(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    report = doctor_report(overhead(ctx), len(ctx.clients))
    return resp.verbatim(report.encode(), client.resp)


_HELP = (
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
)


def memory_help(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return help_reply(args, _HELP)


def memory_malloc_stats(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """Redis built without jemalloc answers this (the node's is pymalloc)."""
    return resp.bulk(b"Stats not supported for the current allocator")


def memory_purge(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    allocator.purge()
    return resp.OK


def _container(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    raise AssertionError("always a subcommand")


def _sub(name: str, arity: int, handler: Any, summary: str) -> Command:
    return Command(f"memory|{name}", arity, handler, summary, "server")


COMMANDS = (
    Command(
        "memory",
        -2,
        _container,
        "A container for memory diagnostics commands.",
        "server",
        subcommands=subcommand_table(
            _sub("doctor", 2, memory_doctor, "Outputs a memory problems report."),
            _sub("help", 2, memory_help, "Returns helpful text about the different subcommands."),
            _sub("malloc-stats", 2, memory_malloc_stats, "Returns the allocator statistics."),
            _sub("purge", 2, memory_purge, "Asks the allocator to release memory."),
            _sub("stats", 2, memory_stats, "Returns details about memory usage."),
            _sub("usage", -3, memory_usage, "Estimates the memory usage of a key."),
        ),
    ),
)
