"""``bloomcast node``: run one node agent — the RESP server and its cluster bus.

The bus listens on the bus port (client port + 10000 unless ``--cluster-port``)
even without ``--join``, so other nodes can join this one, as in Redis Cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from router.acl.aclfile import AclFileError
from router.config import NodeConfig, add_node_arguments, config_from_args
from router.tls import TlsConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    add_node_arguments(parser)
    parser.add_argument("--no-bus", action="store_true", help="run without the cluster bus")
    parser.add_argument("--log-level", default="WARNING", help="Python logging level")


async def serve(config: NodeConfig, with_bus: bool = True) -> None:
    """Run a node (its bus, its traffic tap) until SIGTERM/SIGINT, then shut
    down gracefully. The one place that wires Node + ClusterBus + tap."""
    from router.node import Node

    node = Node(config)
    await node.start(serve=False)  # clients once the bus is started (below)
    tap = None
    if config.traffic_dir:
        from spark.tap import TrafficTap

        tap = TrafficTap(config.traffic_dir, config.traffic_sample, node=node.node_id)
        tap.start(asyncio.get_running_loop())
        node.tap = tap
    bus = None
    if with_bus:
        from cluster_bus.bus import ClusterBus

        bus = ClusterBus(node, config.bus_config(node.port))
        node.link = bus
        await bus.start()
    await node.start_serving()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    bus_port = f" bus port {bus.port}" if bus is not None else ""
    print(
        f"bloomcast node {node.node_id} ready on {config.bind}:{node.port}{bus_port}",
        flush=True,
    )
    await stop.wait()
    if bus is not None:
        await bus.stop()
    await node.stop()
    if tap is not None:
        tap.close()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    config = config_from_args(args)
    if not args.no_bus:
        from router.protected import bus_refusal

        refusal = bus_refusal(
            config.protected_mode, config.bind, config.bus_port, config.cluster_secret
        )
        if refusal is not None:
            print(refusal, file=sys.stderr)
            return 1
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve(config, not args.no_bus))
    except TlsConfigError as exc:
        print(f"bloomcast node: cannot start TLS: {exc}", file=sys.stderr)
        return 1
    except AclFileError as exc:
        # Redis: "Aborting Redis startup because of ACL errors"
        print(f"bloomcast node: aborting startup because of ACL errors: {exc}", file=sys.stderr)
        return 1
    return 0
