"""CLUSTER MEET's address handling (router/commands/cluster_cmd.py): what the
bus is asked to dial. The error wording is compared with redis-server 7.0.15
in tests/differential/test_cluster_commands.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from cluster_bus.api import NoPeers
from router.commands.cluster_cmd import cluster_meet


class MeetRecorder(NoPeers):
    def __init__(self) -> None:
        super().__init__("0" * 40, "127.0.0.1", 0)
        self.met: list[tuple[str, int, int]] = []

    def meet(self, host: str, bus_port: int, client_port: int = 0) -> None:
        self.met.append((host, bus_port, client_port))


def meet(*args: bytes) -> tuple[bytes, list[tuple[str, int, int]]]:
    link = MeetRecorder()
    node: Any = SimpleNamespace(link=link)
    reply = cluster_meet(node, SimpleNamespace(resp=2), [b"CLUSTER", b"MEET", *args])  # type: ignore[arg-type]
    return reply, link.met


def test_bus_port_defaults_to_port_plus_10000_as_redis():
    assert meet(b"127.0.0.1", b"7001") == (b"+OK\r\n", [("127.0.0.1", 17001, 7001)])


def test_explicit_bus_port_and_ipv6():
    assert meet(b"127.0.0.1", b"7001", b"27001") == (b"+OK\r\n", [("127.0.0.1", 27001, 7001)])
    assert meet(b"::1", b"7001") == (b"+OK\r\n", [("::1", 17001, 7001)])


def test_no_dial_on_an_invalid_address():
    reply, met = meet(b"127.0.0.1", b"60000")  # bus port 70000 is out of range
    assert reply == b"-ERR Invalid node address specified: 127.0.0.1:60000\r\n"
    assert met == []
