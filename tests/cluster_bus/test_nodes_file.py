"""cluster_bus/nodes_file.py: the node's persistent identity (Redis's nodes.conf
role): the format read back, the lock against a second node, atomic writes,
and a bus restarted from its file rejoining the peers it knew by itself."""

from __future__ import annotations

import asyncio
import os
import random
import time

import pytest

from cluster_bus.bus import ClusterBus
from cluster_bus.membership import Membership
from cluster_bus.nodes import LostNode
from cluster_bus.nodes_file import NodesFile, NodesFileError, parse, render
from tests.cluster_bus.test_bus import BusTestNode, config, converged, crash, until

pytestmark = pytest.mark.timeout(60)


def nid(i: int) -> str:
    return f"{i:040x}"


def membership() -> Membership:
    m = Membership(nid(0), "10.0.0.1", 7000, 17000, 2000, random.Random(1), 200)
    m.myself.hostname, m.myself.incarnation = "me.example", 4
    m.learn(nid(1), "10.0.0.2", 7001, 17001, 0)
    m.peers[nid(1)].hostname = "one.example"
    m.lost[nid(2)] = LostNode(nid(2), "10.0.0.3", 7002, 17002, 5)
    return m


def test_the_file_reads_back_as_written_in_redis_line_format():
    text = render(membership(), epoch=9)
    lines = text.splitlines()
    assert lines[0] == f"{nid(0)} 10.0.0.1:7000@17000,me.example myself,master - 0 0 9 connected"
    assert lines[1] == f"{nid(1)} 10.0.0.2:7001@17001,one.example master - 0 0 0 connected"
    assert lines[2] == f"{nid(2)} 10.0.0.3:7002@17002 master,fail - 0 0 0 disconnected"
    assert lines[3] == "vars currentEpoch 9 lastVoteEpoch 0 incarnation 4"
    saved = parse(text)
    assert (saved.my_id, saved.epoch, saved.incarnation) == (nid(0), 9, 4)
    assert [(n.node_id, n.host, n.client_port, n.bus_port, n.hostname) for n in saved.nodes] == [
        (nid(1), "10.0.0.2", 7001, 17001, "one.example"),
        (nid(2), "10.0.0.3", 7002, 17002, ""),
    ]


def test_a_bad_file_is_one_line_naming_the_line():
    with pytest.raises(NodesFileError, match=r"^f:2: not a node line: 'garbage'$"):
        parse(f"{nid(0)} 1.2.3.4:1@2 myself,master - 0 0 0 connected\ngarbage\n", "f")
    with pytest.raises(NodesFileError, match="no line with the myself flag"):
        parse(f"{nid(1)} 1.2.3.4:1@2 master - 0 0 0 connected\n", "f")


def test_a_second_node_cannot_take_the_same_file(tmp_path):
    path = tmp_path / "nodes.conf"
    first = NodesFile(path)
    assert first.open() is None  # no file yet: a new identity
    second = NodesFile(path)
    with pytest.raises(NodesFileError, match="already used by a different bloomcast node"):
        second.open()
    first.close()
    assert second.open() is None  # the lock went with the first node
    second.close()


def test_saves_are_atomic_and_only_on_change(tmp_path):
    path = tmp_path / "nodes.conf"
    f = NodesFile(path)
    f.open()
    m = membership()
    assert f.save(m, 1) is True
    assert f.flush(10)
    inode = os.stat(path).st_ino
    assert f.save(m, 1) is False  # nothing changed: no write
    m.learn(nid(5), "10.0.0.6", 7005, 17005, 0)
    assert f.save(m, 1) is True
    assert f.flush(10) and f.saves == 2
    assert os.stat(path).st_ino != inode  # replaced by rename, never rewritten in place
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert parse(path.read_text()).nodes[1].node_id == nid(5)
    f.close()


