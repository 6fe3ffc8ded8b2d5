"""A raw-socket PUBLISH load generator for schedules redis-benchmark cannot draw.

redis-benchmark's ``-r`` draws ``__rand_int__`` uniformly; a Zipf schedule
needs a weighted draw. This generator sends a precomputed schedule
(:meth:`bench.zipf_workload.ZipfWorkload.schedule`, seeded) like
redis-benchmark does: ``clients`` connections, each keeping one batch of
``pipeline`` PUBLISH in flight, the next batch sent when every reply of the
last arrived. Commands are encoded before the clock starts, so the timed loop
is only ``send``, ``recv`` and counting reply lines (a PUBLISH reply is one
``:<n>\\r\\n`` line). It is Python, so it is slower than redis-benchmark:
both systems get the same generator (see docs/benchmarks.md).

One process per node (:func:`run_zipf_load`), all started together; each
prints ``{"requests", "start", "end"}`` (wall clock) and the aggregate rate is
total requests / (last end - first start).

    python -m bench.zipf_load PORT NODE NODES SEED CHANNELS_PER_NODE ZIPF_S \\
        REQUESTS CLIENTS PIPELINE
"""

from __future__ import annotations

import json
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.zipf_workload import ZipfSpec, ZipfWorkload
from bloomcast.testing import LOOPBACK


def encode_publish(channel: bytes, message: bytes) -> bytes:
    """``PUBLISH channel message`` as a RESP array."""
    return b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(channel),
        channel,
        len(message),
        message,
    )


Batch = tuple[bytes, int]  # commands joined, how many


def batches(channels: Sequence[str], message: bytes, pipeline: int) -> list[Batch]:
    """``channels`` as PUBLISH commands joined ``pipeline`` at a time."""
    cmds = [encode_publish(ch.encode(), message) for ch in channels]
    return [
        (b"".join(cmds[i : i + pipeline]), len(cmds[i : i + pipeline]))
        for i in range(0, len(cmds), pipeline)
    ]


def drive(port: int, per_client: list[list[Batch]]) -> tuple[int, float, float]:
    """Send every client's batches, one in flight per client; return (replies,
    start, end) with wall-clock times around the timed loop."""
    sel = selectors.DefaultSelector()
    socks = []
    for _ in per_client:
        s = socket.create_connection((LOOPBACK, port), timeout=30)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    pending = [0] * len(socks)  # replies still due for the batch in flight
    nxt = [0] * len(socks)
    replies = 0
    start = time.time()
    for i, s in enumerate(socks):
        if per_client[i]:
            s.sendall(per_client[i][0][0])
            pending[i] = per_client[i][0][1]
            nxt[i] = 1
            sel.register(s, selectors.EVENT_READ, i)
    live = len(sel.get_map())
    while live:
        events = sel.select(timeout=30)
        if not events:
            raise TimeoutError(f"no PUBLISH reply from port {port} in 30 s")
        for key, _ in events:
            i = key.data
            data = key.fileobj.recv(1 << 16)  # type: ignore[union-attr]
            if not data:
                raise ConnectionError(f"server on port {port} closed a publisher")
            got = data.count(b"\n")
            replies += got
            pending[i] -= got
            if pending[i] > 0:
                continue
            batch_list = per_client[i]
            if nxt[i] < len(batch_list):
                data, pending[i] = batch_list[nxt[i]]
                key.fileobj.sendall(data)  # type: ignore[union-attr]
                nxt[i] += 1
            else:
                sel.unregister(key.fileobj)
                live -= 1
    end = time.time()
    for s in socks:
        s.close()
    sel.close()
    return replies, start, end


def main(argv: Sequence[str]) -> int:
    port, node, nodes, seed, cpn = (int(x) for x in argv[:5])
    zipf_s = float(argv[5])
    requests, clients, pipeline = (int(x) for x in argv[6:9])
    message = argv[9].encode() if len(argv) > 9 else b"hello"
    workload = ZipfWorkload(ZipfSpec(nodes, cpn, zipf_s, publishes_per_node=1, seed=seed))
    schedule = workload.schedule(node, requests)
    share = -(-requests // clients)
    per_client = [
        batches(schedule[c * share : (c + 1) * share], message, pipeline) for c in range(clients)
    ]
    replies, start, end = drive(port, per_client)
    print(json.dumps({"requests": replies, "start": start, "end": end}))
    return 0 if replies == requests else 1


def run_zipf_load(
    ports: Sequence[int], spec: ZipfSpec, requests: int, clients: int, pipeline: int
) -> dict[str, Any]:
    """One generator process per node at once (``requests`` split evenly,
    ``clients`` split evenly); aggregate PUBLISH/s over the common wall time."""
    n = len(ports)
    per_node = max(1, requests // n)
    per_clients = max(1, clients // n)
    procs = []
    for i, port in enumerate(ports):
        cmd = [
            sys.executable, "-m", "bench.zipf_load", str(port), str(i), str(n), str(spec.seed),
            str(spec.channels_per_node), repr(spec.zipf_s), str(per_node), str(per_clients),
            str(pipeline),
        ]  # fmt: skip
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"zipf load generator failed: {err.decode()[-500:]}")
        outs.append(json.loads(out))
    total = sum(o["requests"] for o in outs)
    wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
    return {
        "pipeline": pipeline,
        "requests": total,
        "clients_per_node": per_clients,
        "rps": total / wall,
        "sum_of_node_rps": sum(o["requests"] / (o["end"] - o["start"]) for o in outs),
    }


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
