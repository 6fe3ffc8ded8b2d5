"""The ``--redis-layout goforget`` sink, read by a port of goforget's own code.

A real Spark run (local[2]) writes the same spool to a real redis-server twice:
the exact layout (db 1) and the goforget layout (db 2, through the CLI flag).
``tests/spark/goforget_port.py`` (a line-for-line port of goforget's read,
decay and update paths at bitly/forgettable 4edcc61) reads the goforget
layout and must see the exact distribution, rounded as spark/goforget.py
documents; goforget's update worker must not delete it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import redis

from bloomcast.cli import main as cli_main
from bloomcast.testing import REDIS, free_port, start_anchor
from spark.decay import decay_rate, decay_to
from spark.goforget import expire_seconds, goforget_rate
from spark.job import JobConfig, run_once
from tests.spark import goforget_port as gf
from tests.spark.events_data import BASE, lines_of, make_events

pytestmark = pytest.mark.spark

HALF_LIVES = {"10m": 600.0, "1h": 3600.0}


@pytest.fixture(scope="module")
def redis_server():
    with start_anchor(REDIS, attempts=5) as server:
        yield server


@pytest.fixture(scope="module")
def two_layouts(spark, redis_server, tmp_path_factory):
    """One spool (3 files, one micro-batch each, events of the last 15 minutes), written
    once per layout. Returns the two URLs and the number of batches."""
    root = tmp_path_factory.mktemp("goforget")
    spool = root / "spool"
    spool.mkdir()
    shift = time.time() - 900 - BASE
    events = [dataclasses.replace(e, time=e.time + shift) for e in make_events(7, n=600, span=600)]
    third = len(events) // 3
    for i in range(3):
        path = spool / f"node-{i:08d}.ndjson"
        path.write_text("".join(lines_of(events[i * third : (i + 1) * third if i < 2 else None])))
        mtime = time.time() - 200 + i
        os.utime(path, (mtime, mtime))
    exact, goforget = redis_server.url(1), redis_server.url(2)
    for url in (exact, goforget):
        redis.Redis.from_url(url).flushdb()
    config = JobConfig(
        spool=str(spool),
        checkpoint=str(root / "ck-exact"),
        half_lives=tuple(HALF_LIVES.values()),
        redis_url=exact,
        max_files_per_trigger=1,
    )
    run_once(spark, config)
    args = ["stats", "run", "--spool", str(spool), "--master", "local[2]", "--once"]
    args += ["--half-life", ",".join(HALF_LIVES), "--redis", goforget, "--redis-layout", "goforget"]
    args += ["--checkpoint", str(root / "ck-goforget"), "--max-files-per-trigger", "1"]
    args += ["--shuffle-partitions", "2"]
    assert cli_main(args) == 0
    return {"exact": exact, "goforget": goforget, "batches": 3}


def dists(url: str) -> list[str]:
    client = redis.Redis.from_url(url, decode_responses=True)
    return sorted(k for k in client.keys("*:*") if "._" not in k and not k.startswith("bloomcast"))


def exact_at(url: str, dist: str, at: float) -> dict[str, float]:
    """The exact layout's distribution decayed to ``at``."""
    client = redis.Redis.from_url(url, decode_responses=True)
    counts = {b: float(s) for b, s in client.zrange(dist, 0, -1, withscores=True)}
    t = float(client.get(f"{dist}._T") or 0)
    h = HALF_LIVES[dist.split(":")[1]]
    return decay_to(counts, t, decay_rate(h), at)


def test_goforget_reads_the_layout_with_the_exact_probabilities(two_layouts):
    exact, url = two_layouts["exact"], two_layouts["goforget"]
    # each batch's write rounds every bin by at most 0.5 (then decays): the documented bound
    slack = 0.5 * two_layouts["batches"] + 1e-9
    names = dists(exact)
    assert len(names) == 10 and dists(url) == names
    client = gf.goforget_client(url)
    checked = 0
    for name in names:
        # goforget's /dist read path at the second it was written: dt = 0, no Poisson loss
        t_written = int(redis.Redis.from_url(url).get(f"{name}._T") or 0)
        assert abs(t_written - time.time()) < 120  # _T is wall-clock time, not event time
        rate = goforget_rate(HALF_LIVES[name.split(":")[1]])
        d = gf.dist_handler(client, name, rate, t_written, random.Random(1))
        assert d.errors == []  # every count and _T parsed as an integer
        want = exact_at(exact, name, t_written)
        big = sum(want.values())
        assert set(d.data) <= set(want)
        for b, w in want.items():
            got = d.data[b].count if b in d.data else 0
            assert abs(got - w) <= slack, (name, b, got, w)
        assert d.z == sum(v.count for v in d.data.values())
        assert abs(d.z - big) <= slack * len(want)
        for b, w in want.items():
            p = d.data[b].p if b in d.data else 0.0
            assert abs(p - w / big) <= (slack + w / big * slack * len(want)) / d.z, (name, b)
        checked += d.z >= 100
    assert checked >= 4  # distributions large enough for the bound to mean something


def test_goforget_reads_zero_from_the_exact_layout(two_layouts):
    """What the opt-in layout fixes: goforget parses float counts as 0."""
    client = gf.goforget_client(two_layouts["exact"])
    d = gf.dist_handler(client, "channels:1h", None, time.time(), random.Random(1))
    assert d.data and all(v.count == 0 and v.p == 0.0 for v in d.data.values())
    assert any("invalid syntax" in e for e in d.errors)


