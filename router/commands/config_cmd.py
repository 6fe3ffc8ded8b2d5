"""CONFIG GET | SET | RESETSTAT | HELP (Redis 7.0 ``src/config.c``) for the
parameters that mean something on a node, under Redis's names:

- ``maxclients``: the connection limit (settable, 1 .. 4294967295).
- ``client-output-buffer-limit``: the ``pubsub`` class is the limit the node
  holds subscribers to (applied to connected clients at once); ``normal``
  and ``slave`` are kept and shown only (the node limits no other output).
- ``notify-keyspace-events``: accepted and stored with Redis's flag rules
  (a node has no keyspace, so no event is ever sent).
- ``requirepass``: sets the default ACL user's password (``resetpass`` then
  ``>password``, or ``nopass`` for ""), as Redis does; connections already
  authenticated stay so. GET shows the last value set (ACL SETUSER default
  does not change it, as in Redis).
- ``protected-mode`` (yes / no, for new connections, :mod:`router.protected`).
- ``port``, ``bind``, ``aclfile``, ``databases``, ``proto-max-bulk-len``,
  ``cluster-node-timeout``, ``cluster-enabled``, ``tls-port``,
  ``tls-cert-file``, ``tls-key-file``, ``tls-ca-cert-file``,
  ``tls-auth-clients``, ``tls-cluster``, ``cluster-announce-ip`` / ``-port``
  / ``-tls-port`` / ``-bus-port`` / ``-hostname``,
  ``cluster-preferred-endpoint-type``, ``cluster-config-file``: shown (an
  unset port as 0, as Redis); a node cannot change them while it runs, so
  SET answers Redis's "can't set immutable config".

GET takes several patterns (Redis 7), each a name (any case, echoed as
given) or a glob (case-insensitive); a parameter matched twice is listed
once. SET takes several pairs and applies none if one is wrong. Errors are
Redis's words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from router import resp
from router.commands.base import Command, Reply, subcommand_table
from router.commands.config_values import (
    KEYSPACE_EVENTS_ERROR,
    apply_output_limits,
    keyspace_events_flags,
    keyspace_events_text,
    output_limits_text,
    parse_output_limits,
)
from router.commands.connection import DATABASES
from router.glob import stringmatch
from router.parser import string2ll

if TYPE_CHECKING:
    from router.client import Client
    from router.node import Node

Setter = Callable[["Node", bytes], str | None]  # an error text, or None when done


@dataclass(frozen=True)
class Param:
    name: str
    get: Callable[[Node], str]
    set: Setter | None = None  # None: immutable while the node runs


def _set_maxclients(node: Node, value: bytes) -> str | None:
    n = string2ll(value)
    if n is None:
        return "argument couldn't be parsed into an integer"
    if not 1 <= n <= 4294967295:
        return "argument must be between 1 and 4294967295 inclusive"
    node.config.maxclients = n
    return None


def _set_output_limits(node: Node, value: bytes) -> str | None:
    limits = parse_output_limits(value, node.output_limits)
    if isinstance(limits, str):
        return limits
    apply_output_limits(node, limits)
    return None


def _set_keyspace_events(node: Node, value: bytes) -> str | None:
    flags = keyspace_events_flags(value)
    if flags is None:
        return KEYSPACE_EVENTS_ERROR
    node.notify_keyspace_events = flags
    return None


def _set_requirepass(node: Node, value: bytes) -> str | None:
    """Redis's ``updateRequirePass``: the default ACL user's only password, or
    ``nopass`` when empty (``ACLUpdateDefaultUserPassword``)."""
    node.config.requirepass = value.decode(errors="surrogateescape") if value else None
    default = node.acl.default
    default.apply(b"resetpass")
    default.apply(b">" + value if value else b"nopass")
    return None


def _maxclients(node: Node) -> str:
    return str(node.config.maxclients)


def _output_limits(node: Node) -> str:
    return output_limits_text(node.output_limits)


def _keyspace_events(node: Node) -> str:
    return keyspace_events_text(node.notify_keyspace_events)


def _requirepass(node: Node) -> str:
    return node.config.requirepass or ""


def _port(node: Node) -> str:
    return str(node.port)


def _bind(node: Node) -> str:
    return node.config.bind


def _databases(node: Node) -> str:
    return str(DATABASES)


def _proto_max_bulk_len(node: Node) -> str:
    return str(node.config.proto_max_bulk_len)


def _cluster_node_timeout(node: Node) -> str:
    return str(node.config.node_timeout_ms)


def _cluster_enabled(node: Node) -> str:
    return "yes"


def _protected_mode(node: Node) -> str:
    return "yes" if node.config.protected_mode else "no"


def _set_protected_mode(node: Node, value: bytes) -> str | None:
    """Redis's bool config: yes / no in any case; new connections see it."""
    if value.lower() not in (b"yes", b"no"):
        return "argument must be 'yes' or 'no'"
    node.config.protected_mode = value.lower() == b"yes"
    return None


def _aclfile(node: Node) -> str:
    return node.config.aclfile or ""


