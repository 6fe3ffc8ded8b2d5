"""Output buffer limits for slow subscribers, and filters that follow the
subscriptions exactly (what the cluster bus gossips)."""

from __future__ import annotations

import socket
import time

import pytest
import redis

from bloom import CountingBloomFilter, PatternFilter
from tests.procs import bloomcast_node, connect, read_quiet

pytestmark = pytest.mark.timeout(120)


def _info(r: redis.Redis, section: str) -> dict:
    return r.info(section)


def test_slow_subscriber_is_cut_and_others_keep_receiving():
    hard = 256 * 1024
    with bloomcast_node("--pubsub-hard-limit", str(hard)) as port:
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", port))
        slow.sendall(b"SUBSCRIBE feed\r\n")
        r = redis.Redis(port=port)
        fast = r.pubsub()
        fast.subscribe("feed")
        assert fast.get_message(timeout=2)["type"] == "subscribe"
        payload = b"x" * 10_000
        sent = 0
        received = 0
        cut = False
        for i in range(3000):  # at most 30 MB; stops once the slow one is cut
            r.publish("feed", payload + str(i).encode())
            sent += 1
            while (m := fast.get_message(ignore_subscribe_messages=True, timeout=0)) is not None:
                assert m["data"] == payload + str(received).encode()
                received += 1
            if i % 50 == 0 and _info(r, "stats")["client_output_buffer_limit_disconnections"]:
                cut = True
                break
        assert cut, "the slow subscriber was never disconnected"
        for _ in range(20 * sent):
            if received == sent:
                break
            m = fast.get_message(ignore_subscribe_messages=True, timeout=1)
            if m is not None:
                assert m["data"] == payload + str(received).encode()
                received += 1
        assert received == sent  # the fast subscriber lost nothing
        assert r.pubsub_numsub("feed") == [(b"feed", 1)]  # only the fast one left
        assert r.ping()
        slow.close()


def test_a_subscriber_behind_a_full_socket_gets_every_message_whole_and_in_order():
    """Messages its socket takes only in part (a small receive buffer, not
    read meanwhile): the rest waits in the transport and later messages
    behind it; once it reads, it has every byte, in order (the compiled
    plane sends on the socket itself only while its transport holds nothing)."""
    with bloomcast_node() as port:
        sub = socket.socket()
        sub.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sub.connect(("127.0.0.1", port))
        sub.settimeout(30)
        sub.sendall(b"SUBSCRIBE big\r\n")
        confirm = b"*3\r\n$9\r\nsubscribe\r\n$3\r\nbig\r\n:1\r\n"
        got = b""
        while len(got) < len(confirm):
            got += sub.recv(4096)
        assert got == confirm
        payloads = [bytes([65 + i % 26]) * 200_000 for i in range(20)]  # 4 MB: under the limits
        with redis.Redis(port=port) as r:
            for payload in payloads:
                assert r.publish("big", payload) == 1
        expected = b"".join(
            b"*3\r\n$7\r\nmessage\r\n$3\r\nbig\r\n$%d\r\n%s\r\n" % (len(p), p) for p in payloads
        )
        got = b""
        while len(got) < len(expected):
            chunk = sub.recv(1 << 16)
            assert chunk, "closed"
            got += chunk
        assert got == expected
        sub.close()


def _rebuilt(info: dict, channels: list[bytes], patterns: list[bytes]) -> tuple[str, str, int]:
    cf = CountingBloomFilter(info["channel_filter_m"], info["channel_filter_k"])
    for c in channels:
        cf.add(c)
    pf = PatternFilter(info["pattern_filter_m"], info["pattern_filter_k"])
    for p in patterns:
        pf.add(p)
    return f"{cf.fingerprint():016x}", f"{pf.fingerprint():016x}", cf.set_bits


def _filters(r: redis.Redis) -> tuple[str, str, int]:
    info = r.info("filters")
    return (
        str(info["channel_filter_fingerprint"]).zfill(16),
        str(info["pattern_filter_fingerprint"]).zfill(16),
        info["channel_filter_set_bits"],
    )


def test_filters_follow_subscriptions():
    with bloomcast_node() as port:
        r = redis.Redis(port=port)
        info = r.info("filters")
        a, b = connect(port), connect(port)
        a.sendall(b"SUBSCRIBE x y\r\nPSUBSCRIBE news.* h?llo\r\nSSUBSCRIBE s1\r\n")
        b.sendall(b"SUBSCRIBE y z\r\nPSUBSCRIBE news.*\r\n")
        read_quiet(a)
        read_quiet(b)
        want = _rebuilt(info, [b"x", b"y", b"s1", b"z"], [b"news.*", b"h?llo"])
        assert _filters(r) == want
        a.sendall(b"UNSUBSCRIBE y\r\nPUNSUBSCRIBE h?llo\r\n")
        read_quiet(a)
        assert _filters(r) == _rebuilt(info, [b"x", b"y", b"s1", b"z"], [b"news.*"])
        b.sendall(b"RESET\r\n")
        read_quiet(b)
        assert _filters(r) == _rebuilt(info, [b"x", b"s1"], [b"news.*"])
        a.close()
        deadline = time.monotonic() + 5
        while _filters(r) != _rebuilt(info, [], []) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _filters(r) == _rebuilt(info, [], [])
        b.close()
