"""The node's TOML file and the checks every setting goes through.

A TOML key is a flag's name without the dashes (``subscribe-visibility-timeout``,
``no-bus``), written with ``-`` or ``_``; a flag's field name is accepted too
(``subscribe-visibility-timeout-ms``). The keys and their types come from the
argparse parser itself, so a flag added to the parser is a key at once and is
type-checked the same way. Every mistake is a :class:`ConfigError`: one line
that names the key or flag and what is wrong (the CLI prints it and exits 2).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from router.config import NodeConfig

#: the largest value of a C ``long long`` (Redis's LLONG_MAX)
_LLONG_MAX = 2**63 - 1
#: flags that make no sense inside the file
NOT_IN_FILE = frozenset({"help", "config", "check_config"})


class ConfigError(ValueError):
    """A configuration mistake; ``str()`` is the one line shown to the user."""


def _describe(value: Any) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    name = kind.get(type(value), f"a {type(value).__name__}")
    return f"{name} ({value!r})" if not isinstance(value, list | dict) else name


def _keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """normalized key (``_`` for ``-``) -> the action it sets."""
    keys: dict[str, argparse.Action] = {}
    for action in parser._actions:
        longs = [s[2:].replace("-", "_") for s in action.option_strings if s.startswith("--")]
        for name in [*longs, action.dest]:
            if name not in NOT_IN_FILE and longs:
                keys[name] = action
    return keys


def _convert(key: str, value: Any, action: argparse.Action) -> Any:
    """The value the flag would have produced, or ConfigError."""
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        if not isinstance(value, bool):
            raise ConfigError(f"key '{key}': expected true or false, got {_describe(value)}")
        return value
    if isinstance(action, argparse._AppendAction):
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise ConfigError(f"key '{key}': expected a list of strings, got {_describe(value)}")
        return items
    if action.type is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"key '{key}': expected an integer, got {_describe(value)}")
    elif action.type is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"key '{key}': expected a number, got {_describe(value)}")
        value = float(value)
    elif isinstance(value, bool) and action.metavar == "yes|no":
        pass  # a yes|no switch (protected-mode) also takes a TOML boolean
    else:
        if not isinstance(value, str):
            raise ConfigError(f"key '{key}': expected a string, got {_describe(value)}")
        if callable(action.type):
            try:
                value = action.type(value)
            except (ValueError, argparse.ArgumentTypeError) as exc:
                raise ConfigError(f"key '{key}': {exc}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(str(c) for c in action.choices)
        raise ConfigError(f"key '{key}': {value!r} is not one of {choices}")
    return value


def settings_from_toml(path: str | Path, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Read ``path``; returns {argparse dest: value}, checked against ``parser``."""
    import tomllib  # here, not at the top: it imports datetime, 0.6 MB a node rarely needs

    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc})") from None
    keys = _keys(parser)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        action = keys.get(key.replace("-", "_"))
        if action is None:
            raise ConfigError(f"{path}: unknown key '{key}'")
        try:
            values[action.dest] = _convert(key, value, action)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return values


