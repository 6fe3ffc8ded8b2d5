"""INFO: Redis 7's sections and field names wherever the concept exists on a
node, then bloomcast's own sections.

Redis's ``genRedisInfoString`` (``src/server.c``) is the model: ``server``,
``clients``, ``memory``, ``persistence``, ``stats``, ``replication``,
``cpu``, ``modules``, ``commandstats`` (not a default section),
``errorstats``, ``cluster``, ``keyspace``, in that order, so dashboards and
redis_exporter find the fields they know (``used_memory``,
``used_cpu_sys``, ``total_net_input_bytes``, ``role``, ...). A pub/sub node
holds no keys and persists nothing: those fields are zero and ``# Keyspace``
is empty, as on an empty Redis. Memory is the process's resident set
(``/proc/self/statm``): Python has no allocator total as cheap as Redis's
``zmalloc_used_memory``, so ``used_memory`` is the RSS too (said in the
field ``mem_allocator:pymalloc``). bloomcast's own: ``# Filters``,
``# Forwards_lost``, ``# Traffic``.
"""

from __future__ import annotations

import binascii
import os
import re
import resource
import sys
import time
from typing import TYPE_CHECKING

from netutil.dataplane import python_modules_loaded
from router.allocator import rss_bytes
from router.identity import BLOOMCAST_VERSION, REDIS_VERSION

if TYPE_CHECKING:
    from router.node import Node

Section = dict[str, int | str]

#: the server section's ``os`` (platform.uname without importing platform)
_UNAME = os.uname()
#: Redis's build id is a hash of its build; here of what runs the node
_BUILD_ID = f"{binascii.crc32(f'bloomcast {BLOOMCAST_VERSION} {sys.version}'.encode()):x}"
#: the compiler of the interpreter (Redis shows its own GCC's, 0.0.0 if none)
_GCC = re.search(r"\[GCC (\d+\.\d+\.\d+)", sys.version)
_GCC_VERSION = _GCC.group(1) if _GCC else "0.0.0"
#: how often the node's periodic work runs (INFO's instantaneous metrics are
#: sampled every 100 ms), Redis's ``hz``
_HZ = 10
#: Redis's LRU clock: seconds, 24 bits (LRU_CLOCK_MAX, LRU_CLOCK_RESOLUTION 1000 ms)
_LRU_CLOCK_MAX = (1 << 24) - 1


def _human(n: int) -> str:
    """Redis's ``bytesToHuman``: B, K, M, G with two decimals."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


def info_sections(node: Node) -> dict[str, Section]:
    """Every INFO section of ``node``, in Redis's order, then bloomcast's."""
    stats, registry = node.stats, node.registry
    now = time.time()
    cluster = node.cluster_info()
    node.sample_metrics()
    cluster_enabled = node.context.cluster_enabled
    sections: dict[str, Section] = {
        "server": _server(node, now),
        "clients": _clients(node, cluster),
        "memory": _memory(),
        "persistence": {
            "loading": 0,
            "rdb_changes_since_last_save": 0,
            "rdb_bgsave_in_progress": 0,
            "rdb_last_bgsave_status": "ok",
            "aof_enabled": 0,
            "aof_rewrite_in_progress": 0,
        },
        "stats": _stats(node),
        "replication": {
            "role": "master",
            "connected_slaves": 0,
            "master_failover_state": "no-failover",
            "master_replid": node.node_id,
            "master_repl_offset": 0,
        },
        "cpu": _cpu(),
        "modules": {},
        "commandstats": {
            f"cmdstat_{name}": stat.info() for name, stat in sorted(stats.commands.items())
        },
        "errorstats": {
            f"errorstat_{prefix}": f"count={n}" for prefix, n in sorted(stats.errors.items())
        },
        # a standalone Redis shows cluster_enabled:0 alone; a bus adds CLUSTER INFO's
        "cluster": {"cluster_enabled": 1, **cluster} if cluster_enabled else {"cluster_enabled": 0},
        "keyspace": {},
        "filters": dict(registry.filter_info()),
        "collector": {
            **node.gc_pauses.info_fields(),
            "pubsub_jobs": node.subscriptions.budget.pending,
        },
        # which data plane serves this node (issue 29, router/dataplane.py), and
        # which of the pure-Python data plane's modules and cython it has loaded: none
        # on the compiled plane (issue 50, netutil/dataplane.py)
        "bloomcast": {
            "bloomcast_data_plane": node.context.data_plane,
            "bloomcast_data_plane_python_modules": ",".join(python_modules_loaded()),
        },
    }
    if node.pubsub.forwards_lost_from:
        sections["forwards_lost"] = {
            f"from_{origin}": n for origin, n in sorted(node.pubsub.forwards_lost_from.items())
        }
    if node.tap is not None:
        sections["traffic"] = dict(node.tap.info_fields())
    return sections


def _server(node: Node, now: float) -> Section:
    """``# Server``: Redis 7.0.15's fields, in its order (genRedisInfoString),
    with this process's values; then bloomcast's own."""
    uptime = int(now - node.started)
    cluster_enabled = node.context.cluster_enabled
    return {
        "redis_version": REDIS_VERSION,
        "redis_git_sha1": "00000000",
        "redis_git_dirty": 0,
        "redis_build_id": _BUILD_ID,
        "redis_mode": "cluster" if cluster_enabled else "standalone",
        "os": f"{_UNAME.sysname} {_UNAME.release} {_UNAME.machine}",
        "arch_bits": 64 if sys.maxsize > 2**32 else 32,
        "monotonic_clock": "POSIX clock_gettime",  # time.monotonic's clock
        "multiplexing_api": "epoll" if sys.platform == "linux" else "kqueue",
        "atomicvar_api": "none",  # one thread: no atomic variables
        "gcc_version": _GCC_VERSION,
        "process_id": os.getpid(),
        "process_supervised": "no",
        "run_id": node.node_id,
        "tcp_port": node.port,
        "server_time_usec": int(now * 1_000_000),
        "uptime_in_seconds": uptime,
        "uptime_in_days": uptime // 86400,
        "hz": _HZ,
        "configured_hz": _HZ,
        "lru_clock": int(now) & _LRU_CLOCK_MAX,
        "executable": os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else "",
        "config_file": "",
        "io_threads_active": 0,
        "bloomcast_version": BLOOMCAST_VERSION,
        "python_version": "{}.{}.{}".format(*sys.version_info[:3]),
        "node_id": node.node_id,
    }


def _clients(node: Node, cluster: Section) -> Section:
    """``# Clients``; ``cluster_connections`` from CLUSTER INFO's links."""
    config = node.config
    pubsub_clients = sum(
        1 for cl in node.clients.values() if cl.channels or cl.patterns or cl.shard_channels
    )
    return {
        "connected_clients": len(node.clients),
        "cluster_connections": int(cluster.get("cluster_links_connected", 0)),
        "maxclients": config.maxclients,
        "blocked_clients": 0,
        "tracking_clients": sum(
            1 for cl in node.clients.values() if cl.extras.tracking is not None
        ),
        "clients_in_timeout_table": 0,
        "pubsub_clients": pubsub_clients,
    }


