"""COMMAND INFO and COMMAND DOCS of every command the node implements against
redis-server 7.0.15, byte for byte, RESP2 and RESP3: cluster clients route
SSUBSCRIBE / SUNSUBSCRIBE / SPUBLISH by the key positions and key specs
here. In a container's entry the subcommands come in the server's hash order:
they are compared as a multiset; the node lists only those it implements, so
for a container other than PUBSUB they are a part of Redis's."""

from __future__ import annotations

from collections import Counter

import pytest

from router.commands import COMMANDS
from tests.differential.oracle import HELLO3, exchange_pair, redis_only, split_frames

pytestmark = [pytest.mark.timeout(120), redis_only]

PUBSUB_COMMANDS = [
    "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe",
    "publish", "spublish", "pubsub|channels", "pubsub|numsub", "pubsub|numpat",
    "pubsub|shardchannels", "pubsub|shardnumsub", "pubsub|help",
]  # fmt: skip

#: Redis 7.2's: CLIENT SETINFO (7.2 clients send it on connect) and CLUSTER
#: MYSHARDID (issue 13 asks for it); 7.0.15 has neither
NOT_IN_7_0 = {"client|setinfo", "cluster|myshardid"}

#: the node's own namespace (a dotted name, as a module's commands are):
#: Redis has no such command to compare with (test_own_command_entry checks its shape)
OWN_PREFIX = "bloomcast."


def _node_names(containers: bool) -> list[str]:
    """Every command and subcommand the node implements (containers: only those
    with subcommands; else only those without)."""
    names = []
    for cmd in COMMANDS.values():
        subs = [c.name for c in (cmd.subcommands or {}).values()]
        if cmd.name.startswith(OWN_PREFIX):
            continue
        if containers == bool(subs):
            names.append(cmd.name)
        if not containers:
            names += [n for n in subs if n not in NOT_IN_7_0]
    return sorted(names)


def _replies(servers: tuple[int, int], resp3: bool, command: bytes) -> tuple[bytes, bytes]:
    """(the oracle's reply, the node's) to ``command``, after HELLO 3 when
    ``resp3`` (its reply left out): both asked at once."""
    oracle, node = servers
    payload = (HELLO3 if resp3 else b"") + command
    (theirs, _), (ours, _) = exchange_pair(oracle, node, payload)
    if resp3:
        return b"".join(split_frames(theirs)[1:]), b"".join(split_frames(ours)[1:])
    return theirs, ours


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
@pytest.mark.parametrize("name", _node_names(containers=False))
def test_command_entry_same_bytes_as_redis(servers, resp3, kind, name):
    # the name as listed and in capitals, one reply frame each, in order
    command = b"".join(
        b"COMMAND %b %b\r\n" % (kind, shown.encode()) for shown in (name, name.upper())
    )
    theirs, ours = _replies(servers, resp3, command)
    assert len(split_frames(theirs)) == 2
    assert ours == theirs


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_pubsub_container_entries_like_redis(servers, resp3):
    docs_header = b"$11\r\nsubcommands\r\n" + (b"%6\r\n" if resp3 else b"*12\r\n")
    for command, header in (
        (b"COMMAND INFO pubsub\r\n", b"*6\r\n"),
        (b"COMMAND DOCS PUBSUB\r\n", docs_header),
    ):
        theirs, ours = _replies(servers, resp3, command)
        assert _split_subcommands(ours, header) == _split_subcommands(theirs, header)


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_unknown_and_subcommand_names_like_redis(servers, resp3):
    for kind in (b"INFO", b"DOCS"):
        command = b"COMMAND %b nosuch SUBSCRIBE pubsub|nosuch PUBSUB|NUMSUB a|b|c spublish"
        command += b" subscribe ping|x ssubscribe\r\n"
        command %= kind
        theirs, ours = _replies(servers, resp3, command)
        assert ours == theirs


def _container_parts(data: bytes, docs: bool) -> tuple[list[bytes], Counter[bytes]]:
    """One container's entry: (its frames but the subcommands, the subcommands)."""
    if docs:  # map header, name, the docs map: its pairs, subcommands last
        frames = split_frames(data.split(b"\r\n", 1)[1])
        name, body = frames
        pairs = split_frames(body.split(b"\r\n", 1)[1])
        assert pairs[-2] == b"$11\r\nsubcommands\r\n"
        _, subs = _split_subcommands(pairs[-1], b"\r\n")
        return [name, *pairs[:-1]], subs
    entry = split_frames(data.split(b"\r\n", 1)[1])[0]
    fields = split_frames(entry.split(b"\r\n", 1)[1])
    return fields[:-1], Counter(split_frames(fields[-1].split(b"\r\n", 1)[1]))


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
@pytest.mark.parametrize("name", _node_names(containers=True))
def test_container_entries_are_redis_with_the_subcommands_the_node_has(servers, resp3, name):
    for kind in (b"INFO", b"DOCS"):
        command = b"COMMAND %b %b\r\n" % (kind, name.encode())
        their_reply, our_reply = _replies(servers, resp3, command)
        ours = _container_parts(our_reply, kind == b"DOCS")
        theirs = _container_parts(their_reply, kind == b"DOCS")
        assert ours[0] == theirs[0]
        extra = ours[1] - theirs[1]
        assert [e for e in extra if not any(n.encode() in e for n in NOT_IN_7_0)] == []


def test_own_command_entry(servers):
    """The node's own command has an entry like Redis's (name, arity, flags,
    first key 0: no key), where Redis answers a nil for a name it lacks."""
    theirs, ours = _replies(servers, False, b"COMMAND INFO bloomcast.hotchannels\r\n")
    assert theirs == b"*1\r\n$-1\r\n"  # (HOTCHANNELS is not a name Redis uses)
    frames = split_frames(ours)
    assert frames[0].startswith(b"*1\r\n*10\r\n$21\r\nbloomcast.hotchannels\r\n:-1\r\n")
