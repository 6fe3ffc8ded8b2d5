"""Hostile input against a real node process, with a PING probe from a second
client: the probe must be answered while the hostile work is still in
progress (issue 14). The assertions are about order — the probe's PONG
arrives before the hostile client's work is done — never about how long
anything took (speed: ``bloomcast bench hostile``, docs/benchmarks.md).

On the code before this issue each of these failed: a pattern of 50,000 ``[``
held the loop ~10 ms per channel, and libuv read a busy socket again and
again in one turn, so the probe waited behind the whole hostile payload."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time

import pytest
import redis

from router.glob import stringmatch
from tests.procs import bloomcast_node, connect, read_quiet

pytestmark = pytest.mark.timeout(300)


def _probe_while(
    port: int, hostile: socket.socket, payload: bytes, *, first_reply: bool, paced: bool = False
) -> tuple[bytes, int]:
    """Send ``payload`` on ``hostile`` from a thread; once the node is busy
    with it (its first reply, or a moment after the send began), PING from a
    new client, then ask INFO on the same connection. Returns the probe's
    first reply and ``total_net_input_bytes`` as the node had it when it
    answered: less than the payload means the node answered the probe before
    it had even read all the hostile bytes.

    ``paced``: the payload goes in 32 KiB writes 5 ms apart, so it streams in
    for a while however fast the node parses (the compiled parser reads 7 MB
    of bulks before a probe of an unpaced flood has even connected)."""
    send = _send_paced if paced else _send_until_closed
    sender = threading.Thread(target=send, args=(hostile, payload), daemon=True)
    sender.start()
    if first_reply:
        hostile.settimeout(60)
        assert hostile.recv(1, socket.MSG_PEEK)
    else:
        time.sleep(0.05)
    with connect(port) as probe:
        probe.settimeout(60)
        probe.sendall(b"PING\r\nINFO stats\r\n")
        got = b""
        while b"total_net_input_bytes:" not in got or not got.endswith(b"\r\n\r\n"):
            got += probe.recv(1 << 16)
    pong, _, info = got.partition(b"\r\n")
    read = int(info.split(b"total_net_input_bytes:")[1].split(b"\r\n")[0])
    return pong + b"\r\n", read


def _send_until_closed(sock: socket.socket, payload: bytes) -> None:
    """``sock.sendall(payload)``, ended quietly when the test closes ``sock``
    (or the node cuts it) before every byte is sent: the hostile sender is
    meant to be cut off mid-request."""
    with contextlib.suppress(OSError):
        sock.sendall(payload)


def _send_paced(sock: socket.socket, payload: bytes) -> None:
    """:func:`_send_until_closed` in 32 KiB writes 5 ms apart."""
    with contextlib.suppress(OSError):
        for i in range(0, len(payload), 1 << 15):
            sock.sendall(payload[i : i + (1 << 15)])
            time.sleep(0.005)


def _bulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def test_probe_answered_while_a_huge_multibulk_streams_in():
    # a 1,048,576-element multibulk that never completes: 1,000,000 arguments
    # (7 MB, more than the socket buffers hold, so the sender is still
    # sending while the node parses)
    payload = b"*1048576\r\n" + b"$1\r\nx\r\n" * 1_000_000
    with bloomcast_node() as port, connect(port) as hostile:
        pong, read = _probe_while(port, hostile, payload, first_reply=False, paced=True)
        assert pong == b"+PONG\r\n"
        assert read < len(payload), "the probe waited for the whole hostile request"
        info = redis.Redis(port=port).info("stats")
        assert info["total_request_slices"] > 0


def test_probe_answered_between_pipelined_hostile_pubsub_channels():
    pattern = b"[" * 50_000
    requests = 100
    with bloomcast_node() as port, connect(port) as sub, connect(port) as hostile:
        names = [b"chan:%d" % i for i in range(20_000)] + [b"["]
        sub.sendall(_bulk(b"SUBSCRIBE", *names))
        read_quiet(sub, 0.5)
        payload = _bulk(b"PUBSUB", b"CHANNELS", pattern) * requests
        pong, _ = _probe_while(port, hostile, payload, first_reply=True)
        assert pong == b"+PONG\r\n"
        hostile.settimeout(0)
        try:
            replies_at_pong = hostile.recv(1 << 20, socket.MSG_PEEK).count(b"*1\r\n")
        except BlockingIOError:
            replies_at_pong = 0
        assert replies_at_pong < requests, "the probe waited for every hostile request"
        # and each of them answers as Redis does: only the channel "[" matches
        hostile.settimeout(60)
        want = b"*1\r\n$1\r\n[\r\n" * requests
        got = b""
        while len(got) < len(want):
            got += hostile.recv(1 << 20)
        assert got == want


@pytest.mark.parametrize(
    "pattern",
    [b"*a" * 1000 + b"b", b"a*" * 5000 + b"b", b"?" * 50_000, b"[a-" * 20_000, b"*[" * 20_000],
)
def test_hostile_psubscribe_patterns_answer_publishes_as_redis_with_a_probe(pattern):
    publishes = 200
    channel = b"a" * 3000
    with bloomcast_node() as port, connect(port) as sub, connect(port) as hostile:
        sub.sendall(_bulk(b"PSUBSCRIBE", pattern))
        read_quiet(sub, 0.3)
        payload = _bulk(b"PUBLISH", channel, b"m") * publishes
        pong, _ = _probe_while(port, hostile, payload, first_reply=True)
        assert pong == b"+PONG\r\n"
        hostile.settimeout(60)
        got = b""
        while got.count(b"\r\n") < publishes:
            got += hostile.recv(1 << 20)
        # the receiver counts are Redis's (router.glob; the oracle test is
        # tests/differential/test_glob_hostile.py)
        want = b":%d\r\n" % stringmatch(pattern, channel)
        assert got == want * publishes


def test_probe_answered_while_a_100k_channel_subscribe_runs_and_its_replies_are_redis_s():
    n = 100_000
    names = [b"c%d" % i for i in range(n)]
    payload = _bulk(b"SUBSCRIBE", *names)
    with bloomcast_node() as port, connect(port) as hostile:
        pong, read = _probe_while(port, hostile, payload, first_reply=False, paced=True)
        assert pong == b"+PONG\r\n"
        hostile.settimeout(60)
        got = b""
        while got.count(b"$9\r\nsubscribe\r\n") < n:
            got += hostile.recv(1 << 22)
        # the probe was answered before the node had even read the whole
        # request (it reads it in slices, then subscribes in slices)
        assert read < len(payload), "the probe waited for the whole SUBSCRIBE"
        want = b"".join(
            b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%b\r\n:%d\r\n" % (len(c), c, i + 1)
            for i, c in enumerate(names)
        )
        assert got == want
        # a message published meanwhile comes after every confirmation
        redis.Redis(port=port).publish("c0", "after")
        more = hostile.recv(1 << 16)
        assert more == b"*3\r\n$7\r\nmessage\r\n$2\r\nc0\r\n$5\r\nafter\r\n"
        info = redis.Redis(port=port).info("stats")
        assert info["pubsub_channels"] == n
    # (the disconnect then drops the 100,000 subscriptions in slices too)


def test_a_client_with_100k_subscriptions_leaves_every_channel_when_it_goes():
    n = 100_000
    with bloomcast_node() as port:
        with connect(port) as sub:
            sub.sendall(_bulk(b"SUBSCRIBE", *[b"c%d" % i for i in range(n)]))
            sub.settimeout(60)
            got = b""
            while got.count(b"$9\r\nsubscribe\r\n") < n:
                got += sub.recv(1 << 22)
        r = redis.Redis(port=port)
        for _ in range(200):
            if r.info("stats")["pubsub_channels"] == 0:
                break
            time.sleep(0.05)
        assert r.info("stats")["pubsub_channels"] == 0


@pytest.mark.parametrize(
    ("subscribe", "unsubscribe"),
    [(b"SUBSCRIBE", b"UNSUBSCRIBE"), (b"SSUBSCRIBE", b"SUNSUBSCRIBE")],
)
def test_probe_answered_while_a_bare_unsubscribe_of_200k_runs(subscribe, unsubscribe):
    """Issue 28: a bare (S)UNSUBSCRIBE runs under the shared budget; another
    client is answered while it is still in progress, and the reply is every
    name once, the counts going down to 0, as Redis's (in its own order)."""
    n = 200_000
    with bloomcast_node() as port, connect(port) as hostile:
        hostile.sendall(_bulk(subscribe, *[b"c%d" % i for i in range(n)]))
        hostile.settimeout(60)
        got = b""
        while not got.endswith(b":%d\r\n" % n):
            got = got[-64:] + hostile.recv(1 << 22)
        hostile.sendall(unsubscribe + b"\r\n")
        time.sleep(0.05)  # it has started (its reply leaves whole, at the end)
        with connect(port) as probe:
            probe.settimeout(60)
            probe.sendall(b"PING\r\nINFO stats\r\n")
            seen = b""
            while not seen.endswith(b"\r\n\r\n"):
                seen += probe.recv(1 << 16)
        assert seen.startswith(b"+PONG\r\n")
        field = b"pubsub_channels:" if subscribe == b"SUBSCRIBE" else b"pubsubshard_channels:"
        left = int(seen.split(field)[1].split(b"\r\n")[0])
        assert left > 0, "the probe waited for the whole unsubscribe"
        kind = unsubscribe.lower()
        reply = b""
        while reply.count(b"\r\n" + kind + b"\r\n") < n:
            reply += hostile.recv(1 << 22)
        assert reply.endswith(b":0\r\n")
        names = re.findall(rb"\r\n" + kind + rb"\r\n\$\d+\r\n(c\d+)\r\n:(\d+)\r\n", reply)
        assert sorted(int(c[1:]) for c, _ in names) == list(range(n))
        assert [int(k) for _, k in names] == list(range(n - 1, -1, -1))
