"""``stats run --master spark://...``: the same job on a real Spark standalone cluster.

Starts a standalone Master and one Worker (pyspark's own ``spark-class``) on
loopback, runs the ``bloomcast stats`` CLI as a separate driver process against
it, and checks the Redis output against NumPy, as for local mode. Everything
binds 127.0.0.1 (SPARK_LOCAL_IP).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from bloomcast.testing import free_port
from spark.decay import decay_rate, decayed_counts_by_key
from spark.job import STATS, dist_name
from spark.sinks import EVENTS_KEY
from tests.spark.events_data import expected_rows, lines_of, make_events

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _spark_env(tmp: Path) -> dict[str, str]:
    import pyspark

    home = str(Path(pyspark.__file__).parent)
    return dict(
        os.environ,
        SPARK_HOME=home,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp / "logs"),
        SPARK_WORKER_DIR=str(tmp / "work"),
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )


def _wait_for(path: Path, text: str, proc: subprocess.Popen, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    pytest.fail(f"{text!r} not in {path.name}:\n{path.read_text(errors='replace')[-2000:]}")


@pytest.fixture
def standalone(tmp_path):
    env = _spark_env(tmp_path)
    spark_class = str(Path(env["SPARK_HOME"]) / "bin" / "spark-class")
    port = free_port()
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        master_log = tmp_path / "master.log"
        logs.append(master_log.open("w"))
        master = subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                "0",
            ],
            env=env,
            stdout=logs[-1],
            stderr=subprocess.STDOUT,
        )
        procs.append(master)
        _wait_for(master_log, "I have been elected leader", master)
        worker_log = tmp_path / "worker.log"
        logs.append(worker_log.open("w"))
        worker = subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--webui-port",
                "0",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--work-dir",
                str(tmp_path / "work"),
                f"spark://127.0.0.1:{port}",
            ],
            env=env,
            stdout=logs[-1],
            stderr=subprocess.STDOUT,
        )
        procs.append(worker)
        _wait_for(worker_log, "Successfully registered with master", worker)
        yield f"spark://127.0.0.1:{port}", env
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        for f in logs:
            f.close()


def test_stats_run_on_a_standalone_cluster(standalone, valkey_url, tmp_path):
    master, env = standalone
    spool = tmp_path / "spool"
    spool.mkdir()
    events = make_events(9, n=120)
    half = len(events) // 2
    (spool / "a.ndjson").write_text("".join(lines_of(events[:half])))
    (spool / "b.ndjson").write_text("".join(lines_of(events[half:])) + "not json\n")
    url = valkey_url.rsplit("/", 1)[0] + "/5"
    client = redis.Redis.from_url(url, decode_responses=True)
    client.flushdb()
    cmd = [
        sys.executable,
        "-m",
        "bloomcast.cli",
        "stats",
        "run",
        "--spool",
        str(spool),
        "--master",
        master,
        "--redis",
        url,
        "--checkpoint",
        str(tmp_path / "ck"),
        "--half-life",
        "1m",
        "--once",
        "--shuffle-partitions",
        "2",
        "--max-files-per-trigger",
        "1",
    ]
    done = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=240, cwd=Path(__file__).parents[2]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 malformed" in done.stdout
    rows = expected_rows(events)
    for stat in STATS:
        d = dist_name(stat, 60.0)
        got = dict(client.zrange(d, 0, -1, withscores=True))
        want = decayed_counts_by_key(rows[stat], decay_rate(60.0), float(client.get(f"{d}._T")))
        assert got.keys() == want.keys(), d
        for k, w in want.items():
            assert got[k] == pytest.approx(w, rel=1e-9), (d, k)
    assert int(client.get(EVENTS_KEY)) == len({(e.event_id, e.node) for e in events})
