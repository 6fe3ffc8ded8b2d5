"""Flags of the node *process* (not of the node's protocol): bus on/off, log,
metrics, ``--check-config``, and the one-line startup errors.

These are TOML keys too (router/config_file.py reads the keys off the parser);
NodeConfig holds only what the node and its bus read.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket

from bloomcast.node_log import LEVELS
from router.config import NodeConfig
from router.config_file import ConfigError


class StartupError(RuntimeError):
    """The node cannot start (exit 1); ``str()`` is the one line shown."""


def add_process_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--no-bus",
        action="store_true",
        default=None,
        help="run without the cluster bus (a standalone node)",
    )
    add(
        "--loglevel",
        "--log-level",
        type=str.lower,
        choices=tuple(LEVELS),
        help="log verbosity, Redis's names (default notice)",
    )
    add(
        "--metrics-port",
        type=int,
        help="serve Prometheus /metrics and /healthz on this port (default: off)",
    )
    add("--logfile", help="append the log to FILE (default stderr); SIGHUP reopens it")
    add(
        "--check-config",
        action="store_true",
        help="check the flags and the --config file, print one line, exit (0 = valid)",
    )


def listen_error(flag: str, host: str, port: int, exc: OSError) -> StartupError:
    """``--port 7001: cannot listen on 127.0.0.1:7001: address already in use``;
    an address the machine does not have, or cannot resolve, is ``--bind``'s mistake."""
    if exc.errno == errno.EADDRINUSE:
        reason = "address already in use"
    elif exc.errno is not None and exc.errno > 0:
        reason = os.strerror(exc.errno)
    else:
        reason = exc.strerror or str(exc)
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        flag, port_shown = "--bind", host
    else:
        port_shown = str(port)
    return StartupError(f"{flag} {port_shown}: cannot listen on {host}:{port}: {reason}")


def tap_error(directory: str, exc: OSError) -> StartupError:
    """``--traffic-dir /x: cannot create it: Permission denied``."""
    return StartupError(f"--traffic-dir {directory}: cannot use it: {exc.strerror or exc}")


def check_process(config: NodeConfig, args: argparse.Namespace) -> None:
    """Checks of the process flags (ConfigError names the flag): a derived
    bus port past 65535 is a mistake of ``--port``; ``--metrics-port`` is a port."""
    if not args.no_bus and config.cluster_port is None and config.bus_port > 65535:
        raise ConfigError(
            f"--port {config.port}: the bus port (port + 10000) would pass 65535; "
            "give --cluster-port or --no-bus"
        )
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise ConfigError(f"--metrics-port {args.metrics_port}: a port is 0..65535")
