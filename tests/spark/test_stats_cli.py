"""``bloomcast stats`` as a user meets it: error lines (exact text, exit 2, no
traceback), dated titles, a quiet ``stats run`` and Ctrl-C (exit 130)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bloomcast.testing import free_port
from spark.job import BatchResult
from spark.sinks import FileSink
from tests.spark.events_data import BASE, lines_of, make_events

VIEWS = "(views: false_positive_rate:<half-life>, trending:<short>/<long>)"


def bloomcast(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomcast.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """A file-sink output with channels:1m and channels:1h (written without Spark)."""
    dists = {"channels:1m": {"news": 4.0}, "channels:1h": {"news": 4.0}}
    result = BatchResult(
        time=BASE, events=4, malformed=0, half_lives={"channels:1m": 60.0, "channels:1h": 3600.0}
    )
    result.dists = dists
    FileSink(tmp_path / "out", "run1").write(0, result)
    return tmp_path / "out"


def test_unknown_distribution_lists_what_exists(out: Path) -> None:
    done = bloomcast("stats", "top", "chanels:1m", "--out", str(out))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"bloomcast stats top: unknown distribution 'chanels:1m'; {out} has: "
        f"channels:1h, channels:1m {VIEWS}\n"
    )
    done = bloomcast("stats", "top", "trending:1m", "--out", str(out))
    assert done.returncode == 2
    assert done.stderr == (
        "bloomcast stats top: 'trending:1m': trending takes two half-lives, "
        "trending:<short>/<long> (e.g. trending:1m/1h), or none (shortest and longest found)\n"
    )


def test_missing_output_is_an_error(tmp_path: Path, valkey_url: str) -> None:
    missing = tmp_path / "nothing"
    done = bloomcast("stats", "top", "channels:1m", "--out", str(missing))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"bloomcast stats top: no statistics in {missing}: {missing / 'batches'} does not exist "
        f"(write them with: bloomcast stats run --out {missing}, or read --redis URL)\n"
    )
    url = valkey_url.rsplit("/", 1)[0] + "/13"
    done = bloomcast("stats", "top", "channels:1m", "--redis", url)
    assert done.returncode == 2
    assert done.stderr == (
        f"bloomcast stats top: Redis {url} holds no bloomcast statistics "
        f"(write them with: bloomcast stats run --redis {url})\n"
    )
    done = bloomcast("stats", "run", "--spool", str(missing), "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert done.stderr == f"bloomcast stats run: spool directory {missing} does not exist\n"


def one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    """The single stderr line of a failed command (no traceback)."""
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    return done.stderr.rstrip("\n")


def test_an_unreachable_redis_or_node_is_one_line(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    url = f"redis://127.0.0.1:{port}/0"
    refused = f"Error 111 connecting to 127.0.0.1:{port}. Connection refused."
    done = bloomcast("stats", "top", "channels:1m", "--redis", url)
    assert one_line(done, 1) == f"bloomcast stats top: cannot read Redis {url}: {refused}"
    spool = tmp_path / "spool"
    spool.mkdir()
    done = bloomcast("stats", "run", "--spool", str(spool), "--redis", url)
    assert one_line(done, 1) == f"bloomcast stats run: cannot reach Redis {url}: {refused}"
    done = bloomcast("stats", "run", "--nodes", f"127.0.0.1:{port}", "--once")
    assert one_line(done, 1) == (
        f"bloomcast stats run: cannot list the spool of node 127.0.0.1:{port}: "
        "[Errno 111] Connection refused (is it started with --traffic-dir and --metrics-port?)"
    )
    done = bloomcast("stats", "run", "--nodes", "nonsense")
    assert one_line(done, 2) == (
        "bloomcast stats run: --nodes 'nonsense': expected [user:password@]HOST:METRICSPORT"
    )
    done = bloomcast("stats", "run", "--nodes", f"127.0.0.1:{port}", "--spool", str(spool))
    assert one_line(done, 2) == (
        "bloomcast stats run: argument --spool: not allowed with argument --nodes "
        "(see bloomcast stats run --help)"
    )


#: ``bloomcast`` as it runs where only the node's dependencies are installed
WITHOUT_SPARK = """
import sys
for name in ("pyspark", "pyarrow", "pandas", "numpy", "matplotlib"):
    sys.modules[name] = None  # import fails, find_spec says absent
from bloomcast.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_the_spark_extra_run_says_how_to_install_it_and_top_still_reads(
    out: Path, tmp_path: Path
) -> None:
    def without_spark(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", WITHOUT_SPARK, *args], capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip

    done = without_spark("stats", "run", "--spool", str(tmp_path))
    assert one_line(done, 1) == (
        "bloomcast stats run: needs the spark extra (pyspark is not installed): "
        "pip install 'bloomcast[spark]' (in a checkout: uv sync --extra spark)"
    )
    done = without_spark("stats", "top", "channels:1m", "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["bin"] == "news"
    assert without_spark("--help").returncode == 0


def test_a_failed_query_is_one_line() -> None:
    from spark.stats_run import one_line as summary

    text = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: An exception was "
        "thrown from the Python worker.\nTraceback (most recent call last):\n  File "
        '"x.py", line 1, in read\nspark.spool_client.SpoolUnreachable: cannot read '
        "n-00000001.ndjson from node h:1: timed out\n\tat org.apache.spark.X(X.scala:1)\n"
    )
    assert summary(text) == (
        "SpoolUnreachable: cannot read n-00000001.ndjson from node h:1: timed out"
    )
    assert summary("just one line") == "just one line"


def test_table_title_has_the_date_and_rate_says_what_it_is(out: Path) -> None:
    done = bloomcast("stats", "top", "channels:1m", "--out", str(out), "--now", str(BASE))
    assert done.returncode == 0, done.stderr
    assert time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(BASE)) in done.stdout
    assert "steady-state rate/s" in done.stdout


