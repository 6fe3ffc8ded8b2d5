"""`bloomcast bench scale --quick`: a 3-node bloomcast cluster and a 3-node Redis
Cluster (node timeout 2 s, 2 s idle window) end to end; the section, the JSON
and the plot are written with numbers that make sense. Speed is not asserted.
Also the markdown alone, from a made-up result (ratios and growth)."""

import json
import shutil
import time

import pytest

from bench.scale import cpu_ns, descendants, rss_mb
from bench.scale_report import growth, scale_markdown
from bloomcast.cli import main

DOC = "# Benchmarks\n\n## spark\n\nspark text, owned by another part\n"


@pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None,
    reason="needs Debian's redis-server and redis-tools",
)
def test_scale_quick_writes_section_json_and_plot(tmp_path):
    (tmp_path / "benchmarks.md").write_text(DOC)
    assert main(["bench", "scale", "--quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    scale = data["scale"]
    assert scale["plan"]["sizes"] == [3] and scale["plan"]["node_timeout_ms"] == 2000
    (size,) = scale["sizes"]
    assert size["nodes"] == 3
    for system in ("bloomcast", "redis"):
        row = size["results"][system]
        assert "error" not in row, row
        assert row["bus_bytes_per_s_per_node"] > 0
        assert row["cpu_pct_per_node"] >= 0
        assert 1 < row["rss_mb_mean"] <= row["rss_mb_max"] < 1000
        assert 0 < row["ready_s"] < 60
        assert row["processes"] >= 3
        assert row["sockets_per_node"]["mean"] >= 2 * 2  # a link each way to 2 peers
        pub = row["publish"]
        assert pub["delivered"] == pub["published"] == 200 and pub["delivered_once"]
        assert pub["rate_rps"] > 0
        # bloomcast: one bus message per PUBLISH (the subscriber's node); Redis: N - 1
        want = 1.0 if system == "bloomcast" else 2.0
        assert pub["bus_per_publish"] == pytest.approx(want, abs=0.05), pub
        sub = row["subscribe"]
        assert sub["probes"] == 50
        for key in ("subscribe_p50_ms", "subscribe_p99_ms", "subscribe_max_ms",
                    "unsubscribe_p50_ms", "unsubscribe_p99_ms"):  # fmt: skip
            assert isinstance(sub[key], float) and sub[key] > 0, (key, sub)
        assert sub["subscribe_p50_ms"] <= sub["subscribe_p99_ms"] <= sub["subscribe_max_ms"]
        d = row["detection"]
        assert d["reported"] == d["live"] == 2
        # the node timeout is 2 s: nobody can call the node failed before it
        assert 2.0 <= d["seconds"] < 30
    text = (tmp_path / "benchmarks.md").read_text()
    assert text.startswith(DOC)  # another part's section untouched
    assert "## scale" in text and "uv run bloomcast bench scale --quick" in text
    assert "| 3 | bloomcast |" in text and "| 3 | redis |" in text
    assert "| 3 | bloomcast | 50 |" in text and "| 3 | redis | 50 |" in text  # SUBSCRIBE
    assert (tmp_path / "idle_cost_vs_n.png").stat().st_size > 10_000


def test_proc_readings_of_this_process():
    import os

    me = os.getpid()
    assert me in descendants([me])
    before = cpu_ns([me])
    start = time.process_time()
    while time.process_time() - start < 0.05:  # 50 ms on the CPU, however long it takes
        pass
    assert cpu_ns([me]) - before >= 40_000_000  # nanoseconds, not clock ticks
    assert cpu_ns([2**31]) == 0  # gone
    assert rss_mb(me) > 1
    assert rss_mb(2**31) == 0.0  # gone


def _row(nbytes, cpu, detect, per_publish=1.0):
    return {"ready_s": 4.0, "bus_bytes_per_s_per_node": nbytes, "cpu_pct_per_node": cpu,
            "rss_mb_mean": 40.0, "rss_mb_max": 42.0, "window_s": 20.0, "processes": 10,
            "sockets_per_node": {"mean": 21.0, "max": 23},
            "publish": {"published": 2000, "delivered": 2000, "delivered_once": True,
                        "bus_per_publish": per_publish, "minimum_per_publish": 1.0,
                        "rate_rps": 50000.0},
            "subscribe": {"probes": 200, "subscribe_p50_ms": 0.25, "subscribe_p99_ms": 1.5,
                          "subscribe_max_ms": 4.0, "unsubscribe_p50_ms": 0.125,
                          "unsubscribe_p99_ms": 0.5},
            "startup": {"meet_sent": {"mean": 9.0, "max": 10},
                        "filter_full_sent": {"mean": 18.0, "max": 20}},
            "detection": {"seconds": detect, "reported": 9, "live": 9}}  # fmt: skip


def test_markdown_ratios_growth_and_failures():
    result = {
        "commit": "abc1234",
        "versions": {"redis-server (scale)": "Redis 7.0.15"},
        "plan": {"node_timeout_ms": 15000, "settle_s": 5.0, "window_s": 20.0, "poll_s": 0.25},
        "sizes": [
            {"nodes": 10, "results": {"bloomcast": _row(8000, 0.5, 20.0),
                                      "redis": _row(4000, 0.1, 25.0, 9.0)}},
            {"nodes": 50, "results": {"bloomcast": _row(40000, 2.5, 22.0),
                                      "redis": {"error": "TimeoutError: slow"}}},
        ],
    }  # fmt: skip
    text = scale_markdown(result, "uv run bloomcast bench scale")
    assert "| 10 | bloomcast | 4.0 | 8,000 | 0.50% | 40.0 / 42.0 | 21 | 20.0 |" in text
    assert "| 10 | redis | 2,000 / 2,000 (once each) | 9.00 (minimum 1) | 50,000 |" in text
    assert "| 10 | 9.0 (10) | 0 | 0 | 0 | 0 | 18.0 (20) | 0 | 0 | 0 |" in text
    assert "| 10 | 2.00x | 5.00x | 1.00x | 1.00x | 0.80x |" in text
    assert "| 50 | redis | failed: TimeoutError: slow |" in text
    assert "| 10 | redis | 200 | 0.25 | 1.50 | 4.00 | 0.12 / 0.50 |" in text
    assert growth(result, "bloomcast", "bus_bytes_per_s_per_node") == (10, 50, 5.0)
    assert growth(result, "redis", "bus_bytes_per_s_per_node") is None  # one point only
    assert "- bloomcast, N = 10 to N = 50 (x5.0 nodes): per node idle bus B/s x5.00" in text
    assert "Reproduce: `uv run bloomcast bench scale`" in text
