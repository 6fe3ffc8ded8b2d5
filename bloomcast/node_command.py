"""``bloomcast node``: run one node agent — the RESP server and its cluster bus.

The bus listens on the bus port (client port + 10000 unless ``--cluster-port``)
even without ``--join``, so other nodes can join this one, as in Redis Cluster.
A configuration mistake is one line and exit 2, a node that cannot start one
line and exit 1 (bloomcast/node_process.py); the log is Redis's
(bloomcast/node_log.py), SIGHUP is ignored or reopens ``--logfile``; every
shutdown step runs whatever an earlier one raised, and a second
SIGTERM/SIGINT exits at once (Redis's "You insist... exiting now.");
``--metrics-port`` adds Prometheus ``/metrics`` and ``/healthz``
(bloomcast/metrics.py), and with ``--traffic-dir`` the spool for the
statistics job (``/spool``, spark/spool_service.py), all on the node's one
asyncio loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import inspect
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from bloomcast import node_log, proctitle
from bloomcast.membership_log import MembershipLog
from bloomcast.node_process import (
    StartupError,
    add_process_arguments,
    check_process,
    listen_error,
    tap_error,
)
from netutil.tls import BusTlsError
from router import allocator, collector
from router.acl.aclfile import AclFileError
from router.config import NodeConfig, add_node_arguments, config_from_args
from router.config_file import ConfigError
from router.tls import TlsConfigError

if TYPE_CHECKING:
    from bloomcast.metrics import MetricsServer
    from cluster_bus.nodes_file import NodesConfig, NodesFile
    from router.node import Node
    from spark.tap import TrafficTap

log = logging.getLogger("bloomcast.node")


def configure(parser: argparse.ArgumentParser) -> None:
    add_node_arguments(parser)
    add_process_arguments(parser)


async def serve(
    config: NodeConfig,
    with_bus: bool = True,
    log_handler: logging.Handler | None = None,
    metrics_port: int | None = None,
) -> None:
    """Run a node (its bus, its traffic tap) until SIGTERM/SIGINT, then shut
    down gracefully. The one place that wires Node + ClusterBus + tap."""
    from router import dataplane
    from router.node import Node

    allocator.fix_mmap_threshold()  # large freed blocks go back to the kernel
    # the node's one choice of data plane, for its router and its bus alike
    # (netutil.dataplane.choose: the pure-Python data plane for all when any part is not built)
    plane = dataplane.load()
    nodes_file, saved = open_nodes_file(config) if with_bus else (None, None)
    node = Node(config, node_id=saved.my_id if saved is not None else None, plane=plane)
    node.time_off_loop_events(asyncio.get_running_loop(), nodes_file)
    try:
        await node.start(serve=False)  # clients once the bus is started (below)
    except OSError as exc:
        raise listen_error("--port", config.bind, config.port, exc) from None
    tap = _start_tap(config, node, config.traffic_dir) if config.traffic_dir else None
    bus = None
    if with_bus:
        from cluster_bus.bus import ClusterBus

        bus = ClusterBus(node.pubsub, config.bus_config(node.port), nodes_file, saved, plane.bus)
        node.set_link(bus)
        try:
            await bus.start()
        except OSError as exc:
            raise listen_error("--cluster-port", config.bind, config.bus_port, exc) from None
    metrics = None
    if metrics_port is not None:
        metrics = await _start_metrics(config, node, tap, metrics_port)
    # the signals are handled before the port is open: a client (or a test)
    # that sees the port may signal at once
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # an exception escaping a callback: counted, logged once a minute per cause
    loop.set_exception_handler(node_log.LoopExceptions(node.stats))
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if log_handler is not None:
        loop.add_signal_handler(signal.SIGHUP, node_log.on_sighup, log_handler)
    node.on_shutdown = stop.set  # SHUTDOWN stops it as SIGTERM does
    await node.start_serving()
    # from here on the collector walks only what was made since
    collector.settle(node.gc_pauses, node.pubsub.tables_to_freeze())
    reclaimer = collector.Reclaimer(node.gc_pauses)  # cycles among frozen objects
    reclaimer.start(loop)
    members = MembershipLog(node.link)
    members.start(loop)
    bus_port = f" bus port {bus.port}" if bus is not None else ""
    ready = f"bloomcast node {node.node_id} ready on {config.bind}:{node.port}{bus_port}"
    print(ready, flush=True)
    log.info(
        "%s, data plane %s, pid %d. Ready to accept connections", ready, plane.name, os.getpid()
    )
    await stop.wait()
    log.info("Shutdown requested: sending LEAVE, closing clients")
    # a second SIGTERM/SIGINT exits at once, as Redis's "You insist... exiting now."
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, _insist)
    clean = await _shutdown(
        ("the membership log", members.stop),
        ("the collector", reclaimer.stop),
        ("the metrics port", metrics.stop if metrics is not None else None),
        ("the cluster bus", bus.stop if bus is not None else None),
        ("the node", node.stop),
        ("the traffic tap", functools.partial(_close_tap, tap) if tap is not None else None),
        ("the nodes file", nodes_file.close if nodes_file is not None else None),
    )
    if not clean:
        raise ShutdownIncomplete


def _start_tap(config: NodeConfig, node: Node, directory: str) -> TrafficTap:
    """The node's traffic tap, writing to ``directory`` (``--traffic-dir``),
    started on the loop."""
    from spark.tap import TrafficTap

    try:
        tap = TrafficTap(
            directory,
            config.traffic_sample,
            node=node.node_id,
            address=f"{_client_host(config)}:{node.port}",
        )
    except OSError as exc:
        raise tap_error(directory, exc) from None
    tap.start(asyncio.get_running_loop())
    node.tap = tap
    return tap


async def _start_metrics(
    config: NodeConfig, node: Node, tap: TrafficTap | None, metrics_port: int
) -> MetricsServer:
    """The metrics port: Prometheus /metrics, /healthz, and with a tap the spool
    over HTTP for ``stats run --nodes`` (spark/spool_service.py)."""
    from bloomcast.metrics import MetricsServer

    spool = None
    if tap is not None:
        from spark.spool_service import SpoolService

        spool = SpoolService(tap.directory, tap)
    metrics = MetricsServer(node, spool)
    try:
        await metrics.start(config.bind, metrics_port)
    except OSError as exc:
        raise listen_error("--metrics-port", config.bind, metrics_port, exc) from None
    return metrics


#: seconds the traffic tap's last batch may take at shutdown (a hung disk)
TAP_CLOSE_SECONDS = 30.0


class ShutdownIncomplete(Exception):
    """A shutdown step failed or a writer thread hung (logged): exit 1 at once."""


def _insist() -> None:
    """A second SIGTERM/SIGINT while shutting down: Redis's words, exit 1 now."""
    log.warning("You insist... exiting now.")
    logging.shutdown()
    os._exit(1)


