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


def test_hostile_addresses_are_refused_with_redis_wording_and_never_dialled():
    """Issue 49: only what Redis's ``inet_pton`` takes is met; a zone
    (``%eth0``, which Python's ipaddress took), a host name, a NUL, a
    newline, a space or a comma, bytes that are no UTF-8: Redis's error."""
    for host in (
        b"fe80::1%eth0",
        b"localhost",
        b"a" * 64 + b".example",
        b"127.0.0.1\x00",
        b"127.0.0.1\n",
        b"evil myself,master",
        b"1.2.3.4 ",
        b"\xff\xfe",
        b"[::1]",
        b"1" * 100_000,
    ):
        reply, met = meet(host, b"7001")
        shown = host.decode(errors="replace").replace("\n", " ")  # (as Redis's error replies)
        assert reply == f"-ERR Invalid node address specified: {shown}:7001\r\n".encode()
        assert met == []


def test_an_ip_is_met_as_inet_ntop_writes_it():
    """Redis normalizes the address with ``inet_ntop`` (clusterStartHandshake)."""
    assert meet(b"::0001", b"7001")[1] == [("::1", 17001, 7001)]
    assert meet(b"::ffff:1.2.3.4", b"7001")[1] == [("::ffff:1.2.3.4", 17001, 7001)]
