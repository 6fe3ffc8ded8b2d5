"""A subscriber that reads nothing and whose PING CLIENT PAUSE ALL postponed,
while a peer node's PUBLISH fills its output buffer (issue 41): against a
Redis Cluster of redis-server 7.0.15, two masters, beside two bloomcast
nodes, with ``client-output-buffer-limit pubsub 1mb 0 0`` on both. What every
client sees must be the same: the subscriber is cut at its hard limit while
postponed (what reached its socket before is whole messages in order, Redis
writing to a postponed client as to any other) and never gets its PONG; a
subscriber on the same node that reads gets every message during the pause;
the publisher's replies count no receiver on its own node (Redis Cluster's
PUBLISH); the pausing client's UNPAUSE, postponed too, is answered when the
pause ends, and the reader is the one pub/sub client left; both servers log
the cut in Redis's words. Before issue 41 the node held those messages behind
the PING without a bound (281 MB of RSS for 256 MB published) and wrote the
PONG first once the pause was over."""

from __future__ import annotations

import re
import socket
import tempfile
import time
from pathlib import Path

import pytest

from bench.redis_cluster import RedisCluster
from bloomcast.testing import LocalCluster, redis_server_path
from tests.procs import connect, read_quiet

pytestmark = pytest.mark.timeout(120)

HARD = 1024 * 1024  # the pubsub hard limit set on both (no soft limit)
MESSAGE = b"m" * 8192
COUNT = 8 * HARD // len(MESSAGE)  # eight times the hard limit, published on the other node
BURST = 16
PAUSE_MS = 2500
FRAME = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$8192\r\n" + MESSAGE + b"\r\n"
CUT_LOG = b"scheduled to be closed ASAP for overcoming of output buffer limits."


def _bulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def _read_exactly(s: socket.socket, n: int, timeout: float = 60) -> bytes:
    s.settimeout(timeout)
    got = bytearray()
    while len(got) < n:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        got += chunk
    return bytes(got)


def _client_id(s: socket.socket) -> bytes:
    s.sendall(b"CLIENT ID\r\n")
    return read_quiet(s)[0][1:-2]


def _case(a: int, b: int, log: Path) -> dict[str, object]:
    """Node ``a`` holds the subscribers and the pause, node ``b`` publishes."""
    with connect(a) as ctl, connect(b) as pub, connect(a) as reader, connect(a) as sub:
        limit = b"pubsub %d 0 0" % HARD
        ctl.sendall(_bulk(b"CONFIG", b"SET", b"client-output-buffer-limit", limit))
        assert read_quiet(ctl)[0] == b"+OK\r\n"
        sub.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        ids = {_client_id(s): name for s, name in ((sub, "subscriber"), (reader, "reader"))}
        confirm = b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
        for s in (sub, reader):
            s.sendall(b"SUBSCRIBE ch\r\n")
            assert _read_exactly(s, len(confirm), 10) == confirm
        # until node b routes ch to node a (bloomcast's filter; Redis broadcasts)
        for _ in range(100):
            pub.sendall(b"PUBLISH ch warm\r\n")
            assert _read_exactly(pub, 4, 10) == b":0\r\n"
            if read_quiet(reader, 0.1)[0]:
                break
        else:
            raise AssertionError("node b never reached node a's subscriber")
        read_quiet(sub)
        ctl.sendall(b"CLIENT PAUSE %d ALL\r\n" % PAUSE_MS)
        assert read_quiet(ctl)[0] == b"+OK\r\n"
        paused = time.monotonic()
        sub.sendall(b"PING\r\n")  # postponed: BLOCKED until the pause ends
        time.sleep(0.2)
        replies, delivered = bytearray(), bytearray()
        # in bursts of 128 KB, each once the reader has the last one: no
        # reader falls behind (Redis writes at most 64 KB to a client per
        # event-loop turn, NET_MAX_WRITES_PER_EVENT)
        for _ in range(COUNT // BURST):
            pub.sendall(_bulk(b"PUBLISH", b"ch", MESSAGE) * BURST)
            replies += _read_exactly(pub, 4 * BURST)
            delivered += _read_exactly(reader, len(FRAME) * BURST)
        in_time = time.monotonic() - paused < PAUSE_MS / 1000
        # what reached the subscriber's socket (its window is tiny: not all of it)
        got = read_quiet(sub, 0.3, limit=1.0)[0]
        whole = len(got) // len(FRAME)
        ctl.sendall(b"CLIENT UNPAUSE\r\n")  # postponed too (ALL): run when the pause ends
        unpause = _read_exactly(ctl, 5, 30)
        ctl.sendall(b"CLIENT LIST TYPE pubsub\r\n")
        listed = read_quiet(ctl)[0].split(b"\r\n", 1)[1]  # the bulk's lines
        left = sorted(ids[i] for i in re.findall(rb"(?:^|\n)id=(\d+) ", listed))
        got += read_quiet(sub, 0.3, limit=1.0)[0]  # no PONG even once the pause is over
    return {
        "publisher": bytes(replies) == b":0\r\n" * COUNT,
        "reader got every message during the pause": bytes(delivered) == FRAME * COUNT and in_time,
        "subscriber got only whole messages, in order": got[: whole * len(FRAME)] == FRAME * whole
        and FRAME.startswith(got[whole * len(FRAME) : (whole + 1) * len(FRAME)]),
        "subscriber got a PONG": b"pong" in got.lower(),
        "unpause": unpause,
        "pub/sub clients left": left,
        "cut logged": CUT_LOG in log.read_bytes(),
    }


def test_a_paused_subscriber_is_cut_at_its_hard_limit_like_redis_cluster():
    binary = redis_server_path()
    if binary is None:
        pytest.skip("redis-server (Debian's 7.0.15, the oracle) is not installed")
    with RedisCluster(2, binary=binary) as oracle:
        want = _case(oracle.ports[0], oracle.ports[1], oracle.nodes[0].workdir / "server.log")
    with (
        tempfile.TemporaryDirectory() as logs,
        LocalCluster(2, log_dir=logs) as cluster,
    ):
        got = _case(cluster.ports[0], cluster.ports[1], Path(logs) / "node-0.log")
    assert got == want
    assert want == {
        "publisher": True,
        "reader got every message during the pause": True,
        "subscriber got only whole messages, in order": True,
        "subscriber got a PONG": False,
        "unpause": b"+OK\r\n",
        "pub/sub clients left": ["reader"],
        "cut logged": True,
    }
