"""INFO commandstats against the oracle: after CONFIG RESETSTAT and the same
commands (run, refused while checked, failing, queued in MULTI, aborted by
EXECABORT, refused in subscribed context), the same cmdstat_<name> lines with
the same calls, rejected_calls and failed_calls (usec masked: times differ;
lines compared as a set: Redis lists them in its hash order); and the
instantaneous_* fields where Redis has them."""

from __future__ import annotations

import re

import pytest

from tests.differential.oracle import exchange, redis_only

pytestmark = pytest.mark.timeout(120)

WORKLOAD = (
    b"PING\r\nPING a b\r\nFOO\r\nCLIENT FOO\r\nCLIENT\r\nCLIENT LIST TYPE x\r\n"
    b"MULTI\r\nPUBLISH a b\r\nPUBLISH\r\nEXEC\r\nMULTI\r\nSELECT 99\r\nECHO a\r\nEXEC\r\n"
    b"CONFIG GET maxclients\r\nSUBSCRIBE a\r\nECHO b\r\nPUBSUB HELP\r\nPUBSUB NUMSUB\r\n"
)


def _after_workload(port: int) -> tuple[set[str], str, list[str]]:
    exchange(port, b"CONFIG RESETSTAT\r\n")
    exchange(port, WORKLOAD)
    out = exchange(port, b"INFO commandstats\r\nINFO errorstats\r\nINFO stats\r\n")[0].decode()
    # three bulk replies: each "# Title\r\nfields", the next one's length after it
    commands, errors, stats = (part.split("\r\n$")[0] for part in out.split("# ")[1:])
    lines = {re.sub(r"usec=\d+,usec_per_call=\d+\.\d\d", "usec", x) for x in commands.split()}
    instantaneous = [x.split(":")[0] for x in stats.split() if x.startswith("instantaneous_")]
    return lines, errors, instantaneous


@redis_only
def test_commandstats_count_like_redis(servers):
    oracle, node = servers
    ours, theirs = _after_workload(node), _after_workload(oracle)
    assert ours[0] == theirs[0]
    assert "cmdstat_exec:calls=2,usec,rejected_calls=0,failed_calls=1" in ours[0]
    assert ours[1] == theirs[1]
    assert [f for f in theirs[2] if "repl" not in f] == ours[2]  # no replication here
