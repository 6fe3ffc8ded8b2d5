"""node-redis 5 (npm ``redis5``, beside node-redis 4 and ioredis 5 in
test_js_cluster_clients.py) in cluster mode against a 3-node bloomcast cluster
and the same script against a 3-master Redis Cluster 7.0.15 (issue 27 item 7):
subscribe / pSubscribe / sSubscribe with Buffer listeners (UTF-8 names: in
node-redis 5.9 a channel subscribed as a Buffer never reaches its listener),
the round of ``client_servers.publish_round`` (all 256 byte values and 1 MiB
from every node) plus a publish through the client itself, RESP2 with the
default user's password and RESP3 with an ACL user; and sSubscribe of two
shard channels in different slots, which Redis Cluster refuses with
-CROSSSLOT."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.integration import client_servers as cs
from tests.integration.client_servers import bloomcast as bloomcast  # the fixtures
from tests.integration.client_servers import redis_anchor as redis_anchor
from tests.integration.test_js_cluster_clients import JS
from tests.integration.test_js_cluster_clients import npm_packages as npm_packages
from tests.integration.test_js_cluster_clients import pytestmark as js_marks

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(120),
    *(mark for mark in js_marks if mark.name == "skipif"),  # skipped without node and npm
    pytest.mark.usefixtures("npm_packages"),
]

CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"


@pytest.fixture(params=["bloomcast", "redis"])
def target(request: pytest.FixtureRequest) -> cs.Target:
    if request.param == "bloomcast":
        return cs.Target("bloomcast", "cluster", request.getfixturevalue("bloomcast").ports)
    return cs.Target("redis", "cluster", request.getfixturevalue("redis_anchor"))


class Script:
    """``client_libraries.mjs`` as a child process: JSON lines out, one line in."""

    def __init__(self, target: cs.Target, names: cs.Names, resp: int, acl: bool, **extra: object):
        cfg = {
            "ports": target.ports,
            "resp": resp,
            "username": cs.USER if acl else None,
            "password": cs.USER_PASSWORD if acl else cs.PASSWORD,
            "channel": names.channel.hex(),
            "pattern": names.pattern.hex(),
            "shard": names.shard.hex(),
            **extra,
        }
        self.proc = subprocess.Popen(
            ["node", str(JS / "client_libraries.mjs"), json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            assert self.proc.stderr is not None
            raise AssertionError(f"node-redis 5 script exited: {self.proc.stderr.read()}")
        return json.loads(line)

    def write(self, obj: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        try:
            assert self.proc.wait(20) == 0
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if f is not None:
                    f.close()


@pytest.mark.parametrize(
    ("resp", "acl"), [(2, False), (3, True)], ids=["resp2-password", "resp3-acl-user"]
)
def test_node_redis5_cluster_pubsub(target: cs.Target, resp: int, acl: bool) -> None:
    names = cs.TEXT
    script = Script(target, names, resp, acl)
    try:
        assert script.read() == {"ready": True}  # every subscription confirmed
        rnd = cs.publish_round(target, names, sharded=True)
        rnd.expected += [  # the script's own PUBLISH and SPUBLISH of all byte values
            ("message", names.channel, None, cs.digest(cs.ALL_BYTES)),
            ("pmessage", names.channel, names.pattern, cs.digest(cs.ALL_BYTES)),
            ("smessage", names.shard, None, cs.digest(cs.ALL_BYTES)),
        ]
        script.write({"expect": len(rnd.expected)})
        received = script.read()["received"]
    finally:
        script.close()
    got: list[cs.Record] = [
        (kind, bytes.fromhex(ch), None if pat is None else bytes.fromhex(pat), dig)
        for kind, ch, pat, dig in received
    ]
    cs.assert_round(target, names, rnd, got)


@pytest.mark.parametrize(
    "target",
    ["bloomcast", "redis"],
    indirect=True,
)
def test_node_redis5_ssubscribe_across_slots_is_refused(target: cs.Target) -> None:
    """node-redis 5 sends both channels to the first one's node in one SSUBSCRIBE."""
    a, b = b"cross{1}", b"cross{2}"
    with target.client(target.ports[0]) as r:
        assert r.cluster("keyslot", a) != r.cluster("keyslot", b)
    script = Script(target, cs.TEXT, 3, True, crossslot=[a.hex(), b.hex()])
    try:
        reply = script.read()
    finally:
        script.close()
    assert reply == {"crossslot": CROSSSLOT}
