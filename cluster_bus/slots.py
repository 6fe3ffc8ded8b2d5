"""Hash slots: what Redis Cluster clients need to see, derived from membership.

Any bloomcast node accepts any channel (a PUBLISH reaches every interested
node through the bus), so slots decide nothing here; they exist so that
cluster clients (redis-py ``RedisCluster``, node-redis ``createCluster``,
ioredis ``Cluster``, ``redis-cli --cluster``) can connect. The map is
deterministic: the 16384 slots in contiguous, near-equal ranges over the
sorted ids of the live nodes (this node and every peer not in FAIL), so every
node with the same membership shows the same map, and it is recomputed on
join, leave, failure and forget. A client with a stale map still works: it
sends a sharded channel to another node, which accepts it; no MOVED is ever
sent (docs/architecture.md §6).

``key_slot`` is Redis's ``keyHashSlot`` (``src/cluster.c``): CRC16-XMODEM
(poly 0x1021, init 0; ``crc16(b"123456789") == 0x31c3``) of the key, or of
the part between the first ``{`` and the next ``}`` when that part is not
empty (a hash tag), mod 16384.
"""

from __future__ import annotations

import crcmod.predefined

#: Redis Cluster's number of hash slots (``CLUSTER_SLOTS`` in redis ``cluster.h``)
CLUSTER_SLOTS = 16384

_crc16 = crcmod.predefined.mkPredefinedCrcFun("xmodem")


def shard_id(node_id: str) -> str:
    """CLUSTER MYSHARDID (Redis 7.2): each node is a shard of its own, so its
    shard id is a stable 40-hex-digit id derived from its node id."""
    import hashlib  # here, not at start: it maps OpenSSL's digests (~0.6 MB per node)

    return hashlib.sha1(b"bloomcast-shard:" + node_id.encode()).hexdigest()


def key_slot(key: bytes) -> int:
    """The hash slot of ``key`` (Redis's ``keyHashSlot``)."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return int(_crc16(key)) & (CLUSTER_SLOTS - 1)


def slot_ranges(node_ids: list[str]) -> list[tuple[int, int, str]]:
    """(first slot, last slot, node id) for each of ``node_ids`` in sorted order:
    contiguous inclusive ranges covering all 16384 slots, sizes differing by
    at most one. Raises ValueError for no nodes."""
    if not node_ids:
        raise ValueError("the slots need at least one node")
    ids = sorted(node_ids)
    n = len(ids)
    bounds = [i * CLUSTER_SLOTS // n for i in range(n + 1)]
    return [(bounds[i], bounds[i + 1] - 1, ids[i]) for i in range(n)]
