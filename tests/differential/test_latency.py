"""LATENCY LATEST | HISTORY | RESET | DOCTOR | HELP against the oracle
(redis-server 7.0.15), byte for byte where no event was recorded (an event's
times and milliseconds are each process's own); a node's ``command`` event
when a command passes ``latency-monitor-threshold``."""

from __future__ import annotations

import re
import socket
import time

import pytest

from router.latency import Series, graph
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
    "graph errors": b"LATENCY GRAPH\r\nLATENCY GRAPH command\r\nLATENCY GRAPH a b\r\n"
    b"latency graph \xff\x00x\r\n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_latency_same_bytes_as_the_oracle(servers, name):
    assert_same_as_oracle(servers, CASES[name])


def test_a_slow_command_is_a_command_event(servers):
    """The node's ``command`` event (its other events may come with it: the
    3 MB reply's write is a ``fanout-turn``, tests/router/test_latency.py)."""
    _, node = servers
    with connect(node) as s:
        s.sendall(b"LATENCY RESET\r\nCONFIG SET latency-monitor-threshold 1\r\n")
        read_quiet(s)
        for _ in range(10):  # (the handler alone is timed: ~1 ms compiled)
            _slow_numsub(s, 200_000)
            s.sendall(b"LATENCY LATEST\r\nLATENCY HISTORY command\r\nLATENCY DOCTOR\r\n")
            reply, _ = read_quiet(s)
            latest, pos = _parse(reply)
            history, pos = _parse(reply, pos)
            doctor, _ = _parse(reply, pos)
            events = {e[0]: e[1:] for e in latest}  # type: ignore[union-attr, index]
            if b"command" in events:
                break
        s.sendall(b"CONFIG SET latency-monitor-threshold 0\r\nLATENCY RESET\r\n")
        reset = re.fullmatch(rb"\+OK\r\n:(\d+)\r\n", read_quiet(s)[0])
    # (an event of the node's own may come between LATEST and RESET)
    assert reset is not None and int(reset[1]) >= len(events)
    when, ms, worst = events[b"command"]
    assert ms >= 1 and worst >= ms and history == [[when, ms]]
    assert re.search(rb"\d\. command: \d+ latency spikes \(average \d+ms, mean deviation", doctor)
    assert b"- Check your Slow Log to understand" in doctor


def _slow_numsub(s: socket.socket, channels: int) -> None:
    """PUBSUB NUMSUB of ``channels`` names: a command of some milliseconds."""
    names = [b"PUBSUB", b"NUMSUB", *(b"c%d" % i for i in range(channels))]
    s.sendall(b"*%d\r\n" % len(names) + b"".join(b"$%d\r\n%b\r\n" % (len(n), n) for n in names))
    s.sendall(b"PING\r\n")
    got = b""
    s.settimeout(10)
    while not got.endswith(b"+PONG\r\n"):
        got += s.recv(1 << 20)


def test_latency_graph_draws_the_samples_as_redis_does(servers):
    """Each server records ``command`` samples in three different seconds;
    its LATENCY GRAPH, read in one second with its HISTORY and LATEST,
    equals router.latency.graph over those samples: the oracle's proves the
    renderer, the node's its command."""
    for port in servers:
        with connect(port) as s:
            s.sendall(b"LATENCY RESET\r\nCONFIG SET latency-monitor-threshold 1\r\n")
            read_quiet(s)
            for channels in (300_000, 30_000, 120_000):
                _slow_numsub(s, channels)
                time.sleep(1.05)  # (one sample a second)
            for _ in range(5):
                s.sendall(
                    b"TIME\r\nLATENCY HISTORY command\r\nLATENCY LATEST\r\n"
                    b"LATENCY GRAPH command\r\nTIME\r\n"
                )
                data, _ = read_quiet(s)
                pos, values = 0, []
                for _ in range(5):
                    value, pos = _parse(data, pos)
                    values.append(value)
                before, history, latest, drawn, after = values
                if before[0] == after[0]:
                    break
            s.sendall(b"CONFIG SET latency-monitor-threshold 0\r\nLATENCY RESET\r\n")
            read_quiet(s)
        assert len(history) >= 2, (port, history)
        series = Series()
        for when, ms in history:
            series.add(ms, when)
        series.max = next(e[3] for e in latest if e[0] == b"command")  # (LATEST: any order)
        assert drawn.decode() == graph("command", series, int(before[0])), port


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
