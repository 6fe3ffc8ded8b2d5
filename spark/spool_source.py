"""A Structured Streaming source over the nodes' spools, read over HTTP: Spark 4's
Python Data Source API (``pyspark.sql.datasource``: ``DataSource``,
``DataSourceStreamReader``; ``latestOffset(start, limit)`` with admission
control, Spark 4.2+), no shared file system.

Rows: ``file`` (``http://host:port/spool/files/<name>``), ``mtime`` (the
file's modification time on its node, s) and ``value`` (one NDJSON line),
parsed by the job with the schema the file source uses (:mod:`spark.job`).

Offsets (kept by Spark in the checkpoint's offset log): ``{"host:port":
{writer id: highest file number read}}``, per node and per writer id that
wrote into that node's spool (the node's own id, and the ids of earlier runs
whose files it completed after a crash). A writer's numbers only grow and a
node lists a writer's files only below its lowest ``.tmp``
(:mod:`spark.spool_service`), so ``(start, end]`` per writer is exactly the
files a micro-batch read, and a replay after a crash reads the same ones.

- ``latestOffset``: lists every node; new files are taken oldest first (per
  writer in number order), at most ``maxFilesPerTrigger`` per batch; a node
  that does not answer keeps its offsets (its files wait); a writer with no
  file left on its node is dropped from the offsets of the next batch that
  reads something (its numbers never come back). Everything up to ``start``
  is in Spark's commit log by then (batches run one at a time; an uncommitted
  batch is re-run before the next ``latestOffset``), so the nodes are told to
  delete it: this frees the last batch of a run, whose ``commit`` Spark calls
  only when it plans the next batch.
- ``partitions``: one per node with new files (that node's listing picks the
  files in each writer's range); ``read``: fetches them (retried while the
  node restarts; a file gone from the node was deleted by another job's
  commit and is skipped).
- ``commit(end)``: the nodes delete each writer's files up to ``end``.
- ``prepareForTriggerAvailableNow`` (``--once``): the files listed now are
  the target; later files wait for the next run.

This module and :mod:`spark.spool_client` are pickled by value, so Spark's
executors need pyspark and pyarrow, not bloomcast.
"""

from __future__ import annotations

import contextlib
import heapq
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from spark.spool_client import SpoolNode, SpoolUnreachable, parse_nodes
from spark.spool_files import parse_spool_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

SOURCE_NAME = "bloomcast_spool"
SCHEMA = "file string, mtime double, value string"

#: node key -> writer id -> highest file number read
Offsets = dict[str, dict[str, int]]


def register(spark: SparkSession) -> None:
    """Make ``spark.readStream.format("bloomcast_spool")`` this source (pickled by value)."""
    import pyspark.cloudpickle as cloudpickle

    from spark import spool_client, spool_files

    for module in (sys.modules[__name__], spool_client, spool_files):
        cloudpickle.register_pickle_by_value(module)
    spark.dataSource.register(SpoolDataSource)


class SpoolPartition(InputPartition):
    """One node's files of a micro-batch: ``[(name, mtime ms)]`` in writer order."""

    def __init__(self, node: SpoolNode, files: list[tuple[str, int]]) -> None:
        super().__init__(node.key)
        self.node = node
        self.files = files