def test_sink_sets_goforgets_expire(two_layouts):
    client = redis.Redis.from_url(two_layouts["goforget"], decode_responses=True)
    for name in dists(two_layouts["goforget"]):
        top = max(int(s) for _, s in client.zrange(name, 0, -1, withscores=True))
        ttl = expire_seconds(top, goforget_rate(HALF_LIVES[name.split(":")[1]]))
        for key in (name, f"{name}._Z", f"{name}._T"):
            assert ttl - 300 <= client.ttl(key) <= ttl, key


@pytest.mark.parametrize("path", ["dist", "incr"])
def test_goforget_update_worker_keeps_the_distribution(two_layouts, path):
    """goforget's update worker after a /dist read a minute later (at our rate), or
    after an /incr in the second of the write (its default rate 0.5/s, nothing due):
    it EXPIREs with a positive TTL and the distribution stays."""
    url = two_layouts["goforget"]
    name = f"channels:{'10m' if path == 'dist' else '1h'}"
    client = gf.goforget_client(url)
    plain = redis.Redis.from_url(url, decode_responses=True)
    t0 = int(plain.get(f"{name}._T") or 0)
    before = {b: int(s) for b, s in plain.zrange(name, 0, -1, withscores=True)}
    rng = random.Random(5)
    if path == "dist":
        now = t0 + 60
        dist = gf.dist_handler(client, name, goforget_rate(600.0), now, rng)
    else:
        now = t0
        gf.incr_field(client, name, ["news.a"], 3, now)  # EXEC succeeds: integer scores
        before["news.a"] = before.get("news.a", 0) + 3
        assert int(plain.zscore(name, "news.a") or 0) == before["news.a"]
        dist = gf.Distribution(name)  # IncrHandler: updateChan <- &Distribution{Name}
    ttl = gf.update_distribution(client, dist, now, rng)
    assert ttl > 60
    after = {b: int(s) for b, s in plain.zrange(name, 0, -1, withscores=True)}
    assert after and set(after) <= set(before)
    if path == "incr":
        assert after == before  # dt = 0: nothing decayed, the increment kept
    assert int(plain.get(f"{name}._Z") or 0) == sum(after.values())
    assert int(plain.get(f"{name}._T") or 0) == now
    for key in (name, f"{name}._Z", f"{name}._T"):
        assert 0 < plain.ttl(key) <= ttl


def test_port_follows_goforget_poisson():
    """The port's Poisson draw: mean lambda, and goforget's cut-off to MaxInt32."""
    rng = random.Random(3)
    draws = [gf.poisson(4.0, rng) for _ in range(20000)]
    assert abs(sum(draws) / len(draws) - 4.0) < 0.1
    assert gf.poisson(19.0, rng) == gf.MAX_INT32  # exp(-19) < 1e-8
    assert gf.poisson(0.0, rng) == 0
    assert gf.decay_time(0, 5, 100, 1.0, 200, rng) == 0


@pytest.fixture
def goforget_http(redis_server):
    """bitly's real goforget (built from bitly/forgettable 4edcc61, see spark/README.md)
    over db 2, when ``$GOFORGET`` or ``goforget`` on PATH names the binary."""
    binary = os.environ.get("GOFORGET") or shutil.which("goforget")
    if not binary:
        pytest.skip("goforget binary not built (set GOFORGET=/path/to/goforget)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "-redis-uri", redis_server.url(2), "-http", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"{base}/dbsize", timeout=2).read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "goforget did not start"
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def test_real_goforget_reads_the_layout_and_keeps_it(two_layouts, goforget_http):
    """The real goforget's /dist, /incr and update worker on the layout a Spark run wrote."""
    url, exact = two_layouts["goforget"], two_layouts["exact"]
    plain = redis.Redis.from_url(url, decode_responses=True)
    slack = 0.5 * two_layouts["batches"] + 1e-9
    for name in ("forwards:1h", "receiver:10m"):
        stored = {b: int(s) for b, s in plain.zrange(name, 0, -1, withscores=True)}
        ttl_before = plain.pttl(name)  # our sink's EXPIRE, counting down since the write
        rate = goforget_rate(HALF_LIVES[name.split(":")[1]])
        query = urllib.parse.urlencode({"distribution": name, "rate": rate})
        with urllib.request.urlopen(f"{goforget_http}/dist?{query}", timeout=10) as resp:
            reply = json.loads(resp.read())
        assert reply["status_code"] == 200
        got = {d["bin"]: d for d in reply["data"]["data"]}
        assert set(got) == set(stored) and reply["data"]["Z"] == sum(
            d["count"] for d in got.values()
        )
        want = exact_at(exact, name, int(plain.get(f"{name}._T") or 0))
        big = sum(want.values())
        for b, d in got.items():
            # a read seconds after the write: Poisson(rate * dt) takes at most 1 here
            assert stored[b] - 1 <= d["count"] <= stored[b]
            bound = (slack + 1 + want[b] / big * (slack + 1) * len(want)) / reply["data"]["Z"]
            assert abs(d["p"] - want[b] / big) <= bound, (name, b, d, want[b] / big)
        # the update worker runs after the reply: its EXPIRE restarts the countdown
        # (only a new EXPIRE can raise a TTL), and the distribution stays
        deadline = time.monotonic() + 10
        while plain.pttl(name) <= ttl_before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert plain.pttl(name) > ttl_before, "goforget's update worker did not run"
        assert plain.zcard(name) == sum(1 for d in got.values() if d["count"] > 0)
        for key in (name, f"{name}._Z", f"{name}._T"):
            assert plain.ttl(key) > 0, key
    incr = urllib.parse.urlencode({"distribution": "forwards:1h", "field": "sent"})
    with urllib.request.urlopen(f"{goforget_http}/incr?{incr}", timeout=10) as resp:
        assert resp.read() == b"OK"  # ZINCRBY / INCRBY on integer counts and _Z succeed