def test_a_slow_disk_never_holds_the_caller_and_a_failure_is_counted(tmp_path, monkeypatch, caplog):
    """Each fsync takes 0.5 s: save() returns at once (the bus's tick calls it
    on the event loop) and the newest text is the one written, the ones that
    came meanwhile replaced; a write that fails is counted, logged once a
    minute, and made again by the next save (issue 41)."""
    fsync = os.fsync

    def slow(fd: int) -> None:
        time.sleep(0.5)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", slow)
    path = tmp_path / "nodes.conf"
    f = NodesFile(path)
    f.open()
    m = membership()
    waits = []
    for i in range(6, 12):
        m.learn(nid(i), "10.0.0.7", 7000 + i, 17000 + i, 0)
        start = time.monotonic()
        assert f.save(m, 1) is True
        waits.append(time.monotonic() - start)
    assert max(waits) < 0.05
    assert f.flush(30)
    assert nid(11) in [n.node_id for n in parse(path.read_text()).nodes]  # the newest state
    assert f.saves < 6  # texts replaced while the disk was busy were never written
    monkeypatch.setattr(os, "fsync", fsync)
    blocker = tmp_path / f".nodes.conf.tmp-{os.getpid()}"
    blocker.mkdir()  # the temporary file cannot be made (root or not)
    try:
        with caplog.at_level("WARNING", logger="bloomcast.bus"):
            for i in range(12, 15):
                m.learn(nid(i), "10.0.0.8", 7000 + i, 17000 + i, 0)
                f.save(m, 1)
                assert f.flush(10)
            assert f.save(m, 1) is True  # the failed text is handed over again
            assert f.flush(10)
    finally:
        blocker.rmdir()
    lines = [r.getMessage() for r in caplog.records if "could not save" in r.getMessage()]
    assert f.failures == 4 and len(lines) == 1
    assert f.save(m, 1) is True and f.flush(10)
    assert nid(14) in [n.node_id for n in parse(path.read_text()).nodes]
    f.close()


def test_a_bus_restarted_from_its_file_keeps_its_id_and_rejoins_by_itself(tmp_path):
    """Node b restarts from its nodes file with no --join: it is the same node
    id, its peer a is a lost node it redials, and both reconverge; a's session
    with b starts over (b's boot changed) without counting a loss."""

    async def main():
        path = tmp_path / "b.conf"
        a_node = BusTestNode()
        a = ClusterBus(a_node, config())
        await a.start()
        b_file = NodesFile(path)
        assert b_file.open() is None
        b_node = BusTestNode()
        b = ClusterBus(b_node, config(join=[f"127.0.0.1:{a.port}"]), nodes_file=b_file)
        await b.start()
        try:
            await until(lambda: converged([a, b]))
            await until(
                lambda: path.exists() and a_node.node_id in path.read_text(), what="b saved a"
            )
            crash(b)
            b_file.close()
            again_file = NodesFile(path)
            saved = again_file.open()
            assert saved is not None and saved.my_id == b_node.node_id
            b_node.node_id = saved.my_id
            again = ClusterBus(b_node, config(port=b.port), nodes_file=again_file, saved=saved)
            assert again.config.join == ()
            await again.start()
            try:
                assert a_node.node_id in again.membership.lost or converged([a, again])
                await until(lambda: converged([a, again]), what="b rejoined a by itself")
                assert again.membership.myself.incarnation > b.membership.myself.incarnation
                assert a_node.lost == [] and b_node.lost == []
            finally:
                await again.stop()
                again_file.close()
        finally:
            await a.stop()

    asyncio.run(main())


def test_the_save_callback_gets_the_fsyncs_time_and_cannot_stop_the_writer(tmp_path, caplog):
    """``on_saved`` (the node's latency monitor) is given the two fsyncs'
    milliseconds; whatever it raises is logged and the next save is written."""
    f = NodesFile(tmp_path / "nodes.conf")
    f.open()
    m = membership()
    times: list[float] = []

    def broken(ms: float) -> None:
        times.append(ms)
        raise ValueError("callback bug")

    f.on_saved = broken
    with caplog.at_level("WARNING", logger="bloomcast.bus"):
        assert f.save(m, 1) and f.flush(10)
        m.learn(nid(9), "10.0.0.9", 7009, 17009, 0)
        assert f.save(m, 1) and f.flush(10)
    f.close()
    assert len(times) == 2 and all(ms >= 0 for ms in times) and f.saves == 2
    assert nid(9) in [n.node_id for n in parse((tmp_path / "nodes.conf").read_text()).nodes]
    assert any("callback bug" in r.getMessage() for r in caplog.records)