class SpoolDataSource(DataSource):
    """Options: ``nodes`` (``host:port,...``, as ``stats run --nodes``),
    ``maxFilesPerTrigger`` (default 100)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SpoolStreamReader(dict(self.options))


def _writer_files(listing: dict[str, Any]) -> list[tuple[str, int, str, int]]:
    """(writer, number, name, mtime ms) of each completed file a listing offers."""
    out = []
    for name, _size, mtime in listing["files"]:
        parsed = parse_spool_name(str(name))
        if parsed is not None and not parsed[2]:
            out.append((parsed[0], parsed[1], str(name), int(mtime)))
    return out


class SpoolStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The offsets, partitions and reads of the module doc."""

    def __init__(self, options: dict[str, str]) -> None:
        options = {k.lower(): v for k, v in options.items()}  # Spark's are case-insensitive
        self.nodes = parse_nodes(options["nodes"])
        self.max_files = int(options.get("maxfilespertrigger", "100"))
        self.target: Offsets | None = None
        self.down: set[str] = set()

    def initialOffset(self) -> dict[str, Any]:
        return {node.key: {} for node in self.nodes}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxFiles(self.max_files)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {}
        for node in self.nodes:
            listing = self._listing(node)
            if listing is None:
                continue
            highest: dict[str, int] = {}
            for writer, n, _name, _mtime in _writer_files(listing):
                highest[writer] = max(n, highest.get(writer, -1))
            self.target[node.key] = highest

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._commit(start)
        end: Offsets = {key: dict(positions) for key, positions in start.items()}
        queues: list[list[tuple[int, str, str, str, int]]] = []
        for node in self.nodes:
            have = end.setdefault(node.key, {})
            listing = self._listing(node)
            if listing is None:
                continue
            present = set(listing.get("writers", []))
            for writer in [w for w in have if w not in present]:
                del have[writer]  # every file of it is gone: its numbers never come back
            cap = None if self.target is None else self.target.get(node.key, {})
            per_writer: dict[str, list[tuple[int, str, str, str, int]]] = {}
            for writer, n, name, mtime in sorted(_writer_files(listing), key=lambda f: f[:2]):
                if n <= have.get(writer, -1) or (cap is not None and n > cap.get(writer, -1)):
                    continue
                per_writer.setdefault(writer, []).append((mtime, node.key, name, writer, n))
            queues.extend(per_writer.values())
        if not queues:
            return start  # nothing new: no batch (writers pruned above go with the next one)
        budget = limit.max_files if isinstance(limit, ReadMaxFiles) else sys.maxsize
        # oldest first across nodes and writers, each writer's files in number order
        heads = [(q[0], i, 0) for i, q in enumerate(queues)]
        heapq.heapify(heads)
        while heads and budget > 0:
            (_mtime, key, _name, writer, n), i, j = heapq.heappop(heads)
            end[key][writer] = n
            budget -= 1
            if j + 1 < len(queues[i]):
                heapq.heappush(heads, (queues[i][j + 1], i, j + 1))
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        parts: list[InputPartition] = []
        for node in self.nodes:
            before, after = start.get(node.key, {}), end.get(node.key, {})
            ranges = {
                w: (before.get(w, -1), hi) for w, hi in after.items() if hi > before.get(w, -1)
            }
            if not ranges:
                continue
            listing = self._listing(node, patient=True)
            assert listing is not None
            files = [
                (name, mtime)
                for writer, n, name, mtime in sorted(_writer_files(listing), key=lambda f: f[:2])
                if writer in ranges and ranges[writer][0] < n <= ranges[writer][1]
            ]
            if files:
                parts.append(SpoolPartition(node, files))
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        assert isinstance(partition, SpoolPartition)
        node = partition.node
        for name, mtime in partition.files:
            data = node.fetch(name)
            if data is None:
                continue  # deleted by another job's commit: it was read and applied there
            lines = [line for line in data.decode("utf-8", "replace").split("\n") if line]
            url = f"{node.url}/spool/files/{name}"
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([url] * len(lines), pa.string()),
                    pa.array([mtime / 1000.0] * len(lines), pa.float64()),
                    pa.array(lines, pa.string()),
                ],
                names=["file", "mtime", "value"],
            )

    def commit(self, end: dict[str, Any]) -> None:
        self._commit(end)

    def _commit(self, offsets: dict[str, Any]) -> None:
        """Tell each node which of its files Spark has committed (best effort: a node
        that does not answer is told again with the next commit)."""
        for node in self.nodes:
            positions = offsets.get(node.key) or {}
            if node.key in self.down:
                continue  # told with a later commit (positions only grow)
            with contextlib.suppress(SpoolUnreachable):
                node.commit({str(w): int(n) for w, n in positions.items()})

    def _listing(self, node: SpoolNode, patient: bool = False) -> dict[str, Any] | None:
        """``GET /spool``; None (and one line on stderr when the node goes down) if it
        does not answer; ``patient``: retried, then raised (a batch needs its files)."""
        for attempt in range(5 if patient else 1):
            try:
                listing = node.listing()
            except SpoolUnreachable as exc:
                if patient and attempt < 4:
                    import time

                    time.sleep(0.5 * 2**attempt)
                    continue
                if patient:
                    raise
                if node.key not in self.down:
                    self.down.add(node.key)
                    print(f"bloomcast stats run: {exc}; its files wait", file=sys.stderr)
                return None
            if node.key in self.down:
                self.down.discard(node.key)
                print(f"bloomcast stats run: node {node.key} answers again", file=sys.stderr)
            return listing
        return None