def _memory() -> Section:
    """``# Memory``: the resident set stands for ``used_memory`` (module docstring)."""
    rss = rss_bytes()
    peak = max(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {
        "used_memory": rss,
        "used_memory_human": _human(rss),
        "used_memory_rss": rss,
        "used_memory_rss_human": _human(rss),
        "used_memory_peak": peak,
        "used_memory_peak_human": _human(peak),
        "maxmemory": 0,
        "maxmemory_human": "0B",
        "maxmemory_policy": "noeviction",
        "mem_allocator": "pymalloc",
    }


def _stats(node: Node) -> Section:
    """``# Stats``: Redis's counters, then bloomcast's (losses, request slices, denials)."""
    stats = node.stats
    ops, net_in, net_out = node.metrics.rates()
    return {
        "total_connections_received": stats.connections_received,
        "total_commands_processed": stats.commands_processed,
        "instantaneous_ops_per_sec": int(ops),
        "total_net_input_bytes": stats.net_input_bytes,
        "total_net_output_bytes": stats.net_output_bytes,
        "instantaneous_input_kbps": f"{net_in / 1024:.2f}",
        "instantaneous_output_kbps": f"{net_out / 1024:.2f}",
        "rejected_connections": stats.rejected_connections,
        "total_accept_errors": node.accept_errors,
        "total_error_replies": sum(stats.errors.values()),
        "expired_keys": 0,
        "evicted_keys": 0,
        "keyspace_hits": 0,
        "keyspace_misses": 0,
        "pubsub_channels": len(node.pubsub.channels),
        "pubsub_patterns": len(node.pubsub.patterns),
        "pubsubshard_channels": len(node.pubsub.shard_channels),
        "client_output_buffer_limit_disconnections": stats.output_buffer_limit_disconnections,
        "total_publish_received": stats.publish_received,
        "total_messages_delivered": stats.messages_delivered,
        "total_forwards_lost": stats.forwards_lost,
        "loss_disconnections": stats.loss_disconnections,
        "total_request_slices": stats.parse_slices,
        "loop_exceptions": stats.loop_exceptions,
        # pipelined batches over the slow log's threshold, logged as their last request
        "slowlog_batches": node.hooks.slowlog_batches,
        "protected_mode_denied_connections": stats.protected_mode_denied,
        "tls_handshake_failures": stats.tls_handshake_failures,
        # Redis 7.2's names (7.0 counts these only in ACL LOG)
        "acl_access_denied_auth": node.acl.denied_auth,
        "acl_access_denied_cmd": node.acl.denied_commands,
        "acl_access_denied_key": 0,
        "acl_access_denied_channel": node.acl.denied_channels,
    }


def _cpu() -> Section:
    """``# CPU``: this process's and its children's rusage."""
    usage, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return {
        "used_cpu_sys": f"{usage.ru_stime:.6f}",
        "used_cpu_user": f"{usage.ru_utime:.6f}",
        "used_cpu_sys_children": f"{children.ru_stime:.6f}",
        "used_cpu_user_children": f"{children.ru_utime:.6f}",
    }
