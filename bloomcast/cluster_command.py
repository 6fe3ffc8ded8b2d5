"""``bloomcast cluster up``: N local node processes, joined, in the foreground.

    bloomcast cluster up --nodes 3 --base-port 7001 [--traffic-dir DIR]
                         [--metrics-base-port 9121] [node flags...]

Client ports are base-port .. base-port+N-1, bus ports those + 10000. Every
``bloomcast node`` flag (``--node-timeout-ms``, ``--cluster-secret``,
``--subscribe-visibility-timeout``, ...) is accepted and passed to every node,
except the per-node ones (``--port``, ``--cluster-port``, ``--join``), which
this command sets. Without ``--cluster-secret`` the nodes share a secret
generated for this run, so no other process can join their bus. Ctrl-C or
SIGTERM stops every node (SIGTERM, then SIGKILL after 10 s).
"""

from __future__ import annotations

import argparse
import secrets
import signal
import sys
import time
from types import FrameType
from typing import Any

from bloomcast import proctitle
from router.config import add_node_arguments


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cluster_command", metavar="ACTION")
    up = sub.add_parser("up", help="start N local nodes, joined, in the foreground")
    up.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    up.add_argument("--base-port", type=int, default=7001, help="first client port")
    up.add_argument("--bind", default="127.0.0.1", help="address of every node")
    up.add_argument("--traffic-dir", help="traffic spool directory for every node")
    up.add_argument(
        "--metrics-base-port",
        type=int,
        help="serve each node's Prometheus /metrics and /healthz on this port + i",
    )
    up.add_argument("--log-dir", help="keep each node's log in DIR/node-<i>.log")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for readiness")
    node_flags = argparse.ArgumentParser(add_help=False)
    add_node_arguments(node_flags)
    for action in node_flags._actions:
        if action.dest in _PER_NODE | _NOT_FORWARDED or not action.option_strings:
            continue
        kwargs: dict[str, Any] = {"dest": f"node_{action.dest}", "help": action.help}
        kwargs["metavar"] = action.metavar or action.dest.upper()
        if action.type is not None:
            kwargs["type"] = action.type
        up.add_argument(*action.option_strings, **kwargs)


#: node settings this command sets per node itself
_PER_NODE = {"port", "cluster_port", "join", "bind", "traffic_dir", "help"}
#: node flags whose name this command uses for its own (``--timeout``: the
#: wait for readiness; a node's idle-client ``timeout`` goes in ``--config``)
_NOT_FORWARDED = {"timeout"}


def node_flags_from(args: argparse.Namespace) -> list[str]:
    """The ``bloomcast node`` flags given to ``cluster up``, as a command line."""
    node_flags = argparse.ArgumentParser(add_help=False)
    add_node_arguments(node_flags)
    out: list[str] = []
    for action in node_flags._actions:
        value = getattr(args, f"node_{action.dest}", None)
        if isinstance(value, bool):
            value = "yes" if value else "no"  # --protected-mode
        if value is not None and action.option_strings:
            out += [action.option_strings[0], str(value)]
    return out


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def run(args: argparse.Namespace) -> int:
    if getattr(args, "cluster_command", None) != "up":
        print("usage: bloomcast cluster up --nodes N --base-port P", file=sys.stderr)
        return 2
    proctitle.hide_secrets()  # a --requirepass / --cluster-secret given to forward
    from bloomcast.testing import LocalCluster

    extra = node_flags_from(args)
    if getattr(args, "node_cluster_secret", None) is None:
        # a secret of their own, so no other process can join them (issue 14)
        extra += ["--cluster-secret", secrets.token_hex(16)]
    cluster = LocalCluster(
        args.nodes,
        base_port=args.base_port,
        extra_args=extra,
        traffic_dir=args.traffic_dir,
        host=args.bind,
        log_dir=args.log_dir,
        metrics_ports=[args.metrics_base_port + i for i in range(args.nodes)]
        if args.metrics_base_port is not None
        else (),
    )
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        for i in range(args.nodes):
            cluster.start_node(i)
        cluster.wait_ready(args.timeout)
        for i in range(args.nodes):
            metrics = ""
            if cluster.metrics_ports:
                metrics = f" metrics http://{args.bind}:{cluster.metrics_ports[i]}/metrics"
            print(f"node {i}: {args.bind}:{cluster.ports[i]} (bus {cluster.bus_ports[i]}){metrics}")
        print(f"cluster of {args.nodes} nodes ready; Ctrl-C stops it", flush=True)
        exited: set[int] = set()
        while True:
            for i in range(args.nodes):
                if i not in exited and not cluster.alive(i):
                    exited.add(i)
                    print(f"node {i} exited", file=sys.stderr, flush=True)
            time.sleep(1.0)
    except (KeyboardInterrupt, _Stop):
        print("stopping", file=sys.stderr)
        return 0
    except (TimeoutError, RuntimeError) as exc:
        print(f"cluster up: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        cluster.stop()
