"""What only the valkey oracle covers: ``CLIENT SETINFO`` (Redis 7.2's; the node
declares 7.0.15 and keeps it because clients send it on connect, and
redis-server 7.0.15 does not have it). Valkey comes from a wheel, so this
always runs."""

from __future__ import annotations

import pytest

from bloomcast.testing import VALKEY, start_anchor
from tests.differential.oracle import exchange
from tests.procs import bloomcast_node

pytestmark = pytest.mark.timeout(120)


def test_client_setinfo_same_bytes_as_valkey():
    payload = (
        b"CLIENT SETINFO foo bar\r\nCLIENT SETINFO lib-name x\r\nCLIENT SETINFO LIB-VER 1\r\n"
        b"CLIENT SETINFO lib-name a\x01b\r\nCLIENT SETINFO lib-ver\r\n"
        b"*4\r\n$6\r\nCLIENT\r\n$7\r\nSETINFO\r\n$3\r\na\x00b\r\n$1\r\nx\r\n"
    )
    with start_anchor(VALKEY) as valkey, bloomcast_node() as node:
        assert exchange(node, payload) == exchange(valkey.port, payload)
