"""The console script: `bloomcast --help` lists every subcommand."""

import argparse
import re
import subprocess
import sys

from bloomcast.cli import SUBCOMMANDS, build_parser, main


def test_help_lists_every_subcommand(capsys):
    try:
        main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert name in out


def test_console_script_runs():
    proc = subprocess.run(
        [sys.executable, "-m", "bloomcast.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert "bloomcast" in proc.stdout


def _subparser(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def test_every_bench_and_stats_flag_has_help():
    parser = build_parser()
    for path in (("bench",), ("stats", "run"), ("stats", "top"), ("node",)):
        sub = _subparser(parser, *path)
        bare = [
            a.option_strings or [a.dest]
            for a in sub._actions
            if not isinstance(a, argparse._SubParsersAction) and not (a.help or "").strip()
        ]
        assert not bare, f"bloomcast {' '.join(path)}: no help for {bare}"


def test_bench_help_says_what_it_needs_and_how_long():
    proc = subprocess.run(
        [sys.executable, "-m", "bloomcast.cli", "bench", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    for tool in ("redis-server", "redis-benchmark", "valkey-server"):
        assert tool in text
    for part in ("single", "cluster", "convergence", "simulate", "faults", "scale"):
        assert re.search(rf"\b{part} [~<][\d-]+ min\b", text), part
