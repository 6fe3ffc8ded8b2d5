"""What strangers make the bus hold stays bounded (issue 49, docs/architecture.md
§11): accepted links in their handshake (in all and per source address: over
the cap a link is closed at once, counted in CLUSTER INFO
``cluster_stats_links_rejected`` and logged rate-limited), the dialer's
backoff entries, and CLUSTER MEET addresses and their handshake nodes (Redis
forgets a handshake node after its handshake timeout). Real sockets; the
per-source cap from several loopback source addresses (bind())."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import resource
import socket

import pytest
import uvloop

from bloomcast.testing.ports import free_port
from cluster_bus import heartbeat, mesh
from cluster_bus.bus import ClusterBus
from cluster_bus.mesh import Dialer
from netutil.acceptor import Acceptor, listening_sockets
from tests.cluster_bus.test_bus import BusTestNode, ManualClock, config, stat, until


def _connect(port: int, source: str) -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))  # a source address of the loopback network (its port: the kernel's)
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    return s


async def _closed_by_node(s: socket.socket) -> bool:
    """The node closed (or reset) this connection."""
    loop = asyncio.get_running_loop()
    try:
        return await asyncio.wait_for(loop.sock_recv(s, 1), 5.0) == b""
    except ConnectionResetError:
        return True


def test_handshakes_per_source_address_are_capped_the_rest_refused_counted_logged(caplog):
    async def main() -> None:
        bus = ClusterBus(BusTestNode(), config(max_handshakes_per_ip=3))
        await bus.start()
        socks = []
        try:
            with caplog.at_level(logging.WARNING, logger="bloomcast.bus"):
                socks = [_connect(bus.port, "127.0.0.2") for _ in range(5)]
                socks += [_connect(bus.port, "127.0.0.3") for _ in range(2)]
                await until(lambda: sum(bus.mesh.accepting.values()) == 5, what="accepted")
                await until(lambda: stat(bus, "cluster_stats_links_rejected") == 2)
            assert bus.mesh.accepting == {"127.0.0.2": 3, "127.0.0.3": 2}
            assert [await _closed_by_node(s) for s in socks[3:5]] == [True, True]
            refused = [r for r in caplog.records if "refused" in r.getMessage()]
            assert len(refused) == 1  # rate-limited: one line per source address a minute
            assert "127.0.0.2" in refused[0].getMessage()
            assert "cluster-max-handshakes-per-ip 3" in refused[0].getMessage()
            for s in socks[:3]:
                s.close()
            await until(lambda: "127.0.0.2" not in bus.mesh.accepting, what="released")
        finally:
            for s in socks:
                s.close()
            await bus.stop()

    asyncio.run(main())


def test_handshakes_in_all_are_capped_and_a_peer_still_joins_once_they_end():
    async def main() -> None:
        bus = ClusterBus(BusTestNode(), config(max_handshakes=4))
        await bus.start()
        socks = [_connect(bus.port, f"127.0.0.{10 + i}") for i in range(6)]
        peer = None
        try:
            await until(lambda: stat(bus, "cluster_stats_links_rejected") == 2)
            assert bus.mesh.accepting_total == 4
            for s in socks:
                s.close()
            await until(lambda: bus.mesh.accepting_total == 0, what="released")
            peer = ClusterBus(BusTestNode(), config(join=[f"127.0.0.1:{bus.port}"]))
            await peer.start()
            await until(lambda: stat(bus, "cluster_links_connected") == 2, what="peer linked")
        finally:
            for s in socks:
                s.close()
            if peer is not None:
                await peer.stop()
            await bus.stop()

    asyncio.run(main())


def test_the_automatic_caps_follow_the_nodes_known():
    bus = ClusterBus(BusTestNode(), config())
    assert bus.handshake_caps("127.0.0.1") == (128, 16)
    for i in range(100):
        bus.membership.learn(f"{i + 1:040x}", "10.0.0.9", 7000, 17000 + i, 0)
    bus.mesh.accepting["10.0.0.9"] = 16  # the per-address count is read only at the floor
    assert bus.handshake_caps("10.0.0.9") == (202, 101)
    assert bus.handshake_caps("10.0.0.8") == (202, 16)


def test_the_dialers_backoff_forgets_old_addresses_and_stays_bounded(monkeypatch):
    monkeypatch.setattr(mesh, "MAX_BACKOFF", 8)
    clock = ManualClock(1_000_000)
    dialer = Dialer(lambda key: None, 2000, clock=clock)  # type: ignore[arg-type,return-value]
    for port in range(20):
        key = ("127.0.0.1", 20000 + port)
        dialer.dialing.add(key)
        dialer.failed(key, "refused")
        assert len(dialer.backoff) <= 8
    assert ("127.0.0.1", 20019) in dialer.backoff  # the newest kept
    clock.advance(mesh.BACKOFF_FORGET_MS + 5000)
    assert dialer.expire(clock()) > 0 and dialer.backoff == {}


def test_meet_addresses_that_never_answer_are_forgotten_join_seeds_stay(monkeypatch):
    monkeypatch.setattr(heartbeat, "MAX_MET", 3)
    clock = ManualClock()
    bus = ClusterBus(BusTestNode(), config(node_timeout_ms=2000), clock=clock)
    hb = bus.heartbeats
    hb.add_seed(("127.0.0.1", 1), joined=True)
    for port in range(2, 7):  # CLUSTER MEET, never dialled here (no loop): never answered
        hb.add_seed(("127.0.0.1", port))
    met = [k for k in hb.seeds if k not in hb.joined]
    assert met == [("127.0.0.1", 4), ("127.0.0.1", 5), ("127.0.0.1", 6)]  # the oldest went
    assert len(bus.membership.handshakes) == 4
    clock.advance(1999)
    hb.expire_handshakes(clock())
    assert len(bus.membership.handshakes) == 4
    clock.advance(2)
    hb.expire_handshakes(clock())
    assert bus.membership.handshakes == {}
    assert list(hb.seeds) == [("127.0.0.1", 1)]  # --join is configuration: redialled


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_an_accept_out_of_descriptors_is_reported_and_the_connection_served_later(loop_kind):
    """EMFILE on accept(): reported to the listener's owner (which counts and
    logs it), accepting pauses, and the connection waits in the backlog: it
    is served once descriptors are free (libuv's own listener would have
    reset it silently)."""
    errors: list[OSError] = []
    made: list[asyncio.BaseProtocol] = []

    class Proto(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            made.append(self)

    async def main() -> None:
        (sock,) = listening_sockets("127.0.0.1", free_port(), 64)
        port = sock.getsockname()[1]
        acceptor = Acceptor(sock, Proto, errors.append)
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        # no socket of an earlier test may be collected (and its descriptor
        # freed) while the limit holds
        gc.collect()
        gc.disable()
        highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
        holes = []  # the free descriptors below the highest, taken: none is left
        while (fd := os.open(os.devnull, os.O_RDONLY)) < highest:
            holes.append(fd)
        # every descriptor below ``fd`` is taken; the limit is ``fd`` itself
        # (``fd`` may be ``highest``, listdir's own descriptor, now free: a
        # limit of highest + 1 let one accept through in CI)
        os.close(fd)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fd, hard))
            await acceptor.start_serving()
            await until(lambda: bool(errors), what="EMFILE reported")
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            gc.enable()
            for fd in holes:
                os.close(fd)
        assert errors[0].errno == errno.EMFILE
        assert made == []
        await until(lambda: len(made) == 8, what="every connection served")
        acceptor.close()
        await acceptor.wait_closed()
        for c in clients:
            c.close()

    if loop_kind == "uvloop":
        uvloop.run(main())
    else:
        asyncio.run(main())


def test_the_bus_tick_drops_stale_backoffs():
    async def main() -> None:
        clock = ManualClock()
        bus = ClusterBus(BusTestNode(), config(), clock=clock)
        bus.dialer.backoff[("127.0.0.1", 1)] = (3, clock())
        bus._cron_step(clock())
        assert ("127.0.0.1", 1) in bus.dialer.backoff  # due now: still wanted
        clock.advance(mesh.BACKOFF_FORGET_MS + 1000)
        bus._cron_step(clock())
        assert bus.dialer.backoff == {}

    asyncio.run(main())
