"""Fuzz the ACL rule parser against Redis 7.0.15:
``uv run python -m tests.fuzz.fuzz_acl --count 5000`` (needs redis-server).

Each case is ``ACL SETUSER u<i> <rules...>`` with rules drawn from Redis's
grammar (flags, passwords and hashes, ``~``/``%R~``/``&`` patterns, ``+``/``-``
commands, categories and subcommands, selectors) and mutated (cut, case,
random bytes, unknown names). The same command goes to redis-server and to a
node (``--no-bus``); their replies must be the same bytes, and so must
``ACL GETUSER`` and ``ACL LIST`` afterwards. The node must keep answering.
After a difference the user is deleted on both sides (no cascade).

Compared up to one thing: Redis lists single-command rules (``+subscribe
+config|get`` after the categories) in the iteration order of its command
dict, whose hash seed is random per process start (``ACLDescribeSelector
CommandRulesSingleCommands``, src/acl.c at 7.0.15; ``dictSetHashFunctionSeed``
in main()), so that order differs between two runs of Redis itself: each run
of such rules is sorted on both sides before comparing.

Left out of the grammar, because the node does not keep them (it refuses
them with an error, router/acl/user.py): selectors (``(...)``,
``clearselectors``) and first-arg rules on commands without subcommands
(``+select|0``, deprecated in Redis 7).
"""

from __future__ import annotations

import argparse
import random
import re
import socket
import sys

TOKENS = [
    b"on", b"off", b"nopass", b"resetpass", b"reset", b"allkeys", b"resetkeys",
    b"allchannels", b"resetchannels", b"allcommands", b"nocommands",
    b"sanitize-payload", b"skip-sanitize-payload", b">secret", b"<secret", b">",
    b"#" + b"a" * 64, b"!" + b"b" * 64, b"#abc", b"~*", b"~key:*", b"%R~r*",
    b"%W~w*", b"%RW~x", b"%X~y", b"&*", b"&news.*", b"&", b"+@all", b"-@all",
    b"+@pubsub", b"-@pubsub", b"+@nosuch", b"+publish", b"-publish",
    b"+subscribe", b"+client|list", b"-client|kill", b"+config|get",
    b"+nosuchcommand", b"-@dangerous", b"+@read", b"+acl|whoami", b"-acl",
]  # fmt: skip
_UNKEPT = re.compile(rb"^[()]|[()]$|^clearselectors$|^[+-](?!@)[^|]*\|", re.IGNORECASE)
#: commands with subcommands, whose ``+cmd|sub`` rules the node keeps
_WITH_SUBCOMMANDS = (b"client", b"config", b"acl", b"cluster", b"command", b"pubsub")


def _mutate(rng: random.Random, token: bytes) -> bytes:
    roll = rng.random()
    if roll < 0.7:
        return token
    if roll < 0.8:
        return token.upper()
    if roll < 0.9 and len(token) > 1:
        return token[: rng.randrange(1, len(token))]
    return token + bytes([rng.choice(b"*?[]\\|@&~%()+-!#<>abcXYZ09 ")])


def _kept(rule: bytes) -> bool:
    """False for a selector or a first-arg rule (see the module docstring)."""
    if not _UNKEPT.search(rule):
        return True
    return rule[1:].split(b"|")[0].lower() in _WITH_SUBCOMMANDS


def case(rng: random.Random) -> list[bytes]:
    """One ACL SETUSER command's rules."""
    rules = [_mutate(rng, rng.choice(TOKENS)) for _ in range(rng.randrange(0, 7))]
    return [r for r in rules if _kept(r)]


_RUN = re.compile(rb"[+-][^@ \r\n]\S*(?: [+-][^@ \r\n]\S*)*")


def normalized(reply: bytes) -> bytes:
    """``reply`` with each run of single-command rules sorted (same length)."""
    return _RUN.sub(lambda m: b" ".join(sorted(m.group().split(b" "))), reply)


def _request(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class Conn:
    """A raw RESP2 connection whose reply bytes are compared as they are."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def call(self, *args: bytes) -> bytes:
        self.sock.sendall(_request(list(args)) + b"PING\r\n")
        while not self.buf.endswith(b"+PONG\r\n"):  # the PING marks the end
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        reply, self.buf = self.buf[: -len(b"+PONG\r\n")], b""
        return reply

    def close(self) -> None:
        self.sock.close()


def run(redis_port: int, node_port: int, count: int, seed: int) -> list[str]:
    """Differences found (empty: none) in ``count`` cases from ``seed``."""
    rng = random.Random(seed)
    oracle, node = Conn(redis_port), Conn(node_port)
    diffs: list[str] = []
    try:
        for i in range(count):
            name = b"u%d" % (i % 7)  # users get rules on top of earlier ones
            command = [b"ACL", b"SETUSER", name, *case(rng)]
            for probe in (command, [b"ACL", b"GETUSER", name], [b"ACL", b"LIST"]):
                want, got = normalized(oracle.call(*probe)), normalized(node.call(*probe))
                if want != got:
                    diffs.append(f"{b' '.join(command)!r} then {probe[1]!r}: {want!r} != {got!r}")
                    oracle.call(b"ACL", b"DELUSER", name)
                    node.call(b"ACL", b"DELUSER", name)
                    break
            if len(diffs) >= 5:
                break
    finally:
        oracle.close()
        node.close()
    return diffs


def main(argv: list[str] | None = None) -> int:
    from tests.differential.oracle import oracle_server
    from tests.procs import bloomcast_node

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with oracle_server() as redis_port, bloomcast_node() as node_port:
        diffs = run(redis_port, node_port, args.count, args.seed)
    for d in diffs:
        print(d)
    print(f"{args.count} cases, seed {args.seed}: {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
