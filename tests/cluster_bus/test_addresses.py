"""Addresses and hostnames from outside, checked where they enter (issue 49):
the rules (netutil/addresses.py), a gossip section with hostile entries
on a real bus, the nodes file's round trip of every value a node accepts (a
property test), and a short run of tests/fuzz/fuzz_addresses.py on both data
planes (the long run: ``python -m tests.fuzz.fuzz_addresses --count 5000``)."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomcast.testing import free_ports
from cluster_bus import dataplane
from cluster_bus.bus import ClusterBus
from cluster_bus.frames import MsgType
from cluster_bus.membership import Membership
from cluster_bus.nodes import LostNode
from cluster_bus.nodes_file import parse, render
from netutil.addresses import (
    HOSTNAME_CHARS_ERROR,
    HOSTNAME_LENGTH_ERROR,
    address_error,
    hostname_error,
    normal_ip,
    parse_seed,
)
from tests.cluster_bus.test_bus import BusTestNode, config, converged, stat, until
from tests.fuzz import fuzz_addresses

pytestmark = pytest.mark.timeout(120)


def test_a_hostname_is_redis_7_0s_announced_hostname():
    """``isValidAnnouncedHostname``: [A-Za-z0-9.-], fewer than 256 characters."""
    for ok in ("", "a", "node-1.example.com", "-", ".", "h" * 255, "1.2.3.4"):
        assert hostname_error(ok) is None, ok
    for bad in ("a b", "a,b", "a\nb", "a\x00b", "caf\u00e9", "a_b", "\udcff", "::1", "a:1"):
        assert hostname_error(bad) == HOSTNAME_CHARS_ERROR, bad
    assert hostname_error("h" * 256) == HOSTNAME_LENGTH_ERROR


def test_an_address_is_an_ip_literal_or_a_name_the_resolver_takes():
    for ok in ("127.0.0.1", "::1", "::ffff:1.2.3.4", "fe80::1%eth0", "localhost", "a.b.", "a" * 63):
        assert address_error(ok) is None, ok
    for bad in ("", "a" * 64, "a..b", ".a", "a b", "evil myself,master", "a\x00b", "[::1]"):
        assert address_error(bad) is not None, bad
    assert address_error("1.2.3.4%eth0") is not None  # a zone on IPv6 only
    assert normal_ip("::0001") == "::1" and normal_ip("127.1") is None
    assert parse_seed("[::1]:17001") == ("::1", 17001) and parse_seed(":17001")[0] == "127.0.0.1"
    with pytest.raises(ValueError, match=r"labels are 1\.\.63"):
        parse_seed(f"{'a' * 64}:17001")


def test_hostile_gossip_entries_are_dropped_and_counted_the_rest_learned():
    """A PING whose gossip section holds a good entry and hostile ones: the
    good one is learned, each hostile one dropped and counted in CLUSTER
    INFO ``cluster_stats_addresses_refused``; the sender's own hostname,
    hostile, is ignored (counted too); the link stays up."""

    async def main():
        pa, pb, closed = free_ports(3)
        a_node, b_node = BusTestNode(), BusTestNode()
        a = ClusterBus(a_node, config(port=pa))
        await a.start()
        b = ClusterBus(b_node, config(port=pb, join=[f"127.0.0.1:{pa}"]))
        await b.start()
        try:
            await until(lambda: converged([a, b]))
            good, *bad_ids = (f"{i:040x}" for i in range(1, 6))
            entries = [(good, b"127.0.0.1", b"good.example", closed)]
            hostile = [
                (b"127.0.0.1", b"evil myself,master"),
                (b"a" * 64, b""),
                (b"a\nb", b""),
                (b"127.0.0.1", b"a\x00b"),
            ]
            # (bus port 0: never dialled, and no address another entry holds)
            entries += [(i, h, n, 0) for i, (h, n) in zip(bad_ids, hostile, strict=True)]
            frame = fuzz_addresses.heartbeat(
                MsgType.PING, b.node_id, b"127.0.0.1", b"x y", (b.client_port, pb), entries
            )
            link = b.mesh.link_to(a.node_id)
            assert link is not None
            link.write(frame)
            await until(lambda: good in a.membership.peers, what="the good entry learned")
            assert a.membership.peers[good].hostname == "good.example"
            assert not set(bad_ids) & set(a.membership.peers)
            assert stat(a, "cluster_stats_addresses_refused") == 5
            assert a.membership.peers[b.node_id].hostname == ""
            assert stat(a, "cluster_stats_bad_frames") == 0 and not link.closed
        finally:
            await b.stop()
            await a.stop()

    asyncio.run(main())


_LABEL = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-", min_size=1)
HOSTS = st.one_of(
    st.just(""),
    st.ip_addresses().map(str),
    st.lists(_LABEL.filter(lambda label: len(label) <= 63), min_size=1, max_size=6).map(".".join),
    st.text(max_size=300),  # anything: kept only when a node takes it
).filter(lambda h: not h or address_error(h) is None)
HOSTNAMES = st.one_of(st.text("abcXYZ019.-", max_size=255), st.text(max_size=300)).filter(
    lambda n: hostname_error(n) is None
)
PORTS = st.integers(0, 65535)


@settings(max_examples=200, deadline=None)
@given(
    me=st.tuples(HOSTS, HOSTNAMES, PORTS, PORTS),
    peers=st.lists(st.tuples(HOSTS, HOSTNAMES, PORTS, PORTS), max_size=8),
    lost=st.lists(st.tuples(HOSTS, PORTS, PORTS), max_size=4),
    epoch=st.integers(0, 2**64 - 1),
    incarnation=st.integers(0, 2**32 - 1),
)
def test_the_nodes_file_reads_back_every_value_a_node_accepts(me, peers, lost, epoch, incarnation):
    """Save then load gives the same nodes, for any host, hostname and port
    that passes the entry checks (issue 49), with nothing refused."""
    host, hostname, port, bus_port = me
    m = Membership("f" * 40, host, port, bus_port, 2000, random.Random(1), 200)
    m.myself.hostname, m.myself.incarnation = hostname, incarnation
    for i, (h, name, p, bp) in enumerate(peers):
        rec = m.learn(f"{i + 1:040x}", h, p, bp, 0, direct=True, inferred=True)
        assert rec is not None
        rec.hostname = name
    for i, (h, p, bp) in enumerate(lost):
        node_id = f"{i + 100:040x}"
        m.lost[node_id] = LostNode(node_id, h, p, bp, 0)
    saved = parse(render(m, epoch))
    assert (saved.my_id, saved.epoch, saved.incarnation, saved.rejected) == (
        m.my_id,
        epoch,
        incarnation,
        0,
    )
    want = {(r.node_id, r.host, r.client_port, r.bus_port, r.hostname) for r in m.peers.values()}
    want |= {(g.node_id, g.host, g.client_port, g.bus_port, "") for g in m.lost.values()}
    assert {(n.node_id, n.host, n.client_port, n.bus_port, n.hostname) for n in saved.nodes} == want


@pytest.mark.parametrize("plane", ["python", "compiled"])
def test_the_address_fuzzer_finds_no_wedge_crash_or_changed_identity(plane):
    """A short run of tests/fuzz/fuzz_addresses.py on each data plane."""
    if plane == "compiled":
        try:
            dataplane.compiled()
        except ImportError:
            pytest.skip("the compiled plane is not built")
    stats = fuzz_addresses.run(80, seed=3, which=plane)[plane]
    assert stats["gossip"] > 20 and stats["addresses_refused"] > 0 and stats["dial_errors"] > 0


def test_the_checked_pairs_remembered_are_bounded():
    """Gossip remembers the (host, hostname) pairs it checked, at most
    ``ACCEPTED_CACHE``: more distinct ones empty it."""
    from cluster_bus.frames import GossipEntry
    from cluster_bus.heartbeat import ACCEPTED_CACHE

    hb = ClusterBus(BusTestNode(), config()).heartbeats
    entries = tuple(
        GossipEntry(f"{i:040x}", f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", 1, 2, 0, 0, 0, 0, 0)
        for i in range(ACCEPTED_CACHE + 100)
    )
    assert len(hb._checked("p", entries)) == len(entries)
    assert 0 < len(hb._accepted) <= ACCEPTED_CACHE