def merge_toml(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Fill every setting not given on the command line from ``args.config``.

    Not given = None, or for a switch (``store_true`` / ``store_false``) its
    default: a switch declared with ``default=False`` still takes the file's value.
    """
    switches = {
        a.dest: a.default
        for a in parser._actions
        if isinstance(a, argparse._StoreTrueAction | argparse._StoreFalseAction)
    }
    for dest, value in settings_from_toml(args.config, parser).items():
        current = getattr(args, dest, None)
        if current is None or (dest in switches and current == switches[dest]):
            setattr(args, dest, value)


def _port(flag: str, value: int | None, low: int = 0) -> None:
    if value is not None and not low <= value <= 65535:
        raise ConfigError(f"{flag} {value}: a port is {low}..65535")


def _printable(value: str) -> str:
    """``value`` as a CLI error shows it: as given, or quoted and escaped when
    it holds a space or a character that is not printable (a newline, a NUL,
    undecodable bytes), so the error stays one line."""
    return value if value.isprintable() and " " not in value else ascii(value)


def check(config: NodeConfig) -> None:
    """Range and format checks of every setting; ConfigError names the flag."""
    _port("--port", config.port)
    _port("--cluster-port", config.cluster_port)
    _port("--cluster-announce-bus-port", config.cluster_announce_bus_port, 1)
    _port("--cluster-announce-port", config.cluster_announce_port, 1)
    _port("--cluster-announce-tls-port", config.cluster_announce_tls_port, 1)
    from netutil.addresses import address_error, hostname_error, parse_bind, parse_seed

    try:
        parse_bind(config.bind.split())
    except ValueError as exc:
        raise ConfigError(f"--bind {config.bind!r}: {exc}") from None
    for seed in config.join:
        try:
            parse_seed(seed)
        except ValueError as exc:
            raise ConfigError(f"--join {_printable(seed)}: {exc}") from None
    # what peers dial and clients are told: checked here, where it enters (issue 49)
    if config.cluster_announce_ip:
        error = address_error(config.cluster_announce_ip)
        if error is not None:
            shown = _printable(config.cluster_announce_ip)
            raise ConfigError(f"--cluster-announce-ip {shown}: {error}")
    if config.cluster_announce_hostname:
        error = hostname_error(config.cluster_announce_hostname)
        if error is not None:
            shown = _printable(config.cluster_announce_hostname)
            raise ConfigError(f"--cluster-announce-hostname {shown}: {error}")
    positive = ["proto_max_bulk_len", "max_multibulk_len", "maxclients", "filter_capacity"]
    positive.append("node_timeout_ms")
    for name in positive:
        if getattr(config, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(config, name)}: must be > 0")
    not_negative = ["pubsub_hard_limit", "pubsub_soft_limit", "pubsub_soft_seconds"]
    not_negative += ["cluster_link_sendbuf_limit", "cluster_replay_buffer_bytes"]
    not_negative.append("cluster_forward_linger_us")
    not_negative += ["cluster_replay_buffer_ms", "timeout", "tcp_keepalive", "tcp_backlog"]
    not_negative += ["slowlog_max_len", "latency_monitor_threshold"]
    not_negative.append("hot_channels_size")
    if config.hot_channels_size > 65536:
        raise ConfigError(f"--hot-channels-size {config.hot_channels_size}: at most 65536")
    not_negative += ["cluster_max_handshakes", "cluster_max_handshakes_per_ip"]
    if config.slowlog_log_slower_than < -1:
        value = config.slowlog_log_slower_than
        raise ConfigError(f"--slowlog-log-slower-than {value}: must be >= -1 (-1: off)")
    for name in ("slowlog_log_slower_than", "slowlog_max_len", "latency_monitor_threshold"):
        if getattr(config, name) > _LLONG_MAX:  # (CONFIG SET's bound too)
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(config, name)}: too large")
    for name in not_negative:
        if getattr(config, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(config, name)}: must be >= 0")
    if config.cluster_fail_forget_ms is not None and config.cluster_fail_forget_ms < 0:
        value = config.cluster_fail_forget_ms
        raise ConfigError(f"--cluster-fail-forget-ms {value}: must be >= 0 (0: never)")
    if config.subscribe_visibility_timeout_ms < 0:
        value = config.subscribe_visibility_timeout_ms
        raise ConfigError(f"--subscribe-visibility-timeout {value}: must be >= 0")
    if not 0.0 < config.filter_fp_rate < 1.0:
        raise ConfigError(f"--filter-fp-rate {config.filter_fp_rate}: must be between 0 and 1")
    if not 0.0 <= config.traffic_sample <= 1.0:
        raise ConfigError(f"--traffic-sample {config.traffic_sample}: must be in 0..1")
