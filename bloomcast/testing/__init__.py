"""The process toolkit the tests, the benchmarks and the demo share.

Each helper exists once, here, so that every caller picks ports, waits for
readiness and stops processes the same way:

``ports`` (LOOPBACK, free_port(s), wait_port / wait_for_ping, wait_port_free),
``process`` (stop_process, the :class:`Managed` ``with`` protocol, parse_info
for INFO text), ``servers`` (the :class:`Server` launcher for valkey-server /
redis-server and other RESP servers) and ``local_cluster`` (LocalCluster: N
``bloomcast node`` processes, joined).
"""

from bloomcast.testing.local_cluster import LocalCluster
from bloomcast.testing.ports import LOOPBACK, free_port, free_ports, wait_for_ping, wait_port
from bloomcast.testing.process import Managed, parse_info, stop_process
from bloomcast.testing.servers import (
    REDIS,
    VALKEY,
    Server,
    redis_server_path,
    server_version,
    start_anchor,
    valkey_server_path,
)

__all__ = [
    "LOOPBACK",
    "REDIS",
    "VALKEY",
    "LocalCluster",
    "Managed",
    "Server",
    "free_port",
    "free_ports",
    "parse_info",
    "redis_server_path",
    "server_version",
    "start_anchor",
    "stop_process",
    "valkey_server_path",
    "wait_for_ping",
    "wait_port",
]
