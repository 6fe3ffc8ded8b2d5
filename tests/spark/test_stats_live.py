"""``bloomcast stats top --live HOST:PORT`` (issue 51) against real nodes: the
whole cluster's hot channels now, from BLOOMCAST.HOTCHANNELS CLUSTER, in the
table ``stats top`` prints for the Spark job's output; each mistake one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from bloomcast.testing import LocalCluster, free_port

pytestmark = pytest.mark.cluster

A1 = math.log(2.0) / 60.0  # the 1 m decay rate per second


def bloomcast(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomcast.cli", "stats", "top", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr.rstrip("\n")


def test_live_reads_the_cluster_wide_top_from_a_node() -> None:
    with LocalCluster(2, extra_args=["--loglevel", "warning"]) as cluster:
        cluster.wait_ready()
        # cluster-wide "hot" (100) leads "warm" (70), which node 0 alone ranks first
        plan = {0: {"warm": 70, "hot": 50, "cold": 5}, 1: {"hot": 50}}
        for node, counts in plan.items():
            with cluster.client(node) as r, r.pipeline(transaction=False) as pipe:
                for channel, n in counts.items():
                    for _ in range(n):
                        pipe.publish(channel, "m")
                pipe.execute()
        live = f"127.0.0.1:{cluster.ports[0]}"

        done = bloomcast("channels:1m", "--live", live, "--json", "-n", "2")
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        assert [r["bin"] for r in rows] == ["hot", "warm"]
        hot = rows[0]
        # 100 publishes, decayed a few seconds at most under 1 m
        assert 0.85 * 100 * A1 < hot["steady-state rate/s"] <= 100 * A1
        assert hot["decayed count"] == pytest.approx(hot["steady-state rate/s"] / A1)
        assert 0.85 * 100 < hot["decayed count"] <= 100
        assert hot["probability"] == pytest.approx(100 / 175, rel=0.02)  # of all 175

        table = bloomcast("channels:1m", "--live", live)
        assert table.returncode == 0, table.stderr
        assert f"live from {live} (merged over 2 nodes" in table.stdout
        assert "steady-state rate/s" in table.stdout and "probability" in table.stdout
        assert table.stdout.index("hot") < table.stdout.index("warm") < table.stdout.index("cold")

        rising = bloomcast("trending", "--live", live, "--json")
        assert rising.returncode == 0, rising.stderr
        assert {r["channel"] for r in json.loads(rising.stdout)} == {"hot", "warm", "cold"}
        assert set(json.loads(rising.stdout)[0]) == {
            "channel", "share channels:10s", "share channels:10m", "ratio"
        }  # fmt: skip

        assert one_line(bloomcast("forwarded:1m", "--live", live), 2) == (
            "bloomcast stats top: --live cannot read 'forwarded:1m': a node's summary answers "
            "channels:10s, channels:1m, channels:10m, trending (10s/10m) "
            "(the other distributions are the Spark job's: --redis or --out)"
        )
        assert one_line(bloomcast("channels:1h", "--live", live), 2).startswith(
            "bloomcast stats top: --live cannot read 'channels:1h'"
        )
        assert one_line(bloomcast("channels:1m", "--live", "nonsense"), 2) == (
            "bloomcast stats top: --live nonsense: expected HOST:PORT, the client port of a node"
        )
        assert one_line(bloomcast("channels:1m", "--live", live, "--now", "1"), 2) == (
            "bloomcast stats top: --now does not apply to --live (it reads now)"
        )


def test_live_from_an_unreachable_node_or_one_with_the_summary_off_is_one_line() -> None:
    port = free_port()  # nothing listens there
    assert one_line(bloomcast("channels:1m", "--live", f"127.0.0.1:{port}"), 1) == (
        f"bloomcast stats top: cannot read --live 127.0.0.1:{port}: "
        f"Error 111 connecting to 127.0.0.1:{port}. Connection refused."
    )
    with LocalCluster(1, extra_args=["--loglevel", "warning", "--hot-channels-size", "0"]) as one:
        done = bloomcast("channels:1m", "--live", f"127.0.0.1:{one.ports[0]}")
        assert one_line(done, 1) == (
            f"bloomcast stats top: cannot read --live 127.0.0.1:{one.ports[0]}: the "
            "hot-channels summary is off: CONFIG SET hot-channels-size <n> to turn it on"
        )
