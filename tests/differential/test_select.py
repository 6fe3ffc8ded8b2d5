"""SELECT against the oracle (a standalone redis-server 7.0.15): accepted for
0..15 with Redis's errors otherwise, so clients configured with a database
work (a Redis Cluster node would refuse any db but 0; bloomcast chooses the
standalone behaviour), pub/sub unaffected by the database, CLIENT INFO db=."""

from __future__ import annotations

import pytest

from tests.differential.oracle import HELLO3, assert_same_as_oracle
from tests.procs import connect, read_quiet

pytestmark = pytest.mark.timeout(120)

CASES = {
    "range": b"SELECT 0\r\nSELECT 1\r\nSELECT 15\r\nSELECT 16\r\nSELECT -1\r\n",
    "not integers": b"SELECT abc\r\nSELECT 1.5\r\nSELECT 01\r\nSELECT +1\r\nSELECT 2147483648\r\n"
    b"SELECT 99999999999999999999\r\nSELECT\r\nSELECT 1 2\r\n",
    "pub/sub across databases": b"SELECT 3\r\nSUBSCRIBE a\r\n",
    "resp3": HELLO3 + b"SELECT 2\r\nSELECT 16\r\n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_select_same_bytes_as_the_oracle(servers, name):
    assert_same_as_oracle(servers, CASES[name])


def test_a_publish_from_another_database_reaches_the_subscriber(servers):
    _, node = servers
    with connect(node) as sub, connect(node) as pub:
        sub.sendall(b"SELECT 5\r\nSUBSCRIBE news\r\n")
        read_quiet(sub)
        pub.sendall(b"SELECT 9\r\nPUBLISH news hi\r\nCLIENT INFO\r\n")
        replies, _ = read_quiet(pub)
        assert replies.startswith(b"+OK\r\n:1\r\n") and b" db=9 " in replies
        got, _ = read_quiet(sub)
        assert got == b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"


def test_redis_py_with_a_database_configured(servers):
    import redis

    _, node = servers
    sub = redis.Redis(port=node, db=1).pubsub()
    sub.subscribe("db-news")
    assert sub.get_message(timeout=2)["type"] == "subscribe"
    assert redis.Redis(port=node, db=7).publish("db-news", "x") == 1
    msg = sub.get_message(timeout=2)
    assert (msg["type"], msg["data"]) == ("message", b"x")
    sub.close()
