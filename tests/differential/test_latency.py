"""LATENCY LATEST | HISTORY | RESET | DOCTOR | HELP against the oracle
(redis-server 7.0.15), byte for byte where no event was recorded (an event's
times and milliseconds are each process's own); a node's ``command`` event
when a command passes ``latency-monitor-threshold``."""

from __future__ import annotations

import re

import pytest

from tests.differential.oracle import HELLO3, assert_same_as_oracle, redis_only
from tests.procs import connect, read_quiet

pytestmark = [pytest.mark.timeout(120), redis_only]

CASES = {
    "empty": b"LATENCY LATEST\r\nLATENCY HISTORY command\r\nLATENCY RESET\r\n"
    b"LATENCY RESET command fast-command\r\n",
    "doctor disabled": b"LATENCY DOCTOR\r\n" + HELLO3 + b"LATENCY DOCTOR\r\n",
    "doctor enabled": b"CONFIG SET latency-monitor-threshold 10000\r\nLATENCY DOCTOR\r\n"
    b"CONFIG SET latency-monitor-threshold 0\r\n",
    "help": b"LATENCY HELP\r\nlatency help\r\n",
    "errors": b"LATENCY\r\nLATENCY FOO\r\nLATENCY HISTORY\r\nLATENCY HISTORY a b\r\n"
    b"LATENCY LATEST x\r\nLATENCY DOCTOR x\r\nLATENCY HELP x\r\n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_latency_same_bytes_as_the_oracle(servers, name):
    assert_same_as_oracle(servers, CASES[name])


def test_a_slow_command_is_a_command_event(servers):
    _, node = servers
    names = [b"PUBSUB", b"NUMSUB", *(b"c%d" % i for i in range(200000))]
    many = b"*%d\r\n" % len(names) + b"".join(b"$%d\r\n%b\r\n" % (len(n), n) for n in names)
    with connect(node) as s:
        s.sendall(b"LATENCY RESET\r\nCONFIG SET latency-monitor-threshold 1\r\n")
        read_quiet(s)
        for _ in range(10):  # (the handler alone is timed: ~1 ms compiled)
            s.sendall(many + b"PING\r\n")
            got = b""
            s.settimeout(10)
            while not got.endswith(b"+PONG\r\n"):
                got += s.recv(1 << 20)
            s.sendall(b"LATENCY LATEST\r\nLATENCY HISTORY command\r\nLATENCY DOCTOR\r\n")
            reply, _ = read_quiet(s)
            if not reply.startswith(b"*0\r\n"):
                break
        s.sendall(b"CONFIG SET latency-monitor-threshold 0\r\nLATENCY RESET\r\n")
        assert read_quiet(s)[0] == b"+OK\r\n:1\r\n"
    latest = re.match(rb"\*1\r\n\*4\r\n\$7\r\ncommand\r\n:(\d+)\r\n:(\d+)\r\n:(\d+)\r\n", reply)
    assert latest is not None and int(latest[2]) >= 1 and int(latest[3]) >= int(latest[2])
    assert b"\r\n*1\r\n*2\r\n:%s\r\n:%s\r\n" % (latest[1], latest[2]) in reply
    assert re.search(rb"1\. command: \d+ latency spikes \(average \d+ms, mean deviation", reply)
    assert b"- Check your Slow Log to understand" in reply


def _parse(data: bytes, pos: int = 0) -> tuple[object, int]:
    """One RESP2/RESP3 value (arrays and maps as lists) and where the next begins."""
    kind, nl = data[pos : pos + 1], data.index(b"\r\n", pos)
    head, pos = data[pos + 1 : nl], nl + 2
    if kind == b"$":
        return data[pos : pos + int(head)], pos + int(head) + 2
    if kind in (b"*", b"%"):
        items = []
        for _ in range(int(head) * (2 if kind == b"%" else 1)):
            item, pos = _parse(data, pos)
            items.append(item)
        return items, pos
    if kind in (b"+", b"-"):
        return head, pos
    return int(head), pos


#: the histogram's bucket bounds, microseconds (Redis 7's: 1, 2, 4, 8, 16, 33, ...)
BUCKETS = {((1032 << i) - 1) // 1000 for i in range(21)}


def _histograms(port: int, payload: bytes, query: bytes) -> dict[bytes, tuple[int, list[int]]]:
    """name -> (calls, bucket bounds) of ``query``'s reply (a LATENCY
    HISTOGRAM) sent after ``payload``'s replies came (the node counts a
    pipelined batch's time, and so its histogram, when the batch ends)."""
    with connect(port) as s:
        s.sendall(payload)
        read_quiet(s)
        s.sendall(query)
        reply, _ = read_quiet(s)
    pos, value = 0, None
    while pos < len(reply):
        value, pos = _parse(reply, pos)
    assert isinstance(value, list)
    out = {}
    for name, cdf in zip(value[::2], value[1::2], strict=True):
        assert cdf[0] == b"calls" and cdf[2] == b"histogram_usec"
        bounds, counts = cdf[3][::2], cdf[3][1::2]
        assert set(bounds) <= BUCKETS and bounds == sorted(bounds)
        assert counts == sorted(counts) and counts[-1] == cdf[1]  # cumulative
        out[name] = (cdf[1], bounds)
    return out


@pytest.mark.parametrize("hello", [b"", HELLO3])
def test_latency_histogram_as_redis(servers, hello):
    """The commands and their calls as Redis's (each bucket's count is the
    process's own timing), Redis's bucket bounds, cumulative counts."""
    payload = (
        hello + b"CONFIG RESETSTAT\r\nPING\r\nPING\r\nPUBLISH a b\r\nPUBSUB NUMSUB a\r\n"
        b"CONFIG GET maxclients\r\nNOSUCH\r\n"
    )
    query = b"LATENCY HISTOGRAM ping config pubsub nosuch publish\r\n"
    oracle, node = servers
    theirs, ours = _histograms(oracle, payload, query), _histograms(node, payload, query)
    assert {n: calls for n, (calls, _) in ours.items()} == {
        n: calls for n, (calls, _) in theirs.items()
    }
    assert set(ours) == {b"ping", b"config|get", b"config|resetstat", b"pubsub|numsub", b"publish"}
    everything = _histograms(node, b"", b"LATENCY HISTOGRAM\r\n")
    assert set(everything) >= set(ours) and everything[b"ping"][0] == 2
