"""The servers every differential test compares: the oracle and a node."""

from __future__ import annotations

import pytest

from tests.differential.oracle import oracle_server
from tests.procs import bloomcast_node


@pytest.fixture(scope="module")
def servers():
    """(oracle port, node port): the oracle is redis-server 7.0.15, else valkey."""
    with oracle_server() as oracle, bloomcast_node() as node:
        yield oracle, node
