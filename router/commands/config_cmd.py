"""CONFIG GET | SET | RESETSTAT | HELP (Redis 7.0 ``src/config.c``) for the
parameters that mean something on a node, under Redis's names:

- ``maxclients``: the connection limit (settable, 1 .. 4294967295).
- ``client-output-buffer-limit``: the ``pubsub`` class is the limit the node
  holds subscribers to, the ``normal`` class its other clients (no limit by
  default; both applied to connected clients at once); ``slave`` is kept and
  shown only (a node has no replicas).
- ``notify-keyspace-events``: accepted and stored with Redis's flag rules
  (a node has no keyspace, so no event is ever sent).
- ``requirepass``: sets the default ACL user's password (``resetpass`` then
  ``>password``, or ``nopass`` for ""), as Redis does; connections already
  authenticated stay so. GET shows the last value set (ACL SETUSER default
  does not change it, as in Redis).
- ``protected-mode`` (yes / no, for new connections, :mod:`router.protected`).
- ``slowlog-log-slower-than`` (-1 .. LLONG_MAX microseconds), ``slowlog-max-len``
  (0 .. LONG_MAX) and ``latency-monitor-threshold`` (0 .. LLONG_MAX
  milliseconds): :mod:`router.hooks`.
- ``timeout`` (0 .. INT_MAX seconds, :mod:`router.idle`) and ``tcp-keepalive``
  (0 .. INT_MAX seconds, for new connections, :mod:`router.client`).
- ``port``, ``bind``, ``aclfile``, ``databases``, ``proto-max-bulk-len``, ``tcp-backlog``,
  ``cluster-node-timeout``, ``cluster-enabled``, ``tls-port``,
  ``tls-cert-file``, ``tls-key-file``, ``tls-ca-cert-file``,
  ``tls-auth-clients``, ``tls-cluster``, ``cluster-announce-ip`` / ``-port``
  / ``-tls-port`` / ``-bus-port`` / ``-hostname``,
  ``cluster-preferred-endpoint-type``, ``cluster-config-file``: shown (an
  unset port as 0, as Redis); a node cannot change them while it runs, so
  SET answers Redis's "can't set immutable config".

GET takes several patterns (Redis 7), each a name (any case, echoed as
given) or a glob (case-insensitive); a parameter matched twice is listed
once. SET takes several pairs and applies none if one is wrong: it builds
new live settings (:mod:`router.settings`) and swaps them in whole. Errors
are Redis's words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from router import resp
from router.commands.base import Command, Reply, subcommand_table
from router.commands.config_values import (
    KEYSPACE_EVENTS_ERROR,
    keyspace_events_flags,
    keyspace_events_text,
    output_limits_text,
    parse_output_limits,
)
from router.commands.connection import DATABASES
from router.glob import stringmatch
from router.parser import string2ll

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext
    from router.settings import Settings

#: a parameter's new value: the settings with it, or Redis's error text
Setter = Callable[["Settings", bytes], "Settings | str"]


@dataclass(frozen=True)
class Param:
    name: str
    get: Callable[[CommandContext], str]
    set: Setter | None = None  # None: immutable while the node runs
    #: what the new value changes beyond the settings (requirepass: the ACL)
    then: Callable[[CommandContext, Settings], None] | None = None


def _integer(name: str, low: int, high: int) -> Setter:
    """Redis's integer config: ``string2ll`` in [low, high]."""

    def parse(settings: Settings, value: bytes) -> Settings | str:
        n = string2ll(value)
        if n is None:
            return "argument couldn't be parsed into an integer"
        if not low <= n <= high:
            return f"argument must be between {low} and {high} inclusive"
        return replace(settings, **{name: n})  # type: ignore[arg-type]

    return parse


def _set_output_limits(settings: Settings, value: bytes) -> Settings | str:
    limits = parse_output_limits(value, settings.output_limits)
    return limits if isinstance(limits, str) else replace(settings, output_limits=limits)


def _set_keyspace_events(settings: Settings, value: bytes) -> Settings | str:
    flags = keyspace_events_flags(value)
    if flags is None:
        return KEYSPACE_EVENTS_ERROR
    return replace(settings, notify_keyspace_events=flags)


def _set_requirepass(settings: Settings, value: bytes) -> Settings | str:
    return replace(settings, requirepass=value.decode(errors="surrogateescape") if value else None)


def _apply_requirepass(ctx: CommandContext, settings: Settings) -> None:
    """Redis's ``updateRequirePass``: the default ACL user's only password, or
    ``nopass`` when empty (``ACLUpdateDefaultUserPassword``), at every SET."""
    value = (settings.requirepass or "").encode(errors="surrogateescape")
    default = ctx.acl.default
    default.apply(b"resetpass")
    default.apply(b">" + value if value else b"nopass")


