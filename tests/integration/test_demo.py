"""``bloomcast demo``: THE end-to-end test of the product.

:func:`test_demo_end_to_end` runs the real command (node processes, cluster
bus, traffic tap, redis-py clients, a local Spark) with a small workload and
checks its verdict and its report. It is never skipped: when a part is
missing the demo exits 2 and this test fails, naming the part.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bloomcast.demo import parse_duration
from bloomcast.demo.report import percentiles, plot_chart, write_report
from tests.procs import ignore_sigint

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_parse_duration():
    assert parse_duration("30s") == 30.0
    assert parse_duration("2m") == 120.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("7") == 7.0
    with pytest.raises(Exception, match="invalid duration"):
        parse_duration("soon")


def test_percentiles_nearest_rank():
    p = percentiles([float(x) for x in range(1, 101)])
    assert (p["count"], p["p50"], p["p99"], p["max"]) == (100, 50.0, 99.0, 100.0)
    assert percentiles([3.0]) == {"count": 1, "p50": 3.0, "p99": 3.0, "max": 3.0}
    assert math.isnan(percentiles([])["p50"])


def test_report_and_chart_files(tmp_path):
    report = {
        "ok": True,
        "config": {"nodes": 4},
        "timeline": [
            {"t": 1.0, "publishes": 100, "bus_sent": 120, "exact_minimum": 118, "broadcast": 300},
            {"t": 2.0, "publishes": 100, "bus_sent": 90, "exact_minimum": 90, "broadcast": 300},
        ],
        "latency_ms": {"publish_to_delivery": percentiles([])},
        "stats": {"hot_channels": [{"bin": "room:1", "decayed count": 5.0}], "hot_dist": "x"},
    }
    path = write_report(report, tmp_path / "report.json")
    loaded = json.loads(path.read_text())
    assert loaded["latency_ms"]["publish_to_delivery"]["p50"] is None  # NaN -> null
    chart = plot_chart(report, tmp_path / "chart.png")
    assert chart.read_bytes()[:8] == PNG_MAGIC
    # without Spark results the right panel falls back to the workload's counts
    report["stats"] = {}
    report["workload"] = {"top_channels": [["room:1", 10], ["user:3", 2]]}
    assert plot_chart(report, tmp_path / "c2.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.cluster
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_demo_end_to_end(tmp_path):
    """The real ``bloomcast demo`` on 3 nodes for a few seconds: every check passes
    and report.json holds the figures the README promises."""
    out = tmp_path / "demo"
    cmd = [
        sys.executable, "-m", "bloomcast.cli", "demo",
        "--nodes", "3", "--duration", "4s", "--subscribers", "60", "--rate", "60",
        "--phase-seconds", "1", "--probes", "5", "--seed", "3",
        "--out", str(out), "--no-progress",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, f"demo failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    report = json.loads((out / "report.json").read_text())
    assert report["ok"] is True
    assert all(c["ok"] for c in report["checks"].values()), report["checks"]
    assert "spark job" in report["checks"]
    # the live cluster-wide top 10 held to the Spark job's channels:1m (judged, not skipped)
    spark_hot = report["checks"]["live hot channels vs Spark (1 m)"]
    assert not spark_hot["skipped"] and "of Spark's channels:1m top 10" in spark_hot["detail"]
    assert len(report["stats"]["live_vs_spark"]) == len(report["hot_channels_live"]) > 0

    d = report["deliveries"]
    assert d["delivered"] == d["expected"] > 0
    assert d["lost"] == d["duplicated"] == d["unexpected"] == 0

    bus = report["bus"]
    assert bus["publishes"] == report["config"]["publishes"] > 0
    assert bus["broadcast"] == bus["publishes"] * (3 - 1)
    assert 0 < bus["publish_sent"] < bus["broadcast"]
    assert bus["publish_sent"] >= bus["exact_minimum"]
    assert bus["ratio_vs_broadcast"] == pytest.approx(bus["publish_sent"] / bus["broadcast"])

    lat = report["latency_ms"]
    assert lat["publish_to_delivery"]["count"] == d["delivered"]
    assert 0 < lat["publish_to_delivery"]["p50"] <= lat["publish_to_delivery"]["p99"]
    assert lat["subscribe_to_remote_delivery"]["count"] == 5

    assert len(report["timeline"]) == report["config"]["phases"]
    stats = report["stats"]
    assert stats["exit_code"] == 0 and stats["counters"]["events"] > 0
    assert stats["hot_channels"] and stats["false_positive_rate"]
    assert (out / "chart.png").read_bytes()[:8] == PNG_MAGIC
    # the printed summary carries the same figures
    assert f"bus PUBLISH messages: {bus['publish_sent']}" in proc.stdout
    assert "hot channels" in proc.stdout


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.cluster
@pytest.mark.timeout(120)
def test_demo_ctrl_c_stops_every_process(tmp_path):
    out = tmp_path / "demo-int"
    cmd = [
        sys.executable, "-m", "bloomcast.cli", "demo", "--nodes", "3", "--duration", "60s",
        "--skip-stats", "--no-progress", "--out", str(out),
    ]  # fmt: skip
    # started with SIGINT ignored, as a script's background job (``demo &``) is:
    # Ctrl-C must still stop it (bloomcast.cli.interruptible)
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=ignore_sigint,
    )
    try:
        lines = []
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.append(raw.decode(errors="replace"))
            if raw.startswith(b"cluster ready"):
                break
        else:
            pytest.fail("demo ended before its cluster was ready:\n" + "".join(lines))
        # the nodes run (each has the spool under our tmp dir on its command line)
        assert len(_processes_mentioning(str(out / "spool"))) == 3
        # each serves Prometheus metrics; the filters converged before "cluster ready"
        line = ""
        while not line.startswith("Prometheus /metrics on ports ["):
            line = proc.stdout.readline().decode()
            assert line, "no metrics line"
        ports = [int(p) for p in line.split("[", 1)[1].split("]")[0].split(",")]
        assert len(ports) == 3, line
        for port in ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
                assert r.status == 200
        time.sleep(1.0)  # inside the workload
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, rest.decode(errors="replace")
    assert b"interrupted" in rest
    assert _processes_mentioning(str(out / "spool")) == []
