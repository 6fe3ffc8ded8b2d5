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
from tests.cluster_bus.test_bus import BusTestNode, config, converged, crash, stat, until

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


def test_a_bad_line_is_refused_and_logged_and_no_myself_line_is_one_line_naming_the_file(caplog):
    """A line that is not a node line is refused with its reason in the log
    and counted; the rest of the file loads (issue 49: a hostname with a
    newline stopped the restart). No myself line: one line naming the file."""
    with caplog.at_level("WARNING", logger="bloomcast.bus"):
        saved = parse(
            f"{nid(0)} 1.2.3.4:1@2 myself,master - 0 0 0 connected\ngarbage\n"
            f"{nid(1)} 1.2.3.5:1@2 master - 0 0 0 connected\n",
            "f",
        )
    assert saved.my_id == nid(0) and [n.node_id for n in saved.nodes] == [nid(1)]
    assert saved.rejected == 1
    assert [r.getMessage() for r in caplog.records] == ["f:2: line refused: 1 fields, not 8"]
    with pytest.raises(NodesFileError, match="no line with the myself flag"):
        parse(f"{nid(1)} 1.2.3.4:1@2 master - 0 0 0 connected\n", "f")


HOSTILE_LINES = [
    # (the peer's line as an unchecked hostname made the old writer write it, why refused)
    (f"{nid(1)} 10.0.0.2:7001@17001,evil myself,master master - 0 0 0 connected", "9 fields"),
    (f"{nid(1)} 10.0.0.2:7001@17001,a,b master - 0 0 0 connected", "not an address"),
    (f"{nid(1)} 10.0.0.2:7001@17001,{'a' * 300} master - 0 0 0 connected", "less than 256"),
    (f"{nid(1)} 10.0.0.2:7001@17001,\udcff master - 0 0 0 connected", "alphanumeric"),
    (f"{nid(1)} {'a' * 64}:7001@17001 master - 0 0 0 connected", "labels are 1..63"),
    (f"{nid(1)} a\x00b:7001@17001 master - 0 0 0 connected", "alphanumeric"),
    (f"{nid(1)} 10.0.0.2:7001@99999 master - 0 0 0 connected", "above 65535"),
    (f"{nid(1)} 10.0.0.2:7001@17001 master,evil - 0 0 0 connected", "unknown flags"),
    (f"{nid(0)} 10.0.0.2:7001@17001 master - 0 0 0 connected", "listed twice"),
    (f"{nid(3)} 10.0.0.4:7003@17003 myself,master - 0 0 0 connected", "a second line"),
]


@pytest.mark.parametrize(("line", "why"), HOSTILE_LINES)
def test_a_hostile_line_is_refused_and_the_node_keeps_its_own_id(line, why, caplog):
    """Issue 49: a peer's hostname ``evil myself,master`` written as is made
    the node take the peer's id at restart. Each hostile line is refused with
    its reason; the node's id is its own myself line's."""
    text = f"{nid(0)} 10.0.0.1:7000@17000 myself,master - 0 0 1 connected\n{line}\n"
    text += f"{nid(2)} 10.0.0.3:7002@17002 master - 0 0 0 connected\nvars currentEpoch 1\n"
    with caplog.at_level("WARNING", logger="bloomcast.bus"):
        saved = parse(text, "f")
    assert saved.my_id == nid(0)
    assert [n.node_id for n in saved.nodes] == [nid(2)] and saved.rejected == 1
    assert why in caplog.records[0].getMessage()


def test_a_peer_with_a_hostile_hostname_never_changes_the_id_after_a_restart(tmp_path):
    """The probe of issue 49, end to end on a real bus: a peer announces the
    hostname ``evil myself,master`` (its heartbeat and a gossip entry), the
    node saves its file, restarts from it and is itself, with the peer."""

    async def main():
        a_node, b_node = BusTestNode(), BusTestNode()
        a = ClusterBus(a_node, config())
        a.membership.myself.hostname = "evil myself,master"  # past the flag's check
        await a.start()
        path = tmp_path / "b.conf"
        b_file = NodesFile(path)
        assert b_file.open() is None
        b = ClusterBus(b_node, config(join=[f"127.0.0.1:{a.port}"]), nodes_file=b_file)
        await b.start()
        try:
            await until(lambda: converged([a, b]))
            assert b.membership.peers[a_node.node_id].hostname == ""
            assert stat(b, "cluster_stats_addresses_refused") >= 1
        finally:
            await b.stop()
            await a.stop()
        b_file.close()
        again = NodesFile(path)
        saved = again.open()
        again.close()
        assert saved is not None and saved.my_id == b_node.node_id and saved.rejected == 0
        assert [n.node_id for n in saved.nodes] == [a_node.node_id]

    asyncio.run(main())


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


def test_the_writer_thread_survives_any_error_and_counts_it(tmp_path, caplog):
    """Issue 49: an error other than OSError (a UnicodeEncodeError from a
    hostname no encoder takes) ended the writer thread: save() still said
    True, nothing was counted, flush() never returned and every later change
    went unsaved. Now it is counted, logged once a minute, no temporary file
    is left, and the next change is written."""
    path = tmp_path / "nodes.conf"
    f = NodesFile(path)
    f.open()
    m = membership()
    m.myself.hostname = "bad\udcff"  # past every check: no UTF-8 for it
    with caplog.at_level("WARNING", logger="bloomcast.bus"):
        for i in range(3):
            m.learn(nid(20 + i), "10.0.0.9", 7020 + i, 17020 + i, 0)
            assert f.save(m, 1) is True
            assert f.flush(10)
    assert f.failures == 3 and f.saves == 0 and not path.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".n")] == []
    lines = [r.getMessage() for r in caplog.records if "could not save" in r.getMessage()]
    assert len(lines) == 1 and "UnicodeEncodeError" in lines[0]
    m.myself.hostname = "me.example"
    assert f.save(m, 1) is True and f.flush(10)
    assert f.saves == 1 and nid(22) in [n.node_id for n in parse(path.read_text()).nodes]
    f.close()


def test_stop_saves_the_file_a_last_time(tmp_path):
    """``bus.stop()`` writes the nodes file once more (issue 49): a peer
    learned after the last tick is in the file the node restarts from."""

    async def main():
        path = tmp_path / "nodes.conf"
        f = NodesFile(path)
        assert f.open() is None
        bus = ClusterBus(BusTestNode(), config(ping_interval_ms=60_000), nodes_file=f)
        await bus.start()  # its first tick saves the file: no peer yet
        assert f.flush(10) and nid(7) not in path.read_text()
        bus.membership.learn(nid(7), "10.0.0.7", 7007, 17007, bus.clock())
        await bus.stop()
        f.close()
        return path.read_text()

    assert nid(7) in asyncio.run(main())
