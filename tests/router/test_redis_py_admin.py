"""redis-py's own calls for transactions and the admin commands, against a
node process: a transactional pipeline (MULTI / EXEC) with PUBLISH, WATCH,
CONFIG GET / SET / RESETSTAT, CLIENT KILL by filter, CLIENT PAUSE WRITE /
UNPAUSE, INFO commandstats."""

from __future__ import annotations

import threading

import pytest
import redis

from tests.procs import bloomcast_node

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def node():
    with bloomcast_node() as port:
        yield port


@pytest.mark.parametrize("protocol", [2, 3])
def test_transaction_pipeline_publishes_and_returns_each_reply(node, protocol):
    r = redis.Redis(port=node, protocol=protocol)
    p = r.pubsub()
    p.subscribe("tx")
    assert p.get_message(timeout=2)["type"] == "subscribe"
    with r.pipeline(transaction=True) as pipe:
        pipe.publish("tx", "one")
        pipe.echo("e")
        pipe.publish("tx", "two")
        assert pipe.execute() == [1, b"e", 1]
    got = [p.get_message(ignore_subscribe_messages=True, timeout=2)["data"] for _ in range(2)]
    assert got == [b"one", b"two"]
    p.close()


def test_watch_then_transaction_runs(node):
    r = redis.Redis(port=node)
    with r.pipeline(transaction=True) as pipe:
        pipe.watch("k")
        pipe.multi()
        pipe.publish("nobody", "x")
        assert pipe.execute() == [0]


def test_a_refused_command_aborts_the_transaction(node):
    r = redis.Redis(port=node)
    with r.pipeline(transaction=True) as pipe:
        pipe.publish("a", "b")
        pipe.execute_command("NOSUCH")
        with pytest.raises(redis.ResponseError, match=r"EXECABORT|unknown command"):
            pipe.execute()
    assert r.ping()


def test_config_calls(node):
    r = redis.Redis(port=node, decode_responses=True)
    assert r.config_get("maxclients") == {"maxclients": "10000"}
    assert set(r.config_get("*max*len*")) == {"proto-max-bulk-len", "slowlog-max-len"}
    assert r.config_set("notify-keyspace-events", "KEA")
    assert r.config_get("notify-keyspace-events") == {"notify-keyspace-events": "AKE"}
    with pytest.raises(redis.ResponseError, match="Unknown option"):
        r.config_set("nosuch", "1")
    r.echo("x")
    assert "cmdstat_echo" in r.info("commandstats")
    assert r.config_resetstat()
    assert "cmdstat_echo" not in r.info("commandstats")


def test_client_kill_filter_closes_the_other_connection(node):
    r = redis.Redis(port=node)
    other = redis.Redis(port=node)
    other_id = other.client_id()
    assert r.client_kill_filter(_id=str(other_id)) == 1
    # redis-py finds its connection closed and opens a new one: a new id
    assert other.client_id() != other_id
    assert r.client_kill_filter(_id=str(other_id)) == 0


def test_client_pause_write_holds_publish_until_unpause(node):
    r = redis.Redis(port=node)
    publisher = redis.Redis(port=node)
    assert r.client_pause(60_000, all=False)
    assert publisher.ping()  # not a write: runs
    replies: list[int] = []
    t = threading.Thread(target=lambda: replies.append(publisher.publish("c", "m")))
    t.start()
    t.join(0.3)
    assert replies == []  # held while the pause is on
    assert r.client_unpause()
    t.join(10)
    assert replies == [0]


#: CLIENT LIST / INFO's fields in Redis 7.0.15 (networking.c catClientInfoString)
FIELDS_7_0 = (  # noqa: SIM905 (a list of names that reads as one)
    "id addr laddr fd name age idle flags db sub psub ssub multi qbuf qbuf-free argv-mem "
    "multi-mem rbs rbp obl oll omem tot-mem events cmd user redir resp"
).split()


@pytest.mark.parametrize("protocol", [2, 3])
def test_client_info_list_and_tracking_through_redis_py(node, protocol):
    """redis-py parses every 7.0.15 field, in order, then SETINFO's two; the
    tracking it switches on shows in GETREDIR / TRACKINGINFO and the flags."""
    r = redis.Redis(port=node, protocol=protocol)
    assert r.client_tracking_on(bcast=True, prefix=["a", "b"]) == b"OK"
    info = r.client_info()
    assert list(info)[: len(FIELDS_7_0)] == FIELDS_7_0
    assert list(info)[len(FIELDS_7_0) :] == ["lib-name", "lib-ver"]
    assert info["flags"] == "tB" and str(info["redir"]) == "0" and int(info["fd"]) > 2
    assert info["cmd"] == "client|info" and int(info["argv-mem"]) == len("clientinfo")
    mine = [c for c in r.client_list() if str(c["id"]) == str(info["id"])]
    assert len(mine) == 1 and mine[0]["flags"] == "tB"
    assert r.client_getredir() == 0
    tracking = r.client_trackinginfo()  # a map in RESP3, a flat list in RESP2
    if isinstance(tracking, list):
        tracking = {k.encode(): v for k, v in zip(tracking[::2], tracking[1::2], strict=True)}
    assert tracking[b"prefixes"] == [b"a", b"b"] and tracking[b"redirect"] == 0
    assert r.client_tracking_off() == b"OK" and r.client_getredir() == -1
