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
