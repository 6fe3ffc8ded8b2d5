"""Hostile addresses and hostnames through every way they enter a node (issue 49).

    uv run python -m tests.fuzz.fuzz_addresses --count 2000 [--seed N] [--plane both]

Two buses on loopback, A (the target, with its ``--cluster-config-file``)
and B (a peer whose link A trusts), on one data plane (``python``: the
reference, as ``BLOOMCAST_NO_EXTENSIONS=1``; ``compiled``), then each step
one of:

- *gossip*: B's authenticated link writes a PING or PONG whose own host and
  hostname, and whose 1-5 gossip entries' hosts and hostnames, are hostile
  bytes (NUL, newline, spaces, commas, ``myself,master``, 64-character
  labels, empty labels, bytes that are no UTF-8, IPv6 forms, zones, 255
  bytes): A's decoder and its gossip entry checks;
- *meet*: CLUSTER MEET with a hostile address (up to 100,000 bytes);
- *dial*: a host the resolver raises on (not OSError) handed straight to
  the bus (``meet``), past the checks: the dialer's own guard;
- *file*: A's nodes file as A would write it, with peer lines carrying
  hostile values inserted anywhere, read back as at a restart.

After each step: no exception escaped into the event loop or the log
(``bus cron step failed``), A's id is its own, every address and hostname
A holds passes the entry checks, A's membership renders to a file that
reads back to the same nodes with no line refused and A's id, and a file
with hostile lines still gives A's id. At the end: A's dial places are all
free again (no wedge), A and B are linked, and A's saved file restarts A
as itself. Only loopback is ever dialled: a valid address that is not a
loopback IP is gossiped with bus port 0 (never dialled), so no name is
ever sent to a resolver off this host. Exit status 1 with the step on
failure.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bloomcast.testing import free_ports
from cluster_bus import dataplane
from cluster_bus.bus import ClusterBus
from cluster_bus.codec import _GOSSIP, _HEARTBEAT, _frame, short_id
from cluster_bus.frames import MsgType
from cluster_bus.nodes_file import NodesFile, NodesFileError, parse, render
from netutil.addresses import address_error, hostname_error, normal_ip
from router.commands.cluster_cmd import cluster_meet
from tests.cluster_bus.test_bus import BusTestNode, config

#: hostile values; each also goes out cut to the wire's 255 bytes
CORPUS: list[bytes] = [
    b"",
    b"\x00",
    b"a\x00b",
    b"127.0.0.1\x00",
    b"a\nb",
    b"a\r\nb",
    b"10.0.0.1\n",
    b"a b",
    b" ",
    b"a,b",
    b",",
    b"evil myself,master",
    b"evil myself,master master - 0 0 0 connected\nvars currentEpoch 9",
    b"a" * 63,
    b"a" * 64,
    b"a" * 64 + b".example",
    b"a..b",
    b".",
    b"..",
    b"-",
    b"x." * 127,
    b"h" * 255,
    b"\xff\xfe",
    b"\xc0\x80",
    b"caf\xc3\xa9",
    b"\xe2\x80\xa8",
    b"::1",
    b"::",
    b"::ffff:127.0.0.1",
    b"::0001",
    b"fe80::1%eth0",
    b"fe80::1%",
    b"[::1]",
    b"1.2.3.4:5",
    b"a@b",
    b"127.0.0.1",
    b"127.1",
    b"1e100",
    b"node-1.example",
]
ALPHABET = b"\x00\n\r ,.-:%@[]a1\xff\x80\xc3"
NID_B = 20


def hostile(rng: random.Random, limit: int = 255, utf8: bool = False) -> bytes:
    """A corpus value, a mutation of one, or random bytes of a hostile
    alphabet; ``utf8``: one that decodes (a frame with any other is refused
    whole by the decoder, so most frames carry only these, to reach the
    entry checks behind it)."""
    while True:
        value = _hostile(rng, limit)
        if not utf8:
            return value
        try:
            value.decode()
        except UnicodeDecodeError:
            continue
        return value


def _hostile(rng: random.Random, limit: int) -> bytes:
    pick = rng.random()
    if pick < 0.6:
        value = rng.choice(CORPUS)
    elif pick < 0.85:
        value = bytearray(rng.choice(CORPUS))
        for _ in range(rng.randint(1, 3)):
            value.insert(rng.randint(0, len(value)), rng.choice(ALPHABET))
        value = bytes(value)
    else:
        value = bytes(rng.choice(ALPHABET) for _ in range(rng.randint(1, 300)))
    return value[:limit]


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _loopback(host: str) -> bool:
    ip = normal_ip(host)
    return ip is not None and (ip.startswith("127.") or ip in ("::1", "::ffff:127.0.0.1"))


def _never_dialled_off_host(raw: bytes) -> bool:
    """A dial of ``raw`` cannot leave this host: it is a loopback IP, or no
    address at all (refused at entry, or raising before any resolver call)."""
    text = _text(raw)
    return bool(text) and (address_error(text) is not None or _loopback(text))


def heartbeat(
    mtype: MsgType,
    sender_id: str,
    host: bytes,
    hostname: bytes,
    ports: tuple[int, int],
    gossip: list[tuple[str, bytes, bytes, int]],
) -> bytes:
    """A MEET / PING / PONG frame whose hosts and hostnames are raw bytes
    (cluster_bus/codec.py's layout: the encoder takes only strings)."""
    parts = [
        _HEARTBEAT.pack(
            bytes.fromhex(sender_id),
            ports[0],
            ports[1],
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            1,
            len(host),
            len(hostname),
            len(gossip),
        ),
        host,
        hostname,
    ]
    for node_id, ghost, gname, bus_port in gossip:
        parts.append(
            _GOSSIP.pack(
                bytes.fromhex(node_id), 7000, bus_port, 0, 0, 1, 0, 0, 0, len(ghost), len(gname)
            )
        )
        parts += [ghost, gname]
    return _frame(mtype, 0, short_id(sender_id), b"".join(parts))


def _valid(host: str, hostname: str) -> bool:
    return (not host or address_error(host) is None) and hostname_error(hostname) is None


class Failures(logging.Handler):
    """Errors logged by the bus (``bus cron step failed``, a loop callback's)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


async def _until(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def check_identity(a: ClusterBus, my_id: str, rng: random.Random, where: str) -> None:
    """A's id, the values it holds, and its file as written and as tampered with."""
    ms = a.membership
    assert a.node_id == ms.my_id == my_id, f"{where}: the node's id changed"
    for rec in ms.peers.values():
        assert _valid(rec.host, rec.hostname), f"{where}: holds {rec.host!r} / {rec.hostname!r}"
    for gone in ms.lost.values():
        assert _valid(gone.host, ""), f"{where}: holds lost {gone.host!r}"
    text = render(ms, a.sync.epoch)
    saved = parse(text, where)
    assert saved.my_id == my_id and saved.rejected == 0, f"{where}: file {text!r}"
    want = {(r.node_id, r.host, r.client_port, r.bus_port, r.hostname) for r in ms.peers.values()}
    want |= {(g.node_id, g.host, g.client_port, g.bus_port, "") for g in ms.lost.values()}
    got = {(n.node_id, n.host, n.client_port, n.bus_port, n.hostname) for n in saved.nodes}
    assert got == want, f"{where}: read back {got} != {want}"
    lines = text.split("\n")
    for _ in range(rng.randint(1, 3)):  # a peer line as written with a hostile value
        host, name = _text(hostile(rng, 100_000)), _text(hostile(rng, 100_000))
        address = f"{host}:7000@17000" + (f",{name}" if name else "")
        flags = rng.choice(("master", "master,fail"))
        line = f"{os.urandom(20).hex()} {address} {flags} - 0 0 0 connected"
        lines.insert(rng.randint(1, len(lines) - 1), line)  # after the myself line
    try:
        tampered = parse("\n".join(lines), where)
    except NodesFileError as exc:
        raise AssertionError(f"{where}: a hostile peer line stopped the restart: {exc}") from None
    assert tampered.my_id == my_id, f"{where}: took the id {tampered.my_id}"
    for n in tampered.nodes:
        assert _valid(n.host, n.hostname), f"{where}: loaded {n.host!r} / {n.hostname!r}"


async def _run(count: int, seed: int, plane: dataplane.BusPlane, directory: Path) -> dict[str, int]:
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    escaped: list[str] = []
    loop.set_exception_handler(lambda _loop, ctx: escaped.append(str(ctx.get("message"))))
    failures = Failures()
    logging.getLogger("bloomcast").addHandler(failures)
    stats = dict.fromkeys(("gossip", "meet", "dial", "file", "relinks"), 0)
    a_port, b_port, *closed_ports = free_ports(6)  # the last 4: a dial there is refused
    path = directory / "a.conf"
    a_file = NodesFile(path)
    a_file.open()
    a_node, b_node = BusTestNode(), BusTestNode()
    a = ClusterBus(a_node, config(port=a_port, node_timeout_ms=2000), a_file, plane=plane)
    await a.start()
    b_config = config(port=b_port, node_timeout_ms=2000, join=[f"127.0.0.1:{a_port}"])
    b = ClusterBus(b_node, b_config, plane=plane)
    await b.start()
    my_id = a.node_id
    meet_ctx: Any = SimpleNamespace(link=a)
    try:
        for step in range(count):
            link = b.mesh.link_to(my_id)
            if link is None or link.closed:
                stats["relinks"] += 1
                await _until(lambda: b.mesh.link_to(my_id) is not None, 20, "B relinked")
                link = b.mesh.link_to(my_id)
                assert link is not None
            kind = rng.choice(("gossip", "gossip", "gossip", "meet", "dial", "file"))
            where = f"step {step} ({kind}, plane {plane.name}, seed {seed})"
            if kind == "gossip":
                entries = []
                utf8 = rng.random() < 0.8
                for _ in range(rng.randint(1, 5)):
                    ghost, gname = hostile(rng, utf8=utf8), hostile(rng, utf8=utf8)
                    port = rng.choice(closed_ports) if _never_dialled_off_host(ghost) else 0
                    entries.append((os.urandom(20).hex(), ghost, gname, port))
                own_host = hostile(rng, utf8=utf8)
                if not _never_dialled_off_host(own_host):
                    own_host = b"127.0.0.1"
                mtype = rng.choice((MsgType.PING, MsgType.PONG))
                ports = (b.client_port, b.port)
                own_name = hostile(rng, utf8=utf8)
                link.write(heartbeat(mtype, b.node_id, own_host, own_name, ports, entries))
            elif kind == "meet":
                host = hostile(rng, 100_000)
                if not _never_dialled_off_host(host):
                    host = b"127.0.0.1"
                args = [b"CLUSTER", b"MEET", host, str(closed_ports[0]).encode()]
                reply = cluster_meet(meet_ctx, SimpleNamespace(resp=2), args)  # type: ignore[arg-type]
                assert reply.startswith((b"+OK", b"-ERR Invalid node address")), where
            elif kind == "dial":
                host = rng.choice(("a" * 64, "a..b", "a\x00b", "\udcff", "x." * 100 + "y" * 64))
                a.meet(host, rng.choice(closed_ports))
            else:
                await asyncio.sleep(0)
            stats[kind] += 1
            await asyncio.sleep(0.005)
            check_identity(a, my_id, rng, where)
            assert not escaped, f"{where}: escaped into the loop: {escaped}"
            assert not failures.records, f"{where}: logged {failures.records}"
        # no wedge: every dial place free again once the dials end
        await _until(
            lambda: all(address_error(h) is None and _loopback(h) for h, _ in a.dialer.dialing),
            20,
            "A's dials of hostile addresses to end",
        )
        assert len(a.dialer.dialing) < a.dialer.in_flight
        await _until(lambda: b.mesh.link_to(my_id) is not None, 20, "A and B linked at the end")
    finally:
        await b.stop()
        await a.stop()
        a_file.close()
        logging.getLogger("bloomcast").removeHandler(failures)
    again = NodesFile(path)
    try:
        saved = again.open()
    finally:
        again.close()
    assert saved is not None and saved.my_id == my_id and saved.rejected == 0, "restart"
    stats["dial_errors"] = a.dialer.dial_errors
    stats["addresses_refused"] = a.stats.addresses_refused
    stats["bad_frames"] = a.stats.bad_frames
    return stats


def planes(which: str) -> list[dataplane.BusPlane]:
    """``python``, ``compiled`` (skipped when not built) or ``both``."""
    out = []
    if which in ("python", "both"):
        out.append(dataplane.python())
    if which in ("compiled", "both"):
        try:
            out.append(dataplane.compiled())
        except ImportError:
            if which == "compiled":
                raise
    return out


def run(count: int, seed: int = 0, which: str = "both") -> dict[str, dict[str, int]]:
    """``count`` steps on each plane; AssertionError naming the step on a finding."""
    out = {}
    for plane in planes(which):
        with tempfile.TemporaryDirectory(prefix="fuzz-addresses-") as tmp:
            out[plane.name] = asyncio.run(_run(count, seed, plane, Path(tmp)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plane", choices=("python", "compiled", "both"), default="both")
    args = parser.parse_args(argv)
    t0 = time.time()
    try:
        stats = run(args.count, args.seed, args.plane)
    except AssertionError as exc:
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    for name, counts in stats.items():
        print(name, " ".join(f"{k}={v}" for k, v in counts.items()))
    print(f"seconds={time.time() - t0:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
