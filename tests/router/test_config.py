"""CONFIG SET changes what the node does, not only what CONFIG GET shows:
the pubsub output buffer limit (for clients already connected), maxclients,
requirepass (new connections only, as in Redis)."""

from __future__ import annotations

import socket

import pytest
import redis

from tests.procs import bloomcast_node, connect, read_quiet

pytestmark = pytest.mark.timeout(120)


def test_config_set_pubsub_limit_cuts_a_slow_subscriber_already_connected():
    with bloomcast_node() as port:  # default limit: 32 MB hard
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", port))
        slow.sendall(b"SUBSCRIBE feed\r\n")
        r = redis.Redis(port=port)
        while r.pubsub_numsub("feed")[0][1] != 1:
            pass
        assert r.config_set("client-output-buffer-limit", "pubsub 256kb 0 0")
        assert r.config_get("client-output-buffer-limit") == {
            "client-output-buffer-limit": "normal 0 0 0 slave 268435456 67108864 60 "
            "pubsub 262144 0 0"
        }
        payload = b"x" * 10_000
        for i in range(3000):  # stops once cut; 30 MB at most, below the old 32 MB limit
            r.publish("feed", payload)
            if i % 50 == 0 and r.info("stats")["client_output_buffer_limit_disconnections"]:
                break
        assert r.info("stats")["client_output_buffer_limit_disconnections"] == 1
        assert r.pubsub_numsub("feed") == [(b"feed", 0)]
        slow.close()


def test_config_set_maxclients_refuses_the_next_connection():
    with bloomcast_node() as port, connect(port) as first:
        first.sendall(b"CONFIG SET maxclients 1\r\n")
        assert read_quiet(first)[0] == b"+OK\r\n"
        with connect(port) as second:
            assert read_quiet(second) == (b"-ERR max number of clients reached\r\n", True)


def test_config_set_requirepass_applies_to_new_connections():
    with bloomcast_node() as port, connect(port) as first:
        first.sendall(b"CONFIG SET requirepass s3cret\r\nPING\r\n")
        assert read_quiet(first)[0] == b"+OK\r\n+PONG\r\n"  # still authenticated
        with connect(port) as second:
            second.sendall(b"PING\r\nAUTH s3cret\r\nPING\r\nCONFIG SET requirepass ''\r\n")
            assert read_quiet(second)[0] == (
                b"-NOAUTH Authentication required.\r\n+OK\r\n+PONG\r\n+OK\r\n"
            )
        with connect(port) as third:
            third.sendall(b"PING\r\n")
            assert read_quiet(third)[0] == b"+PONG\r\n"