def _start_stream(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    spool = tmp_path / "spool"
    spool.mkdir(exist_ok=True)
    (spool / "a.ndjson").write_text("".join(lines_of(make_events(5, n=20))))
    err = tmp_path / "stderr.txt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bloomcast.cli", "stats", "run", "--spool", str(spool),
         "--out", str(tmp_path / "out"), "--stream", "--master", "local[1]",
         "--shuffle-partitions", "1", "--trigger-interval", "1 second"],
        stdout=subprocess.PIPE,
        stderr=err.open("wb"),
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    return proc, err


@pytest.mark.spark
def test_ctrl_c_after_a_batch_exits_130_quietly(tmp_path: Path) -> None:
    proc, err = _start_stream(tmp_path)
    deadline = time.monotonic() + 180
    while "batch 0:" not in err.read_text(errors="replace") and time.monotonic() < deadline:
        assert proc.poll() is None, err.read_text()
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(120) == 130
    text = err.read_text(errors="replace")
    assert "Traceback" not in text and " INFO " not in text and "Exception" not in text
    assert "default log4j profile" not in text and "pandas" not in text
    assert text.rstrip().endswith("bloomcast stats run: interrupted")
    assert proc.stdout is not None
    assert b"38 events applied" in proc.stdout.read()  # 20 origin + 18 receiver events


@pytest.mark.spark
def test_ctrl_c_during_startup_exits_130_without_traceback(tmp_path: Path) -> None:
    proc, err = _start_stream(tmp_path)
    time.sleep(3)  # the JVM is starting
    proc.send_signal(signal.SIGINT)
    assert proc.wait(120) == 130
    text = err.read_text(errors="replace")
    assert "Traceback" not in text, text
    assert text.rstrip().endswith("bloomcast stats run: interrupted")


def test_progress_on_a_terminal_shows_phase_spark_status_and_totals() -> None:
    from rich.console import Console

    from spark.run_progress import RunProgress

    buf = io.StringIO()
    progress = RunProgress(console=Console(file=buf, force_terminal=True, width=200))
    progress.phase("starting Spark (master local[2])")
    time.sleep(0.3)
    progress.tick("Waiting for data to arrive", 2, 500)
    progress.batch("batch 1: 250 events")
    time.sleep(0.3)
    progress.close()
    text = buf.getvalue()
    assert "starting Spark (master local[2])" in text
    assert "Waiting for data to arrive (2 batches, 500 events applied so far)" in text
    assert "batch 1: 250 events" in text


def test_progress_in_a_log_prints_each_phase_once(capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    from spark.run_progress import RunProgress

    progress = RunProgress(console=Console(file=io.StringIO()))  # not a terminal
    progress.phase("starting Spark (master local[1])")
    progress.phase("starting Spark (master local[1])")
    progress.tick("Waiting for data to arrive", 0, 0)  # no spinner in a log
    progress.batch("batch 0: 3 events")
    progress.close()
    assert capsys.readouterr().err == (
        "bloomcast stats run: starting Spark (master local[1]) ...\nbatch 0: 3 events\n"
    )


@pytest.mark.parametrize(
    ("master", "partitions"),
    [("local", 1), ("local[2]", 2), ("local[3,2]", 3), ("local[*]", os.cpu_count() or 2),
     ("spark://h:7077", 8)],
)  # fmt: skip
def test_shuffle_partitions_default_to_the_local_cores(master: str, partitions: int) -> None:
    from spark.stats_command import default_shuffle_partitions

    assert default_shuffle_partitions(master) == partitions


def test_node_bins_show_their_address(tmp_path: Path) -> None:
    a, b = "a1" * 20, "b2" * 20
    result = BatchResult(
        time=BASE,
        events=5,
        malformed=0,
        half_lives={"forwarded:1m": 60.0},
        nodes={a: "10.0.0.5:7001"},
    )
    result.dists = {"forwarded:1m": {a: 3.0, b: 2.0}}
    FileSink(tmp_path / "out", "run1").write(0, result)
    args = ["stats", "top", "forwarded:1m", "--out", str(tmp_path / "out"), "--now", str(BASE)]
    table = bloomcast(*args).stdout
    assert f"10.0.0.5:7001 ({a[:12]})" in table  # known: address and id prefix
    assert f" {b[:12]} " in table and b[:13] not in table and "…" not in table  # unknown: prefix
    rows = json.loads(bloomcast(*args, "--json").stdout)
    assert [(r["bin"], r["address"]) for r in rows] == [(a, "10.0.0.5:7001"), (b, None)]
