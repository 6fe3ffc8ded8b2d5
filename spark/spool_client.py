"""The job's side of a node's spool over HTTP (:mod:`spark.spool_service` is the node's).

A node started with ``--traffic-dir`` and ``--metrics-port`` serves its spool on
the metrics port (HTTP/1.0, one request per connection):

- ``GET /spool``: ``{"node": id, "files": [[name, size, mtime ms], ...],
  "open": [[writer, n], ...], "nodes": {id: address}}``, the completed files a
  reader may take now (per writer, those numbered below its lowest ``.tmp``),
  oldest first;
- ``GET /spool/files/<name>``: one completed file's bytes (404: gone);
- ``POST /spool/commit?<writer>=<n>&...``: Spark committed every file of each
  writer numbered up to ``n``: the node deletes them (``{"deleted": k}``).

A node address is ``[user:password@]host:port`` (or ``http://...``): with a
password the requests carry HTTP Basic credentials (RFC 7617), which a node
with ``requirepass`` or ACL users checks. Standard library only: Spark's Python
workers import this module.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

#: seconds a file request may take (a spool file is at most 8 MiB by default)
TIMEOUT = 30.0
#: seconds a listing or a commit may take: a node cut off must not stall the others
QUICK_TIMEOUT = 5.0


class SpoolUnreachable(OSError):
    """A node's spool could not be read; the message is one line naming the node."""


@dataclass(frozen=True)
class SpoolNode:
    """One node's spool endpoint. ``key`` (``host:port``) names it in Spark's offsets;
    credentials never appear there."""

    key: str
    url: str
    authorization: str | None = None

    @classmethod
    def parse(cls, spec: str) -> SpoolNode:
        """``[http://][user:password@]host:port``; ``:password@`` is the default user.
        ValueError (one line) for anything else."""
        text = spec.strip()
        raw = text if "://" in text else f"http://{text}"
        parts = urllib.parse.urlsplit(raw)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme != "http" or not parts.hostname or port is None:
            raise ValueError(f"--nodes {spec!r}: expected [user:password@]HOST:METRICSPORT")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        key = f"{host}:{port}"
        auth = None
        if parts.password is not None:
            user = urllib.parse.unquote(parts.username or "") or "default"
            password = urllib.parse.unquote(parts.password)
            auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return cls(key, f"http://{key}", auth)

    def _request(self, path: str, method: str = "GET", timeout: float = QUICK_TIMEOUT) -> Any:
        request = urllib.request.Request(self.url + path, method=method)
        if self.authorization:
            request.add_header("Authorization", self.authorization)
        return urllib.request.urlopen(request, timeout=timeout)

    def _fail(self, what: str, exc: BaseException) -> SpoolUnreachable:
        if isinstance(exc, urllib.error.HTTPError):
            reason = f"HTTP {exc.code} {exc.reason}"
        elif isinstance(exc, urllib.error.URLError):
            reason = str(exc.reason)
        else:
            reason = str(exc) or type(exc).__name__
        return SpoolUnreachable(f"cannot {what} node {self.key}: {reason}")

    def listing(self) -> dict[str, Any]:
        """``GET /spool``; raises :class:`SpoolUnreachable`."""
        try:
            with self._request("/spool") as answer:
                listing = json.loads(answer.read())
        except (OSError, ValueError) as exc:
            raise self._fail("list the spool of", exc) from None
        if not isinstance(listing, dict) or not isinstance(listing.get("files"), list):
            raise SpoolUnreachable(f"node {self.key}: /spool is not a bloomcast spool listing")
        return listing

    def fetch(self, name: str, attempts: int = 4) -> bytes | None:
        """One completed file (None: the node no longer has it). Retried with backoff
        (a node restarting); raises :class:`SpoolUnreachable` after ``attempts``."""
        path = "/spool/files/" + urllib.parse.quote(name)
        for attempt in range(attempts):
            try:
                with self._request(path, timeout=TIMEOUT) as answer:
                    return bytes(answer.read())
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                error: BaseException = exc
            except OSError as exc:
                error = exc
            if attempt + 1 < attempts:
                time.sleep(min(8.0, 0.5 * 2**attempt))
        raise self._fail(f"read {name} from", error)

    def commit(self, positions: dict[str, int]) -> int:
        """Let the node delete each writer's files numbered up to ``positions[writer]``
        (Spark committed them); returns how many it deleted."""
        if not positions:
            return 0
        query = urllib.parse.urlencode(sorted(positions.items()))
        try:
            with self._request(f"/spool/commit?{query}", method="POST") as answer:
                return int(json.loads(answer.read()).get("deleted", 0))
        except (OSError, ValueError) as exc:
            raise self._fail("commit to", exc) from None


def parse_nodes(text: str) -> list[SpoolNode]:
    """``--nodes a:9121,b:9121`` -> one :class:`SpoolNode` each (ValueError: one line)."""
    nodes = [SpoolNode.parse(spec) for spec in text.split(",") if spec.strip()]
    if not nodes:
        raise ValueError("--nodes: give at least one HOST:METRICSPORT")
    keys = [n.key for n in nodes]
    if len(set(keys)) != len(keys):
        raise ValueError(f"--nodes: {text!r} names a node twice")
    return nodes


def node_addresses(nodes: list[SpoolNode]) -> dict[str, str]:
    """node id -> address from every reachable node's sidecars (``"nodes"`` of /spool)."""
    out: dict[str, str] = {}
    for node in nodes:
        try:
            found = node.listing().get("nodes", {})
        except SpoolUnreachable:
            continue
        if isinstance(found, dict):
            out.update({str(k): str(v) for k, v in found.items()})
    return out


def committed_offsets(checkpoint: str) -> dict[str, dict[str, int]] | None:
    """The source offsets of the last batch a local Spark checkpoint committed (its
    ``commits/<id>`` exists; ``offsets/<id>``: ``v1``, the metadata line, then this
    source's offset JSON), or None (no committed batch, or a URI checkpoint)."""
    from pathlib import Path

    if "://" in checkpoint:
        return None
    root = Path(checkpoint)
    try:
        done = [int(p.name) for p in (root / "commits").iterdir() if p.name.isdigit()]
        lines = (root / "offsets" / str(max(done))).read_text().splitlines()
        offsets = json.loads(lines[2])
    except (OSError, ValueError, IndexError):
        return None
    return offsets if isinstance(offsets, dict) else None


def release_committed(checkpoint: str, nodes: str) -> int:
    """After a ``--once`` run: let each node delete what the checkpoint committed
    (Spark calls the source's ``commit`` only when it starts the next batch)."""
    offsets = committed_offsets(checkpoint) or {}
    deleted = 0
    for node in parse_nodes(nodes):
        positions = offsets.get(node.key)
        if isinstance(positions, dict):
            try:
                deleted += node.commit({str(w): int(n) for w, n in positions.items()})
            except SpoolUnreachable:
                continue
    return deleted
