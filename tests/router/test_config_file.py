"""router/config_file.py: TOML keys read off an argparse parser, type-checked,
merged under the flags given on the command line."""

from __future__ import annotations

import argparse

import pytest

from router.config import NodeConfig
from router.config_file import ConfigError, check, merge_toml, settings_from_toml


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--config")
    p.add_argument("--port", type=int)
    p.add_argument("--rate", type=float)
    p.add_argument("--switch-none", action="store_true", default=None)
    p.add_argument("--switch-false", action="store_true")  # default False
    p.add_argument("--seed", action="append")
    return p


def test_switches_with_either_default_take_the_files_value(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("switch-none = true\nswitch_false = true\nport = 7\nrate = 1\n")
    args = parser().parse_args(["--config", str(path)])
    merge_toml(args, parser())
    assert (args.switch_none, args.switch_false, args.port, args.rate) == (True, True, 7, 1.0)


def test_flags_given_override_the_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("port = 7\nseed = ['a:1']\n")
    args = parser().parse_args(["--config", str(path), "--port", "8", "--seed", "b:2"])
    merge_toml(args, parser())
    assert args.port == 8 and args.seed == ["b:2"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port = 1.5\n", "key 'port': expected an integer, got a number (1.5)"),
        ("rate = 'x'\n", "key 'rate': expected a number, got a string ('x')"),
        ("seed = 3\n", "key 'seed': expected a list of strings, got an integer (3)"),
        (
            "switch-false = 'yes'\n",
            "key 'switch-false': expected true or false, got a string ('yes')",
        ),
        ("[port]\nx = 1\n", "key 'port': expected an integer, got a dict"),
    ],
)
def test_type_mistakes_name_the_key(tmp_path, text, message):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        settings_from_toml(path, parser())
    assert str(exc.value) == f"{path}: {message}"


def test_fail_forget_default_is_five_node_timeouts_and_at_least_the_replay_window():
    assert NodeConfig().bus_config(6379).fail_forget_after_ms == 5 * 15000
    short = NodeConfig(node_timeout_ms=500)  # 2.5 s < the 10 s replay window
    assert short.bus_config(6379).fail_forget_after_ms == 10_000
    never = NodeConfig(cluster_fail_forget_ms=0)
    assert never.bus_config(6379).fail_forget_after_ms == 0


def test_forward_linger_reaches_the_bus_from_a_flag_or_the_file_and_is_not_negative(tmp_path):
    """--cluster-forward-linger-us (key cluster-forward-linger-us): microseconds
    in NodeConfig and in the bus's settings; a negative value is one line."""
    from router.config import add_node_arguments, config_from_args

    p = argparse.ArgumentParser()
    add_node_arguments(p)
    path = tmp_path / "node.toml"
    path.write_text("cluster-forward-linger-us = 5000\n")
    config = config_from_args(p.parse_args(["--config", str(path)]), p)
    assert config.cluster_forward_linger_us == 5000
    assert config.bus_config(6379).forward_linger_us == 5000
    assert NodeConfig().bus_config(6379).forward_linger_us == 0
    with pytest.raises(ConfigError) as exc:
        check(NodeConfig(cluster_forward_linger_us=-1))
    assert str(exc.value) == "--cluster-forward-linger-us -1: must be >= 0"


def test_slowlog_and_latency_thresholds_start_from_flags_or_the_file(tmp_path):
    """--slowlog-log-slower-than, --slowlog-max-len, --latency-monitor-threshold
    (redis.conf's directives): the live settings a node starts with, which
    CONFIG SET changes; out of Redis's ranges is one line."""
    from router.config import add_node_arguments, config_from_args
    from router.settings import Settings

    p = argparse.ArgumentParser()
    add_node_arguments(p)
    path = tmp_path / "node.toml"
    path.write_text("slowlog-max-len = 5\nlatency-monitor-threshold = 100\n")
    args = ["--config", str(path), "--slowlog-log-slower-than", "-1"]
    settings = Settings.from_config(config_from_args(p.parse_args(args), p))
    assert (settings.slowlog_log_slower_than, settings.slowlog_max_len) == (-1, 5)
    assert settings.latency_monitor_threshold == 100
    assert Settings.from_config(NodeConfig()) == Settings()
    for field, value, line in [
        ("slowlog_log_slower_than", -2, "--slowlog-log-slower-than -2: must be >= -1 (-1: off)"),
        ("slowlog_max_len", -1, "--slowlog-max-len -1: must be >= 0"),
        ("latency_monitor_threshold", -1, "--latency-monitor-threshold -1: must be >= 0"),
        ("latency_monitor_threshold", 2**63, f"--latency-monitor-threshold {2**63}: too large"),
    ]:
        with pytest.raises(ConfigError) as exc:
            check(NodeConfig(**{field: value}))
        assert str(exc.value) == line
