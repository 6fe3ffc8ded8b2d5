"""ACL users meet the admin commands (issue 13 x issue 14) against redis-server
7.0.15, byte for byte: a command queued in MULTI is checked at queue time
(NOPERM, then EXECABORT) and again when EXEC runs it (rules changed
meanwhile), both logged in ACL LOG with context ``multi``; CONFIG, CLIENT
KILL / PAUSE under ACL rules; CONFIG SET requirepass sets the default
user's password; CLIENT KILL USER; CONFIG GET / SET protected-mode and
aclfile; a NOPERM counted as a rejected call in INFO commandstats."""

from __future__ import annotations

import re

import pytest
import redis

from tests.differential.oracle import HELLO3, assert_same_as_oracle, exchange, redis_only
from tests.differential.test_acl import _log
from tests.procs import connect, read_quiet

pytestmark = [pytest.mark.timeout(120), redis_only]

USER = (
    b"ACL SETUSER adm on >pw +@all -config|set -client|kill -client|pause -flushall "
    b"resetchannels &news*\r\n"
)


@pytest.fixture
def adm(servers):
    for port in servers:
        exchange(port, USER + b"ACL LOG RESET\r\n")
    yield
    for port in servers:
        exchange(port, b"ACL DELUSER adm\r\nACL LOG RESET\r\n")


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_noperm_while_queueing_aborts_exec_same_bytes(servers, adm, resp3):
    payload = (HELLO3 if resp3 else b"") + (
        b"AUTH adm pw\r\n"
        b"MULTI\r\nCONFIG GET maxclients\r\nCONFIG SET maxclients 100\r\nPING\r\nEXEC\r\n"
        b"MULTI\r\nPUBLISH news.a x\r\nPUBLISH other x\r\nEXEC\r\n"
        b"MULTI\r\nCLIENT KILL ID 999999\r\nEXEC\r\n"
        b"MULTI\r\nCLIENT PAUSE 10\r\nDISCARD\r\n"
        b"MULTI\r\nFLUSHALL\r\nEXEC\r\n"
        b"MULTI\r\nPING\r\nCLIENT LIST TYPE x\r\nPUBLISH news.b y\r\nEXEC\r\n"
    )
    assert_same_as_oracle(servers, payload)


def test_exec_or_discard_denied_same_bytes(servers):
    setup = b"ACL SETUSER nx on >pw +@all -exec -discard allchannels\r\n"
    payload = b"AUTH nx pw\r\nMULTI\r\nPING\r\nDISCARD\r\nEXEC\r\nPING\r\nMULTI\r\nEXEC\r\nPING\r\n"
    try:
        for port in servers:
            exchange(port, setup)
        assert_same_as_oracle(servers, payload)
    finally:
        for port in servers:
            exchange(port, b"ACL DELUSER nx\r\n")


def test_noperm_outside_multi_same_bytes(servers, adm):
    payload = (
        b"AUTH adm pw\r\nCONFIG SET maxclients 100\r\nCONFIG GET maxclients\r\n"
        b"CLIENT KILL ID 999999\r\nCLIENT PAUSE 10 WRITE\r\nCLIENT UNPAUSE\r\n"
        b"CLIENT NO-EVICT on\r\nCONFIG RESETSTAT\r\nFLUSHALL\r\nACL WHOAMI\r\n"
    )
    assert_same_as_oracle(servers, payload)


def test_acl_log_context_multi_as_redis(servers, adm):
    for port in servers:
        exchange(
            port,
            b"AUTH adm pw\r\nMULTI\r\nCONFIG SET maxclients 100\r\nPUBLISH other x\r\n"
            b"AUTH adm wrong\r\nEXEC\r\nCONFIG SET maxclients 100\r\n",
        )
    assert _log(servers[1]) == _log(servers[0])


