"""The console script: `bloomcast --help` lists every subcommand."""

import subprocess
import sys

from bloomcast.cli import SUBCOMMANDS, main


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
