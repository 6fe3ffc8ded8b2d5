"""A line-for-line Python port of goforget's read, decay and update paths (test reader).

Follows bitly/forgettable at commit 4edcc61 (``Merge pull request #22 from
srijak/master``), directory ``goforget/``:

- ``decay.go``         ``Poisson``, ``DecayTime``            -> :func:`poisson`, :func:`decay_time`
- ``distribution.go``  ``Distribution``: ``Fill``, ``GetNMostProbable``, ``GetField``,
  ``addMultiBulkCounts``, ``Normalize``, ``calcProbabilities``, ``Decay``
                                                         -> :class:`Distribution`
- ``redis_utils.go``   ``GetDistribution``, ``GetNMostProbable``, ``GetField``,
  ``IncrField``, ``UpdateDistribution``                  -> the functions of the same names
- ``forget.go``        ``DistHandler`` (the ``/dist`` read), flag defaults
  (``-default-rate 0.5``, ``-prune true``, ``-expire-sigma 2``)
                                                         -> :func:`dist_handler`

Our own Python written to follow that logic, not copied code. Where the port
differs it is only to make it testable: ``time.Now()`` is a ``now`` argument
(Unix seconds), ``rand.Float64`` a ``random.Random`` argument, redigo's
connection a redis-py client (``MULTI``/``EXEC`` through a transactional
pipeline). redigo's ``redis.Int`` is ported as :func:`redis_int`: a bulk
reply is parsed with ``strconv.ParseInt(s, 10, 0)``, anything unparsable (a
float score such as ``"2.5"``) or nil gives 0 and an error, which goforget
logs and otherwise ignores. That is why goforget read the exact layout's
float counts as 0.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

#: decay.go
MAX_ITER = 1000
MAX_INT32 = 2**31 - 1
#: forget.go flag defaults
DEFAULT_RATE = 0.5
PRUNE_DIST = True
EXPIRE_SIGMA = 2.0

_GO_INT = re.compile(rb"^[+-]?[0-9]+$")


def goforget_client(url: str) -> redis.Redis:
    """A redis-py client that hands back raw replies (bytes, ints, lists), as redigo's
    ``conn.Do`` does: RESP2 (redigo's protocol; RESP3 sends scores as doubles) and no
    response callbacks (redis-py would turn scores into floats)."""
    import redis as redis_mod

    client = redis_mod.Redis.from_url(url, protocol=2)
    client.response_callbacks.clear()
    return client


class DistributionEmpty(Exception):
    """redis_utils.go ``DistributionEmpty``: "Distribution already empty, not updating"."""


def redis_int(reply: Any) -> tuple[int, str | None]:
    """redigo ``redis.Int(reply, nil)``: (value, error); errors give 0, as in Go."""
    if isinstance(reply, int):
        return reply, None
    if reply is None:
        return 0, "redigo: nil returned"
    raw = reply if isinstance(reply, bytes) else str(reply).encode()
    if not _GO_INT.match(raw):
        return 0, f'strconv.ParseInt: parsing "{raw.decode(errors="replace")}": invalid syntax'
    return int(raw), None


# -- decay.go --------------------------------------------------------------------------


def poisson(lam: float, rng: random.Random) -> int:
    """``Poisson(lambda)``: inverse-CDF draw; ``MaxInt32`` when ``exp(-lambda) < 1e-8``.
    (Go never decrements ``counter``, so the ``-1`` exit is unreachable there too.)"""
    if lam == 0.0:
        return 0
    e = math.exp(-1.0 * lam)
    if e < 1e-8:
        return MAX_INT32
    counter = MAX_ITER
    r = rng.random()
    k = 0
    p = e
    while p < r:
        k += 1
        e *= lam / float(k)
        p += e
        if counter == 0:
            return -1
    return k


def decay_time(count: int, z: int, t: int, rate: float, now: float, rng: random.Random) -> int:
    """``DecayTime(count, Z, t, rate, now)``: observations a bin loses since ``t``."""
    if count < 1:
        return 0
    dt = int(now) - t
    lam = rate * float(dt)
    k = poisson(lam, rng)
    if k == -1:
        return 0
    return k


# -- distribution.go -------------------------------------------------------------------


@dataclass
class Value:
    count: int
    p: float = 0.0


@dataclass
class Distribution:
    """``Distribution`` (name, Z, T, Data, Rate, Prune, isFull, hasDecayed)."""

    name: str
    z: int = 0
    t: int = 0
    data: dict[str, Value] = field(default_factory=dict)
    rate: float = 0.0
    prune: bool = False
    is_full: bool = False
    has_decayed: bool = False
    errors: list[str] = field(default_factory=list)  # what goforget would log.Printf

    def get_n_most_probable(self, client: redis.Redis, n: int) -> None:
        data = get_n_most_probable(client, self.name, n)
        if len(data) != 3:
            raise RuntimeError(f"Could not fetch data for {self.name}")
        self.z, _ = redis_int(data[1])
        self.t, _ = redis_int(data[2])
        self.data = {}
        self.add_multi_bulk_counts(data[0])

    def get_field(self, client: redis.Redis, *fields: str) -> None:
        data = get_field(client, self.name, *fields)
        n = len(fields)
        if len(data) != 2 + n:
            raise RuntimeError("Could not retrieve field")
        z, _ = redis_int(data[n])
        t, _ = redis_int(data[n + 1])
        self.z = z
        self.t = t
        self.data = {}
        for i, f in enumerate(fields):
            count, _ = redis_int(data[i])
            self.data[f] = Value(count)
        self.calc_probabilities()

    def fill(self, client: redis.Redis) -> None:
        data = get_distribution(client, self.name)
        if data[0] is None:
            return
        t, err = redis_int(data[0])
        if err is not None:
            self.errors.append(f"Could not read _T from distribution {self.name}: {err}")
        self.t = t
        self.data = {}
        self.rate = DEFAULT_RATE
        self.add_multi_bulk_counts(data[1])
        self.normalize()
        self.calc_probabilities()
        self.is_full = True

    def add_multi_bulk_counts(self, data: list[Any]) -> None:
        for i in range(0, len(data), 2):
            k = data[i].decode() if isinstance(data[i], bytes) else str(data[i])
            if k == "":
                self.errors.append(f"Could not read {data[i]!r} from distribution {self.name}")
            v, err = redis_int(data[i + 1])
            if err is not None:
                self.errors.append(f"Could not read {data[i + 1]!r} from {self.name}: {err}")
            self.data[k] = Value(v)

    def full(self) -> bool:
        return self.is_full

    def normalize(self) -> None:
        new_z = 0
        for v in self.data.values():
            new_z += v.count
        self.z = new_z
        self.calc_probabilities()

    def calc_probabilities(self) -> None:
        fz = float(self.z)
        for v in self.data.values():
            v.p = 0.0 if fz == 0 else float(v.count) / fz

    def decay(self, now: float, rng: random.Random) -> None:
        starting_z = self.z
        for v in self.data.values():
            lost = decay_time(v.count, self.z, self.t, self.rate, now, rng)
            if lost >= v.count:
                lost = v.count if self.prune else v.count - 1
            v.count -= lost
            self.z -= lost
        if not self.has_decayed and starting_z != self.z:
            self.has_decayed = True
        self.t = int(now)
        self.calc_probabilities()

    def probabilities(self) -> dict[str, float]:
        """What ``/dist`` returns per bin (``{"bin", "count", "p"}``), as bin -> p."""
        return {b: v.p for b, v in self.data.items()}


# -- redis_utils.go --------------------------------------------------------------------


def get_distribution(client: redis.Redis, name: str) -> list[Any]:
    """MULTI; GET <d>._T; ZRANGE <d> 0 -1 WITHSCORES; EXEC (raw replies)."""
    with client.pipeline(transaction=True) as pipe:
        pipe.execute_command("GET", f"{name}._T")
        pipe.execute_command("ZRANGE", name, 0, -1, "WITHSCORES", NEVER_DECODE=True)
        return list(pipe.execute())


def get_n_most_probable(client: redis.Redis, name: str, n: int) -> list[Any]:
    with client.pipeline(transaction=True) as pipe:
        pipe.execute_command(
            "ZREVRANGEBYSCORE", name, "+INF", "-INF", "WITHSCORES", "LIMIT", 0, n, NEVER_DECODE=True
        )
        pipe.execute_command("GET", f"{name}._Z")
        pipe.execute_command("GET", f"{name}._T")
        return list(pipe.execute())


def get_field(client: redis.Redis, name: str, *fields: str) -> list[Any]:
    with client.pipeline(transaction=True) as pipe:
        for f in fields:
            pipe.execute_command("ZSCORE", name, f, NEVER_DECODE=True)
        pipe.execute_command("GET", f"{name}._Z")
        pipe.execute_command("GET", f"{name}._T")
        return list(pipe.execute())


def incr_field(client: redis.Redis, name: str, fields: list[str], n: int, now: float) -> None:
    """``IncrField``: ZINCRBY per field, INCRBY _Z, SETNX _T now, in one MULTI/EXEC."""
    with client.pipeline(transaction=True) as pipe:
        for f in fields:
            pipe.execute_command("ZINCRBY", name, n, f)
        pipe.execute_command("INCRBY", f"{name}._Z", n * len(fields))
        pipe.execute_command("SETNX", f"{name}._T", int(now))
        pipe.execute()


def update_distribution(
    client: redis.Redis,
    dist: Distribution,
    now: float,
    rng: random.Random,
    expire_sigma: float = EXPIRE_SIGMA,
) -> int:
    """``UpdateDistribution`` (the update worker): WATCH _Z, fill + decay when not full,
    then MULTI: the decayed counts (if any changed), and EXPIRE on the three keys.
    Returns the EXPIRE seconds it sent. Raises :class:`DistributionEmpty` as Go returns it."""
    z_name, t_name = f"{dist.name}._Z", f"{dist.name}._T"
    with client.pipeline(transaction=True) as pipe:
        pipe.watch(z_name)
        if not dist.full():
            dist.fill(client)  # Go: another pooled connection, outside the WATCH
            dist.decay(now, rng)
            dist.normalize()
        max_count = 0
        pipe.multi()
        if dist.has_decayed:
            if dist.z == 0:
                pipe.reset()  # DISCARD (and the deferred UNWATCH)
                raise DistributionEmpty("Distribution already empty, not updating")
            for k, v in dist.data.items():
                if v.count == 0:
                    pipe.execute_command("ZREM", dist.name, k)
                else:
                    pipe.execute_command("ZADD", dist.name, v.count, k)
                    if v.count > max_count:
                        max_count = v.count
            pipe.execute_command("SET", z_name, dist.z)
            pipe.execute_command("SET", t_name, dist.t)
        else:
            for v in dist.data.values():
                if v.count != 0 and v.count > max_count:
                    max_count = v.count
        eta = math.sqrt(float(max_count) / dist.rate)
        exp_time = int((expire_sigma + eta) * eta)
        pipe.execute_command("EXPIRE", dist.name, exp_time)
        pipe.execute_command("EXPIRE", z_name, exp_time)
        pipe.execute_command("EXPIRE", t_name, exp_time)
        pipe.execute()
        return exp_time


# -- forget.go -------------------------------------------------------------------------


def dist_handler(
    client: redis.Redis, name: str, rate: float | None, now: float, rng: random.Random
) -> Distribution:
    """``DistHandler`` (``GET /dist?distribution=<name>[&rate=<r>]``): fill, decay,
    normalize; the caller sends the result to :func:`update_distribution`, as Go's
    ``updateChan <- &dist``."""
    r = DEFAULT_RATE if rate is None else rate
    dist = Distribution(name, prune=PRUNE_DIST)
    dist.fill(client)
    if len(dist.data) != 0:
        if dist.rate == DEFAULT_RATE:
            dist.rate = r
        dist.decay(now, rng)
        dist.normalize()
    return dist