def _shown(attr: str, unset: str = "") -> Callable[[Node], str]:
    """The getter of a setting a node shows but cannot change while it runs
    (Redis's immutable configs): bools as yes / no, unset as ``unset``."""

    def get(node: Node) -> str:
        value = getattr(node.config, attr)
        if isinstance(value, bool):
            return "yes" if value else "no"
        return unset if value is None else str(value)

    return get


PARAMS: dict[str, Param] = {
    p.name: p
    for p in (
        Param("maxclients", _maxclients, _set_maxclients),
        Param("client-output-buffer-limit", _output_limits, _set_output_limits),
        Param("notify-keyspace-events", _keyspace_events, _set_keyspace_events),
        Param("requirepass", _requirepass, _set_requirepass),
        Param("port", _port),
        Param("bind", _bind),
        Param("databases", _databases),
        Param("proto-max-bulk-len", _proto_max_bulk_len),
        Param("protected-mode", _protected_mode, _set_protected_mode),
        Param("aclfile", _aclfile),
        Param("cluster-node-timeout", _cluster_node_timeout),
        Param("cluster-enabled", _cluster_enabled),
        *(
            Param(name, _shown(name.replace("-", "_")))
            for name in (
                "tls-port",
                "tls-cert-file",
                "tls-key-file",
                "tls-ca-cert-file",
                "tls-auth-clients",
                "tls-cluster",
                "cluster-announce-ip",
                "cluster-announce-hostname",
                "cluster-preferred-endpoint-type",
                "cluster-config-file",
            )
        ),
        *(
            Param(name, _shown(name.replace("-", "_"), "0"))
            for name in (
                "cluster-announce-port",
                "cluster-announce-tls-port",
                "cluster-announce-bus-port",
            )
        ),
    )
}


def config_get(node: Node, client: Client, args: list[bytes]) -> Reply:
    matches: dict[str, tuple[bytes, Param]] = {}  # param name -> (name shown, param)
    for pattern in args[2:]:
        if not any(c in pattern for c in b"[*?"):
            param = PARAMS.get(pattern.decode(errors="replace").lower())
            if param is not None and param.name not in matches:
                matches[param.name] = (pattern, param)
            continue
        for name, param in PARAMS.items():
            if name not in matches and stringmatch(pattern.lower(), name.encode()):
                matches[name] = (name.encode(), param)
    body = b"".join(
        resp.bulk(shown) + resp.bulk(param.get(node).encode(errors="surrogateescape"))
        for shown, param in matches.values()
    )
    return resp.map_header(len(matches), client.resp) + body


def _set_error(name: str, text: str) -> bytes:
    return resp.error(f"ERR CONFIG SET failed (possibly related to argument '{name}') - {text}")


def config_set(node: Node, client: Client, args: list[bytes]) -> Reply:
    if len(args) % 2:
        return resp.error("ERR syntax error")
    pairs: list[tuple[Param, bytes]] = []
    for i in range(2, len(args), 2):
        shown = resp.c_string(args[i])
        param = PARAMS.get(shown.lower())
        if param is None:
            return resp.error(
                f"ERR Unknown option or number of arguments for CONFIG SET - '{shown}'"
            )
        if any(p is param for p, _ in pairs):
            return _set_error(shown, "duplicate parameter")
        if param.set is None:
            return _set_error(shown, "can't set immutable config")
        pairs.append((param, args[i + 1]))
    # check every value before applying any (Redis restores the old values)
    saved = {p.name: p.get(node) for p, _ in pairs}
    for param, value in pairs:
        assert param.set is not None
        error = param.set(node, value)
        if error is not None:
            for done, _ in pairs:
                if done is param:
                    break
                assert done.set is not None
                done.set(node, saved[done.name].encode(errors="surrogateescape"))
            return _set_error(param.name, error)
    return resp.OK


def config_resetstat(node: Node, client: Client, args: list[bytes]) -> Reply:
    node.reset_stats()
    return resp.OK


#: Redis 7.0.15's CONFIG HELP but the REWRITE lines (a node has no config file)
_HELP = (
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "HELP",
    "    Prints this help.",
)


def config_help(node: Node, client: Client, args: list[bytes]) -> Reply:
    return resp.array_header(len(_HELP)) + b"".join(resp.simple(line) for line in _HELP)


def _container(node: Node, client: Client, args: list[bytes]) -> Reply:
    raise AssertionError("CONFIG always dispatches to a subcommand")


def _sub(name: str, arity: int, handler: Callable[..., Reply], summary: str) -> Command:
    return Command(f"config|{name}", arity, handler, summary, "server")


COMMANDS = (
    Command(
        "config",
        -2,
        _container,
        "A container for server configuration commands.",
        "server",
        subcommands=subcommand_table(
            _sub(
                "get", -3, config_get, "Returns the effective values of configuration parameters."
            ),
            _sub("set", -4, config_set, "Sets configuration parameters in-flight."),
            _sub("resetstat", 2, config_resetstat, "Resets the server's statistics."),
            _sub("help", 2, config_help, "Returns helpful text about the different subcommands."),
        ),
    ),
)