def _set_protected_mode(settings: Settings, value: bytes) -> Settings | str:
    """Redis's bool config: yes / no in any case; new connections see it."""
    if value.lower() not in (b"yes", b"no"):
        return "argument must be 'yes' or 'no'"
    return replace(settings, protected_mode=value.lower() == b"yes")


def _live(attr: str) -> Callable[[CommandContext], str]:
    """The getter of a live setting (:class:`router.settings.Settings`)."""

    def get(ctx: CommandContext) -> str:
        value = getattr(ctx.settings, attr)
        if isinstance(value, bool):
            return "yes" if value else "no"
        return "" if value is None else str(value)

    return get


def _output_limits(ctx: CommandContext) -> str:
    return output_limits_text(ctx.settings.output_limits)


def _keyspace_events(ctx: CommandContext) -> str:
    return keyspace_events_text(ctx.settings.notify_keyspace_events)


def _port(ctx: CommandContext) -> str:
    return str(ctx.port)


def _databases(ctx: CommandContext) -> str:
    return str(DATABASES)


def _cluster_node_timeout(ctx: CommandContext) -> str:
    return str(ctx.config.node_timeout_ms)


def _cluster_enabled(ctx: CommandContext) -> str:
    return "yes" if ctx.cluster_enabled else "no"


def _shown(attr: str, unset: str = "") -> Callable[[CommandContext], str]:
    """The getter of a setting a node shows but cannot change while it runs
    (Redis's immutable configs, read from the startup settings): bools as
    yes / no, unset as ``unset``."""

    def get(ctx: CommandContext) -> str:
        value = getattr(ctx.config, attr)
        if isinstance(value, bool):
            return "yes" if value else "no"
        return unset if value is None else str(value)

    return get


_INT_MAX = 2**31 - 1
#: hot-channels-size's most (memory: this many names per kind)
HOT_CHANNELS_MAX = 1 << 16
_LLONG_MAX = 2**63 - 1

PARAMS: dict[str, Param] = {
    p.name: p
    for p in (
        Param("maxclients", _live("maxclients"), _integer("maxclients", 1, 4294967295)),
        Param("client-output-buffer-limit", _output_limits, _set_output_limits),
        Param("notify-keyspace-events", _keyspace_events, _set_keyspace_events),
        Param("requirepass", _live("requirepass"), _set_requirepass, _apply_requirepass),
        Param("protected-mode", _live("protected_mode"), _set_protected_mode),
        Param("timeout", _live("timeout"), _integer("timeout", 0, _INT_MAX)),
        Param("tcp-keepalive", _live("tcp_keepalive"), _integer("tcp_keepalive", 0, _INT_MAX)),
        Param(
            "slowlog-log-slower-than",
            _live("slowlog_log_slower_than"),
            _integer("slowlog_log_slower_than", -1, _LLONG_MAX),
        ),
        Param(
            "slowlog-max-len", _live("slowlog_max_len"), _integer("slowlog_max_len", 0, _LLONG_MAX)
        ),
        Param(
            "latency-monitor-threshold",
            _live("latency_monitor_threshold"),
            _integer("latency_monitor_threshold", 0, _LLONG_MAX),
        ),
        Param(
            "hot-channels-size",
            _live("hot_channels_size"),
            _integer("hot_channels_size", 0, HOT_CHANNELS_MAX),
        ),
        Param("port", _port),
        Param("databases", _databases),
        Param("cluster-node-timeout", _cluster_node_timeout),
        Param("cluster-enabled", _cluster_enabled),
        *(
            Param(name, _shown(name.replace("-", "_")))
            for name in (
                "bind",
                "aclfile",
                "proto-max-bulk-len",
                "tcp-backlog",
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


def config_get(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
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
        resp.bulk(shown) + resp.bulk(param.get(ctx).encode(errors="surrogateescape"))
        for shown, param in matches.values()
    )
    return resp.map_header(len(matches), client.resp) + body


def _set_error(name: str, text: str) -> bytes:
    return resp.error(f"ERR CONFIG SET failed (possibly related to argument '{name}') - {text}")


def config_set(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
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
    # every value is checked before any is applied: the new settings are
    # built whole, then swapped in (Redis restores the old values on an error)
    settings = ctx.settings
    for param, value in pairs:
        assert param.set is not None
        changed = param.set(settings, value)
        if isinstance(changed, str):
            return _set_error(param.name, changed)
        settings = changed
    ctx.swap_settings(settings)
    for param, _ in pairs:
        if param.then is not None:
            param.then(ctx, settings)
    return resp.OK


def config_resetstat(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    ctx.view.reset_stats()
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


def config_help(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.array_header(len(_HELP)) + b"".join(resp.simple(line) for line in _HELP)


def _container(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
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
