"""ClusterBus in one process: several buses on loopback sockets, each with a
small in-test node (exact subscriptions + a real Bloom bit filter built with
bloom's hashing), so the bus rules are checked fast and deterministically:
handshake and secret, filter sync and deltas, routing, acks, failure
detection, sequence gaps, send-buffer limit."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from bitarray import bitarray

from bloom import crc64, key_hashes
from cluster_bus.bus import ClusterBus, FilterSnapshot
from cluster_bus.codec import encode
from cluster_bus.frames import FilterKind, Leave, NodeFlags
from cluster_bus.routing import filter_fingerprint
from router.cluster_link import FilterChange
from router.config import NodeConfig

pytestmark = pytest.mark.timeout(60)

M, K = 1024, 7


class Filter:
    def __init__(self, m: int = M) -> None:
        self.m = m
        self.counts = [0] * m
        self.bits = bitarray(m, endian="big")
        self.bits.setall(0)

    def positions(self, key: bytes) -> set[int]:
        return {h & (self.m - 1) for h in key_hashes(key, K)}

    def change(self, key: bytes, delta: int, name) -> FilterChange:
        flipped_on, flipped_off = [], []
        for p in self.positions(key):
            self.counts[p] += delta
            on = self.counts[p] > 0
            if on != self.bits[p]:
                self.bits[p] = on
                (flipped_on if on else flipped_off).append(p)
        return FilterChange(name, tuple(flipped_on), tuple(flipped_off), self.fp())

    def fp(self) -> int:
        return crc64(self.bits.tobytes())


class BusTestNode:
    __test__ = False
    """A node: exact channel/prefix subscriptions, Bloom exports, deliveries."""

    def __init__(self) -> None:
        self.node_id = os.urandom(20).hex()
        self.tap = None
        self.channels: set[bytes] = set()
        self.prefixes: set[bytes] = set()
        self.match_all = False
        self.delivered: list[tuple[bytes, bytes, bool]] = []
        self.chan = Filter()
        self.pat = Filter()
        self.resizes = 0

    # LocalDelivery
    def deliver(self, channel: bytes, message: bytes, shard: bool) -> int:
        hit = channel in self.channels or (
            not shard and (self.match_all or any(channel.startswith(p) for p in self.prefixes))
        )
        if hit:
            self.delivered.append((channel, message, shard))
        return int(hit)

    # LocalFilters
    def summary(self, kind):
        f = self.chan if kind is FilterKind.CHANNELS else self.pat
        mask = 0
        for p in self.prefixes:
            mask |= 1 << len(p)
        if kind is FilterKind.CHANNELS:
            return f.m, f.fp(), 0, False
        fp = filter_fingerprint(kind, f.bits.tobytes(), mask, self.match_all)
        return f.m, fp, mask, self.match_all

    def snapshot(self, kind):
        m, fp, mask, match_all = self.summary(kind)
        f = self.chan if kind is FilterKind.CHANNELS else self.pat
        return FilterSnapshot(m, K, f.bits.tobytes(), fp, mask, match_all)

    def resize(self) -> bool:
        self.resizes += 1
        return False

    def estimated_fp_rate(self) -> float:
        return 0.0

    # what router does on (un)subscribe
    def subscribe(self, channel: bytes) -> FilterChange:
        self.channels.add(channel)
        return self.chan.change(channel, +1, "channels")

    def unsubscribe(self, channel: bytes) -> FilterChange:
        self.channels.discard(channel)
        return self.chan.change(channel, -1, "channels")

    def psubscribe_prefix(self, prefix: bytes) -> FilterChange:
        self.prefixes.add(prefix)
        change = self.pat.change(prefix, +1, "patterns")
        fp = self.summary(FilterKind.PATTERNS)[1]
        return FilterChange("patterns", change.set_positions, change.cleared_positions, fp)


def config(**kw) -> NodeConfig:
    base = dict(port=0, cluster_port=0, node_timeout_ms=600)
    base.update(kw)
    return NodeConfig(**base)


async def start_cluster(n: int, **kw) -> list[tuple[BusTestNode, ClusterBus]]:
    out = []
    seed = None
    for _ in range(n):
        node = BusTestNode()
        cfg = config(join=[seed] if seed else [], **kw)
        bus = ClusterBus(node, cfg, node, client_port=1000 + len(out))
        await bus.start()
        seed = seed or f"127.0.0.1:{bus.port}"
        out.append((node, bus))
    return out


async def until(pred, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def converged(buses, n=None) -> bool:
    n = n or len(buses)
    return all(
        b.info_fields()["cluster_known_nodes"] == n and b.info_fields()["cluster_filters_converged"]
        for b in buses
    )


async def stop_all(pairs) -> None:
    for _, bus in pairs:
        await bus.stop()


def run(coro):
    return asyncio.run(coro)


def test_gossip_full_mesh_and_interest_routing():
    async def main():
        pairs = await start_cluster(4)
        nodes = [p[0] for p in pairs]
        buses = [p[1] for p in pairs]
        try:
            await until(lambda: converged(buses), what="convergence")
            # nodes 2, 3 only ever met node 0 (their seed): they learned each other by gossip
            assert len(buses[3].membership.peers) == 3
            for change_node, ch in ((1, b"news"), (3, b"sport")):
                buses[change_node].filters_changed([nodes[change_node].subscribe(ch)])
            fut = nodes[2].psubscribe_prefix(b"log.")
            buses[2].filters_changed([fut])
            await until(
                lambda: all(
                    b.routing.fingerprint(nodes[1].node_id, FilterKind.CHANNELS)
                    == nodes[1].chan.fp()
                    for b in (buses[0], buses[2], buses[3])
                ),
                what="delta applied",
            )
            await asyncio.sleep(0.1)
            assert buses[0].forward_publish(b"news", b"n1", False, 1) == 1
            assert buses[0].forward_publish(b"sport", b"s1", False, 2) == 1
            assert buses[0].forward_publish(b"log.error", b"l1", False, 3) == 1
            assert buses[0].forward_publish(b"nothing", b"x", False, 4) == 0
            assert buses[0].forward_publish(b"news", b"shard", True, 5) == 1
            await until(lambda: len(nodes[1].delivered) == 2 and nodes[2].delivered)
            assert nodes[1].delivered == [(b"news", b"n1", False), (b"news", b"shard", True)]
            assert nodes[2].delivered == [(b"log.error", b"l1", False)]
            assert nodes[3].delivered == [(b"sport", b"s1", False)]
            info = buses[0].info_fields()
            assert info["cluster_stats_messages_publish_sent"] == 4
            assert info["cluster_stats_publish_suppressed"] == 5 * 3 - 4
            # unsubscribe: the delta clears the bits, node 1 no longer gets it
            buses[1].filters_changed([nodes[1].unsubscribe(b"news")])
            await until(lambda: buses[0].forward_publish(b"news", b"n2", False, 6) == 0)
        finally:
            await stop_all(pairs)

    run(main())


def test_subscribe_visibility_future_resolves_on_acks():
    async def main():
        pairs = await start_cluster(3, subscribe_visibility_timeout_ms=2000)
        nodes = [p[0] for p in pairs]
        buses = [p[1] for p in pairs]
        try:
            await until(lambda: converged(buses))
            fut = buses[1].filters_changed([nodes[1].subscribe(b"fresh")])
            assert fut is not None and not fut.done()
            await asyncio.wait_for(fut, 2)
            # once the future is done, every peer routes the channel to node 1
            for b in (buses[0], buses[2]):
                assert b.forward_publish(b"fresh", b"x", False, 1) == 1
            info = buses[1].info_fields()
            assert info["cluster_subscribe_visibility_waits"] == 1
            assert info["cluster_subscribe_visibility_timeouts"] == 0
        finally:
            await stop_all(pairs)

    run(main())


def test_stale_filter_detected_by_fingerprint_and_resynced():
    async def main():
        pairs = await start_cluster(2)
        nodes = [p[0] for p in pairs]
        buses = [p[1] for p in pairs]
        try:
            await until(lambda: converged(buses))
            # a change that is never announced (a lost delta): the PING fingerprint
            # gives it away, node 0 asks for the whole filter and routes it again
            change = nodes[1].subscribe(b"silent")
            buses[1]._announced_fp[FilterKind.CHANNELS] = change.fingerprint
            await until(
                lambda: (
                    buses[0].routing.fingerprint(nodes[1].node_id, FilterKind.CHANNELS)
                    == nodes[1].chan.fp()
                ),
                what="resync",
            )
            assert buses[0].forward_publish(b"silent", b"x", False, 1) == 1
            assert buses[0].info_fields()["cluster_stats_filter_requests_sent"] >= 3
        finally:
            await stop_all(pairs)

    run(main())


def test_unknown_peer_filter_fails_open():
    async def main():
        pairs = await start_cluster(2)
        buses = [p[1] for p in pairs]
        nodes = [p[0] for p in pairs]
        try:
            await until(lambda: converged(buses))
            buses[0].routing.mark_unknown(nodes[1].node_id, FilterKind.CHANNELS)
            assert buses[0].forward_publish(b"anything", b"x", False, 1) == 1
            await until(lambda: buses[1].info_fields()["cluster_stats_false_positives_received"])
        finally:
            await stop_all(pairs)

    run(main())


def test_leave_forgets_and_crash_is_agreed_failed():
    async def main():
        pairs = await start_cluster(4)
        buses = [p[1] for p in pairs]
        nodes = [p[0] for p in pairs]
        try:
            await until(lambda: converged(buses))
            victim = nodes[3].node_id
            await buses[3].stop()
            # a stop sends LEAVE: the others forget it at once
            await until(lambda: all(victim not in b.membership.peers for b in buses[:3]))
            # a crash (no LEAVE): close its links without a word
            crashed = buses[2]
            crashed._stopping = True
            crashed._server.close()
            for link in list(crashed._links):
                link.transport.abort()
            crashed._cron.cancel()
            cid = nodes[2].node_id
            await until(
                lambda: all(b.membership.peers[cid].flags & NodeFlags.FAIL for b in buses[:2]),
                timeout=10,
                what="FAIL agreed",
            )
            assert buses[0].nodes_lines()[0].split()[2] == "myself,master"
            assert any(
                line.startswith(cid) and "master,fail " in line for line in buses[0].nodes_lines()
            )
        finally:
            await stop_all(pairs[:2])

    run(main())


def test_secret_mismatch_cannot_join():
    async def main():
        a = BusTestNode()
        bus_a = ClusterBus(a, config(cluster_secret="s"), a)
        await bus_a.start()
        b = BusTestNode()
        bus_b = ClusterBus(b, config(cluster_secret="s", join=[f"127.0.0.1:{bus_a.port}"]), b)
        c = BusTestNode()
        bus_c = ClusterBus(c, config(join=[f"127.0.0.1:{bus_a.port}"]), c)
        await bus_b.start()
        await bus_c.start()
        try:
            await until(lambda: converged([bus_a, bus_b]))
            await until(lambda: bus_a.info_fields()["cluster_stats_auth_failures"] >= 1)
            await asyncio.sleep(0.3)
            assert c.node_id not in bus_a.membership.peers
            assert bus_c.info_fields()["cluster_known_nodes"] == 1
        finally:
            for bus in (bus_a, bus_b, bus_c):
                await bus.stop()

    run(main())


def test_sequence_gap_counted_and_bad_frame_closes_link():
    async def main():
        pairs = await start_cluster(2)
        buses = [p[1] for p in pairs]
        nodes = [p[0] for p in pairs]
        try:
            await until(lambda: converged(buses))
            buses[1].filters_changed([nodes[1].subscribe(b"c")])
            await until(lambda: buses[0].forward_publish(b"c", b"1", False, 1) == 1)
            link = buses[0]._out[nodes[1].node_id]
            link.send_seq += 5  # as if five forwards were lost
            buses[0].forward_publish(b"c", b"2", False, 2)
            await until(lambda: buses[1].info_fields()["cluster_stats_sequence_gaps"] == 5)
            # a frame with a wrong sender id on an established link: closed and counted
            link.write(encode(Leave(), 12345))
            await until(lambda: buses[1].info_fields()["cluster_stats_bad_frames"] == 1)
            await until(lambda: converged(buses), what="link redialled")
        finally:
            await stop_all(pairs)

    run(main())


def test_send_buffer_limit_drops_link():
    async def main():
        pairs = await start_cluster(2, cluster_link_sendbuf_limit=64 * 1024)
        buses = [p[1] for p in pairs]
        nodes = [p[0] for p in pairs]
        try:
            await until(lambda: converged(buses))
            buses[1].filters_changed([nodes[1].subscribe(b"big")])
            await until(lambda: buses[0].forward_publish(b"big", b"x", False, 1) == 1)
            payload = b"x" * (1 << 20)
            for i in range(8):  # 8 MiB in one go, no chance to drain
                buses[0].forward_publish(b"big", payload, False, i)
            info = buses[0].info_fields()
            assert info["total_cluster_links_buffer_limit_exceeded"] >= 1
            await until(lambda: converged(buses), what="link back")
        finally:
            await stop_all(pairs)

    run(main())
