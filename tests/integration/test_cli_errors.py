"""Every CLI and config mistake of ``bloomcast node`` is one line on stderr
naming the flag or key, exit code 2 (usage) or 1 (runtime), never a
traceback; TOML keys are the flag names, type-checked; ``--check-config``.
Real ``bloomcast`` processes, real sockets (issue 15)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bloomcast.testing import free_port

ROOT = Path(__file__).resolve().parents[2]


def bloomcast(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bloomcast.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def one_line_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    """The single stderr line of a failed run; asserts the exit code and no traceback."""
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return str(path)


def test_toml_port_as_a_string(tmp_path):
    path = write(tmp_path, 'port = "25012"\n')
    proc = bloomcast("node", "--config", path)
    assert one_line_error(proc, 2) == (
        f"bloomcast node: {path}: key 'port': expected an integer, got a string ('25012')"
    )


def test_join_nonsense():
    proc = bloomcast("node", "--join", "nonsense", "--port", str(free_port()))
    assert one_line_error(proc, 2) == (
        "bloomcast node: --join nonsense: expected HOST:BUSPORT, e.g. 127.0.0.1:17001"
    )


def test_missing_config_file(tmp_path):
    path = tmp_path / "absent.toml"
    proc = bloomcast("node", "--config", str(path))
    assert one_line_error(proc, 2) == f"bloomcast node: --config {path}: no such file"


def test_client_port_already_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = bloomcast("node", "--port", str(port), "--no-bus")
    assert one_line_error(proc, 1) == (
        f"bloomcast node: --port {port}: cannot listen on 127.0.0.1:{port}: address already in use"
    )


def test_bus_port_already_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        bus = taken.getsockname()[1]
        proc = bloomcast("node", "--port", str(free_port()), "--cluster-port", str(bus))
    assert one_line_error(proc, 1) == (
        f"bloomcast node: --cluster-port {bus}: cannot listen on 127.0.0.1:{bus}: "
        "address already in use"
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--port", "x"],
            "bloomcast node: argument --port: invalid int value: 'x' (see bloomcast node --help)",
        ),
        (["--port", "70000"], "bloomcast node: --port 70000: a port is 0..65535"),
        (
            ["--filter-fp-rate", "1.5"],
            "bloomcast node: --filter-fp-rate 1.5: must be between 0 and 1",
        ),
        (
            ["--cluster-fail-forget-ms", "-1"],
            "bloomcast node: --cluster-fail-forget-ms -1: must be >= 0 (0: never)",
        ),
        (
            ["--loglevel", "loud"],
            "bloomcast node: argument --loglevel/--log-level: invalid choice: 'loud' "
            "(choose from 'debug', 'verbose', 'notice', 'warning') "
            "(see bloomcast node --help)",
        ),
    ],
)
def test_flag_mistakes(argv, expected):
    assert one_line_error(bloomcast("node", *argv), 2) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("portt = 1\n", "unknown key 'portt'"),
        ("no-bus = 1\n", "key 'no-bus': expected true or false, got an integer (1)"),
        ("join = [1]\n", "key 'join': expected a list of strings, got a list"),
        (
            "filter-fp-rate = true\n",
            "key 'filter-fp-rate': expected a number, got a boolean (True)",
        ),
        (
            'on-publish-loss = "drop"\n',
            "key 'on-publish-loss': 'drop' is not one of notify, disconnect",
        ),
        ("config = 'x.toml'\n", "unknown key 'config'"),
        (
            'cluster-fail-forget-ms = "5s"\n',
            "key 'cluster-fail-forget-ms': expected an integer, got a string ('5s')",
        ),
    ],
)
def test_toml_key_mistakes(tmp_path, text, expected):
    path = write(tmp_path, text)
    proc = bloomcast("node", "--config", path, "--check-config")
    assert one_line_error(proc, 2) == f"bloomcast node: {path}: {expected}"


def test_invalid_toml(tmp_path):
    path = write(tmp_path, "port = \n")
    line = one_line_error(bloomcast("node", "--config", path), 2)
    assert line.startswith(f"bloomcast node: --config {path}: not valid TOML (")


def test_toml_keys_are_the_flag_names(tmp_path):
    # each spelling the issue names, and the field name kept for old files
    path = write(
        tmp_path,
        "subscribe-visibility-timeout = 200\nno-bus = true\nlog-level = 'verbose'\n"
        "port = 25013\njoin = '127.0.0.1:17001'\n",
    )
    proc = bloomcast("node", "--config", path, "--check-config")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("bloomcast node: configuration OK (port 25013, no bus, 1 seed(s))\n")
    path = write(tmp_path, "subscribe_visibility_timeout_ms = 200\nloglevel = 'debug'\n")
    assert bloomcast("node", "--config", path, "--check-config").returncode == 0


def test_check_config_sees_flags_override_the_file(tmp_path):
    path = write(tmp_path, "port = 25013\n")
    proc = bloomcast("node", "--config", path, "--port", "25014", "--check-config")
    assert proc.returncode == 0 and "(port 25014, bus port 35014, 0 seed(s))" in proc.stdout
    # a bad value in the file is caught even when the flag overrides it
    path = write(tmp_path, "port = 'x'\n")
    proc = bloomcast("node", "--config", path, "--port", "25014", "--check-config")
    assert proc.returncode == 2


def test_derived_bus_port_past_65535():
    proc = bloomcast("node", "--port", "60000", "--check-config")
    assert one_line_error(proc, 2) == (
        "bloomcast node: --port 60000: the bus port (port + 10000) would pass 65535; "
        "give --cluster-port or --no-bus"
    )
    assert bloomcast("node", "--port", "60000", "--no-bus", "--check-config").returncode == 0


def test_bind_to_an_address_the_machine_lacks():
    # 192.0.2.1 is TEST-NET-1 (RFC 5737): assigned to no machine
    port = free_port()
    proc = bloomcast("node", "--bind", "192.0.2.1", "--port", str(port), "--no-bus")
    assert one_line_error(proc, 1) == (
        f"bloomcast node: --bind 192.0.2.1: cannot listen on 192.0.2.1:{port}: "
        "Cannot assign requested address"
    )


def test_logfile_and_traffic_dir_that_cannot_be_used(tmp_path):
    missing = tmp_path / "no-such-dir"
    base = ("node", "--port", str(free_port()), "--no-bus")
    proc = bloomcast(*base, "--logfile", f"{missing}/x.log")
    assert one_line_error(proc, 1) == (
        f"bloomcast node: --logfile {missing}/x.log: No such file or directory"
    )
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = bloomcast(*base, "--traffic-dir", f"{blocker}/spool")
    assert one_line_error(proc, 1).startswith(
        f"bloomcast node: --traffic-dir {blocker}/spool: cannot use it: "
    )


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["--cluster-announce-hostname", "evil myself,master"],
            "--cluster-announce-hostname 'evil myself,master': "
            "Hostnames may only contain alphanumeric characters, hyphens or dots",
        ),
        (
            ["--cluster-announce-hostname", "h" * 256],
            f"--cluster-announce-hostname {'h' * 256}: Hostnames must be less than 256 characters",
        ),
        (
            [b"--cluster-announce-hostname", b"caf\xe9"],  # no UTF-8: a surrogate in argv
            "--cluster-announce-hostname 'caf\\udce9': "
            "Hostnames may only contain alphanumeric characters, hyphens or dots",
        ),
        (
            ["--cluster-announce-ip", "10.0.0.1\n"],
            "--cluster-announce-ip '10.0.0.1\\n': not an IP address, and hostnames may only "
            "contain alphanumeric characters, hyphens or dots",
        ),
        (
            ["--join", f"{'a' * 64}.example:17001"],
            f"--join {'a' * 64}.example:17001: invalid host (not an IP address, and a host "
            "name's labels are 1..63 characters)",
        ),
    ],
)
def test_an_address_or_hostname_a_peer_could_not_use_is_one_line(argv, error):
    """Issue 49: the announce flags and --join are checked where they enter,
    with Redis 7.0's hostname rule and wording (``isValidAnnouncedHostname``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "bloomcast.cli", "node", *argv, "--port", str(free_port())],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    stderr = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in stderr
    assert stderr.splitlines() == [f"bloomcast node: {error}"]
