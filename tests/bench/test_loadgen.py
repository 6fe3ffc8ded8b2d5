"""bench/loadgen.py and bench/servers.py against a real valkey-server: the
redis-benchmark result is parsed, subscribers count exactly what was published."""

import shutil

import pytest
import redis

from bench.loadgen import (
    SubscriberPool,
    message_frame,
    parse_benchmark_csv,
    redis_benchmark,
)
from bench.procs import tcp_bytes_sent
from bloomcast.testing import LOOPBACK, VALKEY, start_anchor

needs_redis_benchmark = pytest.mark.skipif(
    shutil.which("redis-benchmark") is None,
    reason="redis-benchmark missing: apt-get install redis-tools",
)


@pytest.fixture
def valkey():
    server = start_anchor(VALKEY)
    yield server
    server.stop()


def test_parse_benchmark_csv():
    text = (
        '"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",'
        '"p95_latency_ms","p99_latency_ms","max_latency_ms"\n'
        '"PUBLISH chan msg","476190.47","1.307","0.320","1.039","3.215","4.455","4.583"\n'
    )
    values = parse_benchmark_csv(text)
    assert values["rps"] == 476190.47
    assert values["p99_latency_ms"] == 4.455
    with pytest.raises(ValueError):
        parse_benchmark_csv("ERR unknown command\n")


def test_message_frame_is_what_the_server_sends(valkey):
    with (
        SubscriberPool(valkey.port, b"chan", 1, b"payload") as pool,
        redis.Redis(host=LOOPBACK, port=valkey.port) as r,
    ):
        assert pool.frame_len == len(message_frame(b"chan", b"payload"))
        for _ in range(7):
            assert r.publish("chan", "payload") == 1
        assert pool.wait_for(7, timeout=10)
        assert pool.messages() == 7


def test_subscriber_pool_with_several_channels(valkey):
    channels = [b"ch:%03d" % i for i in range(5)]
    with (
        SubscriberPool(valkey.port, channels, 3, b"x") as pool,
        redis.Redis(host=LOOPBACK, port=valkey.port) as r,
    ):
        for ch in channels:
            assert r.publish(ch, "x") == 3
        assert pool.wait_for(len(channels), timeout=10)
        assert pool.messages() == 3 * len(channels)
    with pytest.raises(ValueError):
        SubscriberPool(valkey.port, [b"a", b"bb"], 1, b"x")


@needs_redis_benchmark
def test_redis_benchmark_publish_reaches_subscribers(valkey):
    with SubscriberPool(valkey.port, b"bench:ch", 2, b"hello") as pool:
        result = redis_benchmark(
            valkey.port, ["PUBLISH", "bench:ch", "hello"], clients=5, requests=500, pipeline=4
        )
        assert pool.wait_for(500, timeout=20)
    assert result.rps > 0
    assert result.requests == 500 and result.pipeline == 4
    assert result.p99_latency_ms >= result.p50_latency_ms


def test_tcp_bytes_sent_sees_client_traffic(valkey):
    with redis.Redis(host=LOOPBACK, port=valkey.port) as r:
        r.ping()
        before = tcp_bytes_sent([valkey.port])
        r.set("k", "v" * 10_000)
        after = tcp_bytes_sent([valkey.port])
    # both ends are counted: the 10 kB value went out from the client socket
    assert after - before >= 10_000


def test_server_stops_and_frees_its_port(valkey):
    port = valkey.port
    valkey.stop()
    assert valkey.proc.poll() is not None
    with pytest.raises(redis.ConnectionError):
        redis.Redis(host=LOOPBACK, port=port, socket_connect_timeout=1).ping()
