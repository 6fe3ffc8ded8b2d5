"""What a node process imports: modules it rarely needs are imported where
they are used, not at start, because each costs resident memory on every node
(issue 18; sizes in docs/benchmarks.md, "Where bloomcast costs more")."""

from __future__ import annotations

import subprocess
import sys

#: modules that the node's start path must not import, and what pulls each in
#: when it is needed: tomllib (and datetime) for --config, ipaddress for
#: CLUSTER MEET and a bind beyond loopback, pathlib and spark.events for the
#: traffic tap, hashlib and hmac for a cluster secret, a password (ACL, AUTH)
#: or CLUSTER MYSHARDID, platform never (INFO reads os.uname)
LAZY = (
    "tomllib",
    "datetime",
    "ipaddress",
    "pathlib",
    "platform",
    "spark.events",
    "hashlib",
    "hmac",
    "_hashlib",
)

PROBE = """
import sys
from bloomcast import node_command
from bloomcast import membership_log, node_log
from router.node import Node
from cluster_bus.bus import ClusterBus
from router.commands import base
print(",".join(m for m in {lazy!r} if m in sys.modules))
"""


def test_the_node_start_path_leaves_rarely_used_modules_unimported() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(lazy=LAZY)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert out == "", f"imported at start: {out}"


def test_command_info_still_reads_redis_own_table_on_first_use() -> None:
    from router.commands.redis_meta import command_meta

    meta = command_meta("publish")
    assert meta is not None and meta.info[0] == "publish" and meta.info[1] == 3
    assert command_meta("no-such-command") is None
