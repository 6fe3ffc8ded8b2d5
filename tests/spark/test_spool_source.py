"""The spool over HTTP (spark/spool_service.py, spark/spool_client.py) and the
Structured Streaming source over it (spark/spool_source.py): offsets, partitions,
reads and commits against the node's own spool server in a process of its own,
and a real node's endpoints with and without a password."""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

from spark.spool_client import SpoolNode, SpoolUnreachable, committed_offsets, parse_nodes
from spark.spool_source import SpoolStreamReader
from tests.spark.events_data import make_events
from tests.spark.spool_nodes import SpoolNode as NodeProcess
from tests.spark.spool_nodes import chunks, spool_server, wait_until, write_spool_file

A, B = "a" * 40, "b" * 40


def rows_of(reader: SpoolStreamReader, start: dict, end: dict) -> list[tuple[str, float, str]]:
    out = []
    for part in reader.partitions(start, end):
        for batch in reader.read(part):
            out += list(zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True))
    return out


def names(spool: Path) -> list[str]:
    return sorted(p.name for p in spool.glob("*.ndjson*"))


def test_offsets_partitions_reads_and_commits(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    events = chunks(make_events(31, n=60), 6)
    t0 = time.time() - 100
    first_files = [
        write_spool_file(spool, A, 0, events[0], t0),
        write_spool_file(spool, B, 0, events[1], t0 + 1),
    ]
    write_spool_file(spool, A, 1, events[2], t0 + 2)
    (spool / f"{A}-00000002.ndjson.tmp").write_text("")  # A's open file
    write_spool_file(spool, A, 3, events[3], t0 + 3)  # above A's open file: not yet offered
    with spool_server(spool) as address:
        reader = SpoolStreamReader({"nodes": address, "maxFilesPerTrigger": "2"})
        assert isinstance(reader.getDefaultReadLimit(), ReadMaxFiles)
        start = reader.initialOffset()
        assert start == {address: {}}
        # oldest first, two files
        first = reader.latestOffset(start, ReadMaxFiles(2))
        assert first == {address: {A: 0, B: 0}}
        rows = rows_of(reader, start, first)
        assert len(rows) == len(events[0]) + len(events[1])
        assert {r[0] for r in rows} == {
            f"http://{address}/spool/files/{A}-00000000.ndjson",
            f"http://{address}/spool/files/{B}-00000000.ndjson",
        }
        # each file's mtime on its node, in whole milliseconds (as Spark's file source)
        assert {r[1] for r in rows} == {p.stat().st_mtime_ns // 10**6 / 1000 for p in first_files}
        assert json.loads(rows[0][2])["event_id"] == events[0][0].event_id
        # a replay plans and reads the same rows
        assert rows_of(reader, start, first) == rows
        # Spark committed the batch: exactly its files are deleted on the node
        reader.commit(first)
        assert names(spool) == [f"{A}-00000001.ndjson", f"{A}-00000002.ndjson.tmp",
                                f"{A}-00000003.ndjson"]  # fmt: skip
        second = reader.latestOffset(first, ReadAllAvailable())
        # A-3 waits for A-2; every file of B is gone: B leaves the offsets
        assert second == {address: {A: 1}}
        assert reader.latestOffset(second, ReadAllAvailable()) == second
        # A's open file completes (renamed): come in number order
        write_spool_file(spool, A, 2, events[4], t0 + 4)
        (spool / f"{A}-00000002.ndjson.tmp").unlink()
        third = reader.latestOffset(second, ReadMaxFiles(1))
        assert third == {address: {A: 2}}
        # --once: the files there now are the target; later ones wait
        reader.prepareForTriggerAvailableNow()
        write_spool_file(spool, A, 4, events[5], t0 + 5)
        fourth = reader.latestOffset(third, ReadAllAvailable())
        # (latestOffset told the node to delete what `third` committed)
        assert fourth == {address: {A: 3}}
        assert f"{A}-00000002.ndjson" not in names(spool)
        assert [r[2] for r in rows_of(reader, third, fourth)] == [
            line for line in (spool / f"{A}-00000003.ndjson").read_text().splitlines()
        ]
        assert reader.latestOffset(fourth, ReadAllAvailable()) == fourth
    # the node is down: its offsets stay, nothing is planned
    assert reader.latestOffset(fourth, ReadAllAvailable()) == fourth
    assert f"{A}-00000004.ndjson" in names(spool)  # never deleted unread


def test_spool_endpoints_of_a_real_node_and_its_password(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "spool", "--requirepass", "s3cret").start()
    try:
        import redis

        with redis.Redis(port=node.port, password="s3cret") as r:
            for i in range(20):
                r.publish(f"news.{i % 3}", "x")
        refused = SpoolNode.parse(node.address)
        with pytest.raises(SpoolUnreachable, match="HTTP 401"):
            refused.listing()
        wrong = SpoolNode.parse(f"default:nope@{node.address}")
        with pytest.raises(SpoolUnreachable, match="HTTP 401"):
            wrong.listing()
        spool = SpoolNode.parse(f":s3cret@{node.address}")
        assert spool.key == node.address  # no password in Spark's offsets
        wait_until(lambda: spool.listing()["files"], "the tap to complete its first file", 30)
        listing = spool.listing()
        (name, size, _mtime), *_ = listing["files"]
        writer = listing["node"]
        assert name.startswith(writer) and listing["writers"] == [writer]
        assert listing["nodes"] == {writer: f"127.0.0.1:{node.port}"}
        data = spool.fetch(name)
        assert data is not None and len(data) == size and data.count(b"\n") == 20
        assert spool.fetch(f"{writer}-00000099.ndjson") is None
        assert spool.commit({writer: 0}) == 1
        assert spool.listing()["files"] == []
        assert not list((tmp_path / "spool").glob("*.ndjson"))
        # a path outside the spool is never served
        assert spool.fetch("..%2Fetc%2Fpasswd") is None
    finally:
        node.stop()


def test_the_spool_needs_a_user_allowed_monitor(tmp_path: Path) -> None:
    """Issue 49: any enabled user's password opened /spool; now its ACL must
    allow MONITOR (the spool shows every channel's traffic, a commit deletes)."""
    node = NodeProcess(tmp_path / "spool", "--requirepass", "s3cret").start()
    try:
        import redis

        with redis.Redis(port=node.port, password="s3cret") as r:
            r.acl_setuser("reader", enabled=True, passwords=["+pw"], commands=["+@pubsub"],
                          channels=["news.*"])  # fmt: skip
            r.acl_setuser("spark", enabled=True, passwords=["+pw"], commands=["+monitor"])
            r.publish("news.1", "x")
        with pytest.raises(SpoolUnreachable, match="HTTP 403"):
            SpoolNode.parse(f"reader:pw@{node.address}").listing()
        with pytest.raises(SpoolUnreachable, match="HTTP 403"):
            SpoolNode.parse(f"reader:pw@{node.address}").commit({"a" * 40: 9})
        assert "files" in SpoolNode.parse(f"spark:pw@{node.address}").listing()
        assert "files" in SpoolNode.parse(f"default:s3cret@{node.address}").listing()
        text = urllib.request.urlopen(f"http://{node.address}/metrics", timeout=10).read()
        assert b'bloomcast_http_refused_total{reason="spool_auth"} 2.0' in text
    finally:
        node.stop()


def test_on_a_node_with_tls_the_spool_answers_loopback_only() -> None:
    """The metrics port is plain HTTP: with --tls-port, credentials from beyond
    loopback are refused before they are read (only loopback is a test target,
    so the check is called with a remote peer's address)."""
    from bloomcast.http_server import Request
    from bloomcast.metrics import spool_refusal
    from router.config import NodeConfig
    from router.node import Node

    token = base64.b64encode(b"default:pw").decode()
    headers = {"authorization": f"Basic {token}"}
    plain = Node(NodeConfig(port=1, requirepass="pw"))
    tls = Node(NodeConfig(port=1, requirepass="pw", tls_port=2))
    remote = Request("GET", "/spool", "", headers, "10.1.2.3")
    local = Request("GET", "/spool", "", headers, "127.0.0.1")
    assert spool_refusal(plain, remote) is None
    refused = spool_refusal(tls, remote)
    assert refused is not None and refused[0] == "403 Forbidden"
    assert spool_refusal(tls, local) is None


def test_node_addresses_parse_to_keys_without_credentials() -> None:
    nodes = parse_nodes("10.0.0.1:9121, user:p%40ss@10.0.0.2:9121,http://[::1]:9121")
    assert [n.key for n in nodes] == ["10.0.0.1:9121", "10.0.0.2:9121", "[::1]:9121"]
    assert nodes[0].authorization is None and nodes[1].authorization is not None
    for bad in ("", "host", "host:port", "https://h:1", "a:1,a:1"):
        with pytest.raises(ValueError):
            parse_nodes(bad)


def test_committed_offsets_of_a_checkpoint(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    (ck / "offsets").mkdir(parents=True)
    (ck / "commits").mkdir()
    assert committed_offsets(str(ck)) is None
    for b, off in ((0, {"h:1": {A: 0}}), (1, {"h:1": {A: 4}})):
        (ck / "offsets" / str(b)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(off)}')
    (ck / "commits" / "0").write_text("v1\n{}")
    assert committed_offsets(str(ck)) == {"h:1": {A: 0}}  # batch 1 is not committed
    assert committed_offsets("hdfs://x/ck") is None


#: what a node with a tap and a metrics port imports (bloomcast/node_command.py wires these)
NODE_PROBE = """
import sys
from bloomcast import metrics, node_command
from spark import spool_service, tap
print(",".join(m for m in ("pyspark", "pyarrow", "pandas", "numpy", "matplotlib")
               if m in sys.modules))
"""


def test_a_node_serving_its_spool_imports_no_extra() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", NODE_PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""
