"""``bloomcast dashboard --join HOST:PORT``: a live web view of every node, in
the spirit of NSQ's nsqadmin.

It finds the nodes in the CLUSTER NODES of the node it joined (its client
port), polls each node's INFO every ``--interval`` seconds
(bloomcast/dashboard/poller.py), computes rates and the saving against
broadcast between polls (bloomcast/dashboard/model.py), and serves one page
plus ``/api/cluster`` (bloomcast/dashboard/server.py). Its own process, one
asyncio loop; a node that stops answering is shown as down.

Mistakes are one line on stderr: a bad flag exits 2, a node that cannot be
reached or a port that cannot be listened on exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--join",
        required=True,
        metavar="HOST:PORT",
        help="client address of any node of the cluster (the others are found from it)",
    )
    add("--bind", default="127.0.0.1", help="address the web page is served on")
    add("--port", type=int, default=8080, help="port of the web page (0: any free port)")
    add(
        "--interval",
        type=float,
        default=1.0,
        help="seconds between two polls of every node (default 1.0)",
    )
    add("--user", default=None, help="ACL user to AUTH as on every node (as redis-cli --user)")
    add(
        "--pass",
        dest="password",
        default=None,
        help="password to AUTH with on every node (as redis-cli --pass; "
        "or the REDISCLI_AUTH environment variable, which keeps it out of ps)",
    )


def parse_join(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); ValueError names the flag."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"--join {text}: expected HOST:PORT, the client port of a node")
    return host, int(port)


def _needs_auth(error: str) -> bool:
    """Redis's refusals of a client that did not AUTH: NOAUTH, and HELLO's
    own wording (redis-py opens with HELLO)."""
    return error.startswith(("NOAUTH", "Authentication required")) or (
        "must be called with the client already authenticated" in error
    )


def _fail(message: str, code: int) -> int:
    print(f"bloomcast dashboard: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    try:
        host, port = parse_join(args.join)
    except ValueError as exc:
        return _fail(str(exc), 2)
    if not 0 <= args.port <= 65535:
        return _fail(f"--port {args.port}: a port is 0..65535", 2)
    if not 0.1 <= args.interval <= 60:
        return _fail(f"--interval {args.interval}: expected 0.1..60 seconds", 2)
    try:
        return asyncio.run(_serve(args, host, port))
    except KeyboardInterrupt:
        return 0


async def _serve(args: argparse.Namespace, host: str, port: int) -> int:
    from redis.exceptions import RedisError

    from bloomcast.dashboard.poller import Poller, error_text
    from bloomcast.dashboard.server import DashboardServer
    from bloomcast.node_process import listen_error

    password = args.password if args.password is not None else os.environ.get("REDISCLI_AUTH")
    if args.user is not None and password is None:
        return _fail("--user needs --pass (or REDISCLI_AUTH): AUTH takes both", 2)
    poller = Poller(host, port, args.interval, username=args.user, password=password)
    try:
        await poller.discover()
    except (RedisError, OSError, TimeoutError) as exc:
        why = error_text(exc)
        if poller.password is None and _needs_auth(why):
            why = "the node requires AUTH: give --pass (and --user for an ACL user)"
        return _fail(f"--join {args.join}: cannot read CLUSTER NODES: {why}", 1)
    server = DashboardServer(poller)
    try:
        await server.start(args.bind, args.port)
    except OSError as exc:
        return _fail(str(listen_error("--port", args.bind, args.port, exc)), 1)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    shown = f"[{args.bind}]" if ":" in args.bind else args.bind
    print(
        f"bloomcast dashboard: http://{shown}:{server.port}/ "
        f"({len(poller.nodes)} nodes found from {args.join}, polled every {args.interval:g} s)",
        flush=True,
    )
    try:
        await poller.run(stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await server.stop()
        await poller.close()
    return 0
