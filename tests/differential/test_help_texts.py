"""HELP replies against redis-server 7.0.15 (Valkey words them differently),
byte for byte in RESP2 and RESP3."""

from __future__ import annotations

import pytest

from tests.differential.oracle import HELLO3, exchange, hello_masked, redis_only

pytestmark = [pytest.mark.timeout(120), redis_only]


@pytest.mark.parametrize("prefix", [b"", HELLO3], ids=["resp2", "resp3"])
def test_pubsub_help_same_bytes_as_redis(servers, prefix):
    oracle, node = servers
    payload = prefix + b"PUBSUB HELP\r\npubsub help\r\n"
    assert hello_masked(exchange(node, payload)[0]) == hello_masked(exchange(oracle, payload)[0])
