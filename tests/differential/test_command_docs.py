"""COMMAND INFO and COMMAND DOCS of every pub/sub command against
redis-server 7.0.15, byte for byte, RESP2 and RESP3: cluster clients route
SSUBSCRIBE / SUNSUBSCRIBE / SPUBLISH by the key positions and key specs
here. In PUBSUB's own entry the subcommands come in the server's hash order:
they are compared as a multiset."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.differential.oracle import HELLO3, exchange, redis_only, split_frames

pytestmark = [pytest.mark.timeout(120), redis_only]

PUBSUB_COMMANDS = [
    "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe",
    "publish", "spublish", "pubsub|channels", "pubsub|numsub", "pubsub|numpat",
    "pubsub|shardchannels", "pubsub|shardnumsub", "pubsub|help",
]  # fmt: skip


def _reply(port: int, resp3: bool, command: bytes) -> bytes:
    out, _ = exchange(port, (HELLO3 if resp3 else b"") + command)
    return b"".join(split_frames(out)[1:]) if resp3 else out


def _split_subcommands(data: bytes, header: bytes) -> tuple[bytes, Counter[bytes]]:
    """(the bytes up to the subcommands' header, the subcommands as a multiset)."""
    at = data.index(header) + len(header)
    frames = split_frames(data[at:])
    if header.endswith(b"*6\r\n"):  # INFO: one frame per subcommand
        return data[:at], Counter(frames)
    # DOCS: name, docs, name, docs ...
    return data[:at], Counter(a + b for a, b in zip(frames[::2], frames[1::2], strict=True))


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
@pytest.mark.parametrize("kind", [b"INFO", b"DOCS"])
@pytest.mark.parametrize("name", PUBSUB_COMMANDS)
def test_command_entry_same_bytes_as_redis(servers, resp3, kind, name):
    oracle, node = servers
    for shown in (name, name.upper()):
        command = b"COMMAND %b %b\r\n" % (kind, shown.encode())
        assert _reply(node, resp3, command) == _reply(oracle, resp3, command)


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_pubsub_container_entries_like_redis(servers, resp3):
    oracle, node = servers
    docs_header = b"$11\r\nsubcommands\r\n" + (b"%6\r\n" if resp3 else b"*12\r\n")
    for command, header in (
        (b"COMMAND INFO pubsub\r\n", b"*6\r\n"),
        (b"COMMAND DOCS PUBSUB\r\n", docs_header),
    ):
        want = _split_subcommands(_reply(oracle, resp3, command), header)
        assert _split_subcommands(_reply(node, resp3, command), header) == want


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_unknown_and_subcommand_names_like_redis(servers, resp3):
    oracle, node = servers
    for kind in (b"INFO", b"DOCS"):
        command = b"COMMAND %b nosuch SUBSCRIBE pubsub|nosuch PUBSUB|NUMSUB a|b|c spublish"
        command += b" subscribe ping|x ssubscribe\r\n"
        command %= kind
        assert _reply(node, resp3, command) == _reply(oracle, resp3, command)