def test_rules_changed_before_exec_same_bytes(servers, adm):
    """Queued while allowed, revoked by another connection, then EXEC."""
    results = []
    for port in servers:
        with connect(port) as c:
            c.sendall(
                b"AUTH adm pw\r\nMULTI\r\nPING\r\nCONFIG GET maxclients\r\nPUBLISH news.a x\r\n"
                b"PUBSUB NUMSUB news.a\r\n"
            )
            queued = read_quiet(c)
            exchange(port, b"ACL SETUSER adm -config resetchannels &other\r\n")
            c.sendall(b"EXEC\r\nPING\r\n")
            results.append((queued, read_quiet(c)))
    assert results[1] == results[0]
    assert _log(servers[1]) == _log(servers[0])


def _cmdstat(port: int, name: bytes) -> bytes:
    info, _ = exchange(port, b"INFO commandstats\r\n")
    found = re.search(rb"cmdstat_" + re.escape(name) + rb":[^\r]*", info)
    line = found.group(0) if found else b""
    return re.sub(rb"usec=\d+,usec_per_call=[\d.]+", b"usec=*", line)


def test_noperm_is_a_rejected_call_as_redis(servers, adm):
    for port in servers:
        exchange(port, b"CONFIG RESETSTAT\r\n")
        exchange(port, b"AUTH adm pw\r\nCONFIG SET maxclients 100\r\nMULTI\r\nFLUSHALL\r\n")
    for name in (b"config|set", b"flushall", b"multi"):
        assert _cmdstat(servers[1], name) == _cmdstat(servers[0], name)


def test_config_set_requirepass_sets_the_default_password_same_bytes(servers):
    setup = b"CONFIG SET requirepass s3cret\r\n"
    try:
        for port in servers:
            exchange(port, setup)
        payload = (
            b"PING\r\nAUTH wrong\r\nAUTH s3cret\r\nPING\r\nAUTH default s3cret\r\n"
            b"CONFIG GET requirepass\r\nACL GETUSER default\r\nACL LIST\r\n"
            b'CONFIG SET requirepass ""\r\nACL GETUSER default\r\nAUTH x\r\n'
            b"CONFIG SET requirepass s3cret\r\n"
        )
        assert_same_as_oracle(servers, payload)
    finally:
        for port in servers:
            exchange(port, b'AUTH s3cret\r\nCONFIG SET requirepass ""\r\n')
    assert_same_as_oracle(servers, b"PING\r\nACL GETUSER default\r\nCONFIG GET requirepass\r\n")


def test_client_kill_user_as_redis(servers):
    results = []
    for port in servers:
        exchange(port, b"ACL SETUSER k1 on >pw +@all allchannels\r\n")
        with connect(port) as a, connect(port) as b, connect(port) as other:
            for c in (a, b):
                c.sendall(b"AUTH k1 pw\r\n")
                read_quiet(c)
            other.sendall(b"PING\r\n")
            read_quiet(other)
            killed = exchange(
                port, b"CLIENT KILL USER nobody\r\nCLIENT KILL USER k1\r\nCLIENT KILL USER k1\r\n"
            )
            a.sendall(b"PING\r\n")
            other.sendall(b"PING\r\n")
            results.append((killed, read_quiet(a, 0.3), read_quiet(other, 0.3)))
        exchange(port, b"ACL DELUSER k1\r\n")
    assert results[1] == results[0]


def test_config_protected_mode_and_aclfile_same_bytes(servers):
    # the oracle runs with protected-mode no, the node with its default (yes)
    before = [exchange(port, b"CONFIG GET protected-mode\r\n")[0] for port in servers]
    payload = (
        b"CONFIG SET protected-mode yes\r\nCONFIG GET protected-mode\r\nCONFIG GET aclfile\r\n"
        b"CONFIG SET protected-mode maybe\r\nCONFIG SET protected-mode NO\r\n"
        b"CONFIG GET protected-mode\r\nCONFIG SET aclfile /tmp/x.acl\r\n"
    )
    try:
        assert_same_as_oracle(servers, payload)
        # a glob lists in Redis's config-dict order, random per process: a map
        found = [redis.Redis(port=port).config_get("prot*") for port in servers]
        assert found[1] == found[0]
    finally:
        for port, reply in zip(servers, before, strict=True):
            value = reply.split(b"\r\n")[-2]
            exchange(port, b"CONFIG SET protected-mode " + value + b"\r\n")
