"""Protected mode against redis-server 7.0.15: both listen on every address,
a client connects through the machine's own non-loopback address (so its
peer address is not loopback) and gets the same bytes, and the same close,
as from Redis: Redis's -DENIED text without a password, NOAUTH with one,
PONG with protected mode off or from loopback. Counted as Redis counts it."""

from __future__ import annotations

import socket

import pytest

from tests.differential.oracle import oracle_server, redis_only
from tests.procs import bloomcast_node, read_quiet

pytestmark = [pytest.mark.timeout(120), redis_only]


def _external_ip() -> str | None:
    """This machine's address on its default route (not loopback), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("198.51.100.1", 9))  # a UDP connect sends no packet
        except OSError:
            return None
        ip = s.getsockname()[0]
    return None if ip.startswith("127.") or ip == "0.0.0.0" else ip


EXTERNAL = _external_ip()
needs_external = pytest.mark.skipif(EXTERNAL is None, reason="no non-loopback IPv4 address")


def _ask(host: str, port: int, payload: bytes = b"PING\r\n") -> tuple[bytes, bool]:
    with socket.create_connection((host, port), 5) as s:
        if payload:
            s.sendall(payload)
        return read_quiet(s, 0.3)


def _both(
    settings: list[str], host: str, payload: bytes = b"PING\r\n"
) -> tuple[tuple[bytes, bool], tuple[bytes, bool]]:
    with oracle_server(*settings) as oracle, bloomcast_node(*settings) as node:
        return _ask(host, oracle, payload), _ask(host, node, payload)


@needs_external
def test_denied_from_beyond_loopback_without_a_password():
    assert EXTERNAL is not None
    # Redis writes DENIED as it accepts and closes without reading: a request
    # sent meanwhile can make its close a reset, so this client sends nothing
    want, got = _both(["--bind", "0.0.0.0", "--protected-mode", "yes"], EXTERNAL, b"")
    assert want[0].startswith(b"-DENIED Redis is running in protected mode")
    assert got == want  # the bytes, and the connection closed after them


@needs_external
def test_served_from_beyond_loopback_with_a_password():
    assert EXTERNAL is not None
    settings = ["--bind", "0.0.0.0", "--protected-mode", "yes"]
    # (the launcher waits for PONG, so the oracle gets its password after)
    with (
        oracle_server(*settings) as oracle,
        bloomcast_node(*settings, "--requirepass", "pw") as node,
    ):
        assert _ask("127.0.0.1", oracle, b"CONFIG SET requirepass pw\r\n")[0] == b"+OK\r\n"
        want, got = _ask(EXTERNAL, oracle), _ask(EXTERNAL, node)
    assert want == (b"-NOAUTH Authentication required.\r\n", False)
    assert got == want


@needs_external
def test_served_from_beyond_loopback_with_protected_mode_off():
    assert EXTERNAL is not None
    want, got = _both(["--bind", "0.0.0.0", "--protected-mode", "no"], EXTERNAL)
    assert want == (b"+PONG\r\n", False)
    assert got == want


def test_loopback_is_served_in_protected_mode():
    want, got = _both(["--bind", "0.0.0.0", "--protected-mode", "yes"], "127.0.0.1")
    assert want == (b"+PONG\r\n", False)
    assert got == want


@needs_external
def test_a_refusal_is_counted_as_redis_counts_it():
    assert EXTERNAL is not None
    counts = []
    settings = ["--bind", "0.0.0.0", "--protected-mode", "yes"]
    with oracle_server(*settings) as oracle, bloomcast_node(*settings) as node:
        for port in (oracle, node):
            for _ in range(2):
                _ask(EXTERNAL, port, b"")
            info, _ = _ask("127.0.0.1", port, b"INFO stats\r\nINFO errorstats\r\n")
            fields = dict(line.split(":", 1) for line in info.decode().split("\r\n") if ":" in line)
            counts.append(fields)
    redis_fields, node_fields = counts
    for name in ("rejected_connections", "total_connections_received", "total_error_replies"):
        assert node_fields[name] == redis_fields[name], name
    assert redis_fields["rejected_connections"] == "2"
    assert node_fields["protected_mode_denied_connections"] == "2"