async def _close_tap(tap: TrafficTap) -> None:
    if not await tap.aclose(TAP_CLOSE_SECONDS):
        raise ShutdownIncomplete  # its thread is hung on the disk: not waited for at exit


async def _shutdown(*steps: tuple[str, Callable[[], object] | None]) -> bool:
    """Run every step in order, whatever an earlier one raised (each failure
    logged); True when all ended cleanly."""
    clean = True
    for what, step in steps:
        if step is None:
            continue
        try:
            result = step()
            if inspect.isawaitable(result):
                await result
        except ShutdownIncomplete:
            clean = False
        except Exception:
            log.exception("Shutdown: stopping %s failed", what)
            clean = False
    return clean


def run(args: argparse.Namespace) -> int:
    """Exit 0 after a clean stop, 2 on a configuration mistake, 1 when the
    node cannot start (a port in use, a refused bus, bad TLS or ACL files); a
    mistake is one line on stderr."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as Redis; reopens --logfile once serving
    parser = argparse.ArgumentParser()
    configure(parser)
    try:
        config = config_from_args(args, parser)
        check_process(config, args)
    except ConfigError as exc:
        print(f"bloomcast node: {exc}", file=sys.stderr)
        return 2
    if not args.no_bus:
        from router.protected import bus_refusal

        refusal = bus_refusal(
            config.protected_mode,
            config.bind,
            config.bus_port,
            config.cluster_secret or config.tls_cluster,
        )
        if refusal is not None:
            print(refusal, file=sys.stderr)
            return 1
    if args.check_config:
        bus = "no bus" if args.no_bus else f"bus port {config.bus_port}"
        seeds = f"{len(config.join)} seed(s)"
        print(f"bloomcast node: configuration OK (port {config.port}, {bus}, {seeds})")
        return 0
    try:
        handler = node_log.setup(args.loglevel or "notice", args.logfile)
    except OSError as exc:
        print(f"bloomcast node: --logfile {args.logfile}: {exc.strerror}", file=sys.stderr)
        return 1
    proctitle.hide_secrets()  # --requirepass / --cluster-secret off /proc/<pid>/cmdline
    from cluster_bus.api import HANDSHAKES_FLOOR
    from router.fdlimit import TooFewFiles, fit_maxclients

    try:  # Redis's adjustOpenFilesLimit: CONFIG GET maxclients shows the fitted value
        fitted = fit_maxclients(config.maxclients, not args.no_bus, config.cluster_max_handshakes)
        config.maxclients = fitted.maxclients
        if fitted.handshakes < HANDSHAKES_FLOOR and not config.cluster_max_handshakes:
            config.cluster_max_handshakes = fitted.handshakes  # shrunk under a low limit
    except TooFewFiles as exc:
        print(f"bloomcast node: {exc}", file=sys.stderr)
        return 1
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve(config, not args.no_bus, handler, args.metrics_port))
    except ShutdownIncomplete:
        # logged; a writer thread may hang on its disk: the interpreter must not wait for it
        logging.shutdown()
        os._exit(1)
    except StartupError as exc:
        print(f"bloomcast node: {exc}", file=sys.stderr)
        return 1
    except (TlsConfigError, BusTlsError) as exc:
        print(f"bloomcast node: cannot start TLS: {exc}", file=sys.stderr)
        return 1
    except AclFileError as exc:
        # Redis: "Aborting Redis startup because of ACL errors"
        print(f"bloomcast node: aborting startup because of ACL errors: {exc}", file=sys.stderr)
        return 1
    return 0


def _client_host(config: NodeConfig) -> str:
    """The host ``stats top`` shows for this node's traffic: the announced IP or
    hostname, the one bind address, or the machine's host name when the node
    listens on several or every address (the bus learns its own address from
    peers then, after the tap starts)."""
    from netutil.addresses import own_host, parse_bind

    if config.cluster_announce_hostname:
        return config.cluster_announce_hostname
    return own_host(parse_bind(config.bind.split()), config.cluster_announce_ip) or (
        socket.gethostname()
    )


def open_nodes_file(config: NodeConfig) -> tuple[NodesFile | None, NodesConfig | None]:
    """``--cluster-config-file``: locked for this process and read (the node's id
    and the nodes it knew), or (None, None); a file in use or unreadable is a
    StartupError (one line)."""
    if not config.cluster_config_file:
        return None, None
    from cluster_bus.nodes_file import NodesFile, NodesFileError

    nodes_file = NodesFile(config.cluster_config_file)
    try:
        saved = nodes_file.open()
    except NodesFileError as exc:
        raise StartupError(str(exc)) from None
    return nodes_file, saved
