"""Write ``redis_meta.json`` from a running redis-server 7.0.15: the COMMAND
INFO and COMMAND DOCS entries of every command the node implements, read in
RESP3 and kept with their RESP types, so the node replies Redis's own bytes;
and the arity of every Redis command into ``router/acl/redis_commands.json``.

    redis-server --port 7777 --save '' &
    uv run python -m router.commands.redis_meta_dump 7777

A JSON value stands for a RESP3 value: a string is a bulk string, a number an
integer, null a null, a list an array; ``{"+": s}`` a simple string,
``{"~": [...]}`` a set, ``{"%": [[k, v], ...]}`` a map. Each entry lacks its
subcommands (the node lists the ones it implements). A name Redis 7.0.15 does
not know (CLIENT SETINFO, from 7.2) is left out.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("redis_meta.json")
#: Redis's whole command table (ACL categories, arities): router/acl/
COMMAND_TABLE = Path(__file__).parent.parent / "acl" / "redis_commands.json"

#: commands the node answers that the table may not hold yet when this runs
EXTRA = (
    "multi", "exec", "discard", "watch", "unwatch",
    "config", "config|get", "config|set", "config|resetstat", "config|help",
    "client|kill", "client|no-evict", "client|pause", "client|unpause",
)  # fmt: skip


def _read(f: Any) -> Any:
    line = f.readline()
    kind, head = line[:1], line[1:-2]
    if kind in (b"$", b"="):
        n = int(head)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data.decode()
    if kind == b"+":
        return {"+": head.decode()}
    if kind == b"-":
        raise RuntimeError(head.decode())
    if kind == b":":
        return int(head)
    if kind == b"_":
        return None
    if kind in (b"*", b">"):
        return [_read(f) for _ in range(int(head))]
    if kind == b"~":
        return {"~": [_read(f) for _ in range(int(head))]}
    if kind == b"%":
        return {"%": [[_read(f), _read(f)] for _ in range(int(head))]}
    raise RuntimeError(f"unexpected RESP type {line!r}")


def _command(f: Any, sock: socket.socket, *args: str) -> Any:
    sock.sendall(
        b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a.encode()) for a in args)
    )
    return _read(f)


def _names() -> list[str]:
    from router.commands import COMMANDS

    names: list[str] = list(EXTRA)
    for cmd in COMMANDS.values():
        names.append(cmd.name)
        names += [c.name for c in (cmd.subcommands or {}).values()]
    return sorted(set(names))


def dump(port: int) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb") as f:
        _command(f, sock, "HELLO", "3")
        out: dict[str, Any] = {}
        names = _names()
        infos = _command(f, sock, "COMMAND", "INFO", *names)
        for name, info in zip(names, infos, strict=True):
            if info is None:
                continue
            docs = _command(f, sock, "COMMAND", "DOCS", name)["%"][0][1]
            docs["%"] = [kv for kv in docs["%"] if kv[0] != "subcommands"]
            out[name] = {"info": info[:9], "docs": docs}
        version = _command(f, sock, "INFO", "server")
    out["_source"] = next(x for x in version.split("\r\n") if x.startswith("redis_version"))
    return out


def dump_arity(port: int) -> dict[str, int]:
    """The arity of every command and subcommand of the server (COMMAND),
    for the commands the node does not have (the subscribed context's checks)."""
    with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb") as f:
        _command(f, sock, "HELLO", "3")
        arity: dict[str, int] = {}
        for entry in _command(f, sock, "COMMAND"):
            arity[entry[0]] = entry[1]
            subs = entry[9]
            for sub in subs["~"] if isinstance(subs, dict) else subs:  # none: an empty set
                arity[sub[0]] = sub[1]
    return dict(sorted(arity.items()))


def main() -> None:
    port = int(sys.argv[1])
    data = dump(port)
    lines = [f"{json.dumps(k)}: {json.dumps(data[k])}" for k in sorted(data)]
    OUT.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {len(data) - 1} entries to {OUT}")
    table = json.loads(COMMAND_TABLE.read_text())
    table["arity"] = dump_arity(port)
    COMMAND_TABLE.write_text(json.dumps(table, separators=(",", ":")))
    print(f"wrote {len(table['arity'])} arities to {COMMAND_TABLE}")


if __name__ == "__main__":
    main()
