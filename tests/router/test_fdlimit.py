"""``maxclients`` fitted to the descriptor limit at start (Redis's
``adjustOpenFilesLimit``, issue 49): each case in a child process started
under ``prlimit``, as a node would be."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from bloomcast.testing.ports import free_port

pytestmark = pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit")

FIT = (
    "import logging, resource, sys\n"
    "logging.basicConfig(level=logging.INFO, format='%(message)s', stream=sys.stdout)\n"
    "from router.fdlimit import fit_maxclients\n"
    "f = fit_maxclients(int(sys.argv[1]), sys.argv[2] == 'bus', int(sys.argv[3]))\n"
    "print('fitted', f.maxclients, f.handshakes, resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
)


def fit(limit: str, maxclients: int = 10000, bus: bool = True, handshakes: int = 0) -> str:
    args = [str(maxclients), "bus" if bus else "-", str(handshakes)]
    cmd = ["prlimit", f"--nofile={limit}", sys.executable, "-c", FIT, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout


def can_raise_hard_limit() -> bool:
    out = subprocess.run(
        ["prlimit", "--nofile=64:64", sys.executable, "-c",
         "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))"],
        capture_output=True,
    )  # fmt: skip
    return out.returncode == 0


def test_a_low_limit_lowers_maxclients_with_redis_lines():
    if can_raise_hard_limit():
        pytest.skip("this process may raise its hard limit (CAP_SYS_RESOURCE)")
    out = fit("300:300", bus=False)
    assert out.splitlines() == [
        "You requested maxclients of 10000 requiring at least 10032 max file descriptors.",
        "Server can't set maximum open files to 10032 because of OS error: "
        "Operation not permitted.",
        "Current maximum open files is 300. maxclients has been reduced to 268 to compensate "
        "for low ulimit. If you need higher maxclients increase 'ulimit -n'.",
        "fitted 268 0 300",
    ]


def test_the_bus_keeps_descriptors_for_peers_and_handshakes():
    if can_raise_hard_limit():
        pytest.skip("this process may raise its hard limit (CAP_SYS_RESOURCE)")
    # 1024 - 32 - 64 - 128: the automatic handshake cap fits whole
    assert fit("1024:1024").splitlines()[-1] == "fitted 800 128 1024"
    # 256: the automatic cap shrinks to a quarter of what is left (40)
    assert fit("256:256").splitlines()[-1] == "fitted 120 40 256"
    # an explicit cap is kept whatever the limit
    assert fit("256:256", handshakes=100).splitlines()[-1] == "fitted 60 100 256"


def test_the_soft_limit_is_raised_up_to_the_hard_one():
    out = fit("300:20000").splitlines()
    assert out == [
        "Increased maximum number of open files to 10224 (it was originally set to 300).",
        "fitted 10000 128 10224",
    ]
    out = fit("300:5000", bus=False).splitlines()  # as far as the hard limit lets it
    if not can_raise_hard_limit():
        assert out[-1] == "fitted 4968 0 5000"


def test_a_node_started_under_too_low_a_limit_says_so_in_one_line():
    port = free_port()
    cmd = ["prlimit", "--nofile=100:100", sys.executable, "-m", "bloomcast.cli", "node"]
    if can_raise_hard_limit():
        pytest.skip("this process may raise its hard limit (CAP_SYS_RESOURCE)")
    done = subprocess.run([*cmd, "--port", str(port)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "bloomcast node: Your current 'ulimit -n' of 100 is not enough for the server to "
        "start. Please increase your open file limit to at least 113. Exiting."
    )


def test_config_get_maxclients_shows_the_fitted_value():
    port = free_port()
    cmd = ["prlimit", "--nofile=200:200", sys.executable, "-m", "bloomcast.cli", "node"]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port), "--no-bus"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import redis

        from bloomcast.testing.ports import wait_port

        wait_port(port, timeout=20)
        got = redis.Redis(port=port).config_get("maxclients")
        assert got == {"maxclients": "10000" if can_raise_hard_limit() else "168"}  # 200 - 32
    finally:
        proc.terminate()
        proc.wait(10)
