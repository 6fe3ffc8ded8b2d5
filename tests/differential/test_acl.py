"""ACL users against redis-server 7.0.15, byte for byte: ACL SETUSER rules and
their errors, GETUSER / LIST / USERS / WHOAMI / CAT / DELUSER, AUTH and HELLO
with users, NOPERM on every pub/sub command, ACL LOG (its age and client-info
masked: they are times and connection details), and the disconnection of a
subscriber whose channels are revoked. The rule parser is fuzzed against the
server with hypothesis."""

from __future__ import annotations

import re
from typing import cast

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.differential.oracle import HELLO3, assert_same_as_oracle, exchange, redis_only
from tests.procs import connect, read_quiet

pytestmark = [pytest.mark.timeout(300), redis_only]

RULE_CASES = {
    "pubsub user": b"on >pw +@pubsub -publish &news*",
    "all but publish": b"+@all -publish",
    "category added and removed": b"+@pubsub -@pubsub +ping",
    "all minus category plus command": b"nocommands +@all -@pubsub +publish",
    "subcommand": b"+pubsub|channels",
    "reset": b"on >a reset",
    "keys": b"~k* %R~r* %W~w* ~k*",
    "passwords": b">a >b <a #" + b"a" * 64 + b" !" + b"a" * 64,
    "nopass then resetpass": b"nopass resetpass >x",
    "allchannels then reset": b"allchannels resetchannels &a &b &a",
    "sanitize flags": b"skip-sanitize-payload on",
    "upper case": b"ON +PUBLISH &X",
}
ERROR_CASES = {
    "bogus": b"bogus",
    "unknown command": b"+nosuch",
    "unknown category": b"+@nosuch",
    "channel after allchannels": b"allchannels &b",
    "key after allkeys": b"allkeys ~k",
    "remove missing password": b"<pw",
    "bad hash": b"#abc",
    "bad key permission": b"%X~a",
    "first-arg of a subcommand": b"+acl|setuser|x",
    "empty subcommand": b"+acl|",
    "atomic: nothing applied": b"on >pw bogus",
}


def _setuser(name: bytes, rules: bytes) -> bytes:
    return b"ACL SETUSER " + name + b" " + rules + b"\r\n"


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", list(RULE_CASES))
def test_setuser_getuser_list_same_bytes(servers, case, resp3):
    payload = (HELLO3 if resp3 else b"") + _setuser(b"u1", RULE_CASES[case])
    payload += b"ACL GETUSER u1\r\nACL LIST\r\nACL USERS\r\nACL DELUSER u1\r\nACL GETUSER u1\r\n"
    assert_same_as_oracle(servers, payload)


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_setuser_errors_same_bytes(servers, case):
    payload = _setuser(b"u2", ERROR_CASES[case]) + b"ACL GETUSER u2\r\nACL DELUSER u2\r\n"
    assert_same_as_oracle(servers, payload)


def test_usernames_and_deluser_same_bytes(servers):
    payload = (
        b'ACL SETUSER "a b"\r\nACL SETUSER "a\\x00b"\r\nACL DELUSER default\r\n'
        b"ACL SETUSER u3\r\nACL DELUSER u3 nobody u3\r\nACL WHOAMI\r\nACL GETUSER nobody\r\n"
        b"ACL CAT\r\nACL CAT nosuch\r\nACL LOAD\r\nACL SAVE\r\nACL GETUSER default\r\n"
    )
    assert_same_as_oracle(servers, payload)


def test_acl_cat_of_a_category_lists_the_same_commands(servers):
    """The same as Redis's, the node's own commands aside (as a Redis module's
    commands are listed in their categories)."""
    from router.acl.user import OWN_COMMANDS

    own = {name.encode() for name in OWN_COMMANDS}
    answers = [set(redis.Redis(port=p).execute_command("ACL", "CAT", "pubsub")) for p in servers]
    assert own <= answers[0] | answers[1]
    assert answers[0] - own == answers[1] - own


@pytest.mark.parametrize("resp3", [False, True], ids=["resp2", "resp3"])
def test_auth_and_hello_with_users_same_bytes(servers, resp3):
    setup = _setuser(b"u4", b"on >pw +@all allchannels") + _setuser(b"u5", b"off >pw +@all")
    payload = (
        setup
        + (HELLO3 if resp3 else b"")
        + (
            b"AUTH u4 wrong\r\nAUTH nobody pw\r\nAUTH u5 pw\r\nAUTH u4 pw\r\nACL WHOAMI\r\n"
            b"HELLO 3 AUTH u4 nope\r\nHELLO 2 AUTH u4 pw\r\nACL WHOAMI\r\nAUTH pw\r\nRESET\r\n"
            b"ACL WHOAMI\r\nACL DELUSER u4 u5\r\n"
        )
    )
    assert_same_as_oracle(servers, payload)


NOPERM = (
    _setuser(b"u6", b"on >pw -@all +subscribe +psubscribe +ssubscribe +spublish +acl|whoami")
    + b"ACL SETUSER u6 &news* &shard:{1}\r\n"
)


def test_noperm_on_every_pubsub_command_same_bytes(servers):
    payload = (
        b"AUTH u6 pw\r\nPUBLISH news.a x\r\nSPUBLISH shard:{1} x\r\nSPUBLISH shard:{2} x\r\n"
        b"SUBSCRIBE news.a other\r\nSUBSCRIBE news.a news.b\r\nUNSUBSCRIBE\r\n"
        b"PSUBSCRIBE news.*\r\nPSUBSCRIBE news*\r\nPUNSUBSCRIBE\r\nSSUBSCRIBE shard:{2}\r\n"
        b"SSUBSCRIBE shard:{1}\r\nSUNSUBSCRIBE\r\nPUBSUB CHANNELS\r\nPING\r\nACL WHOAMI\r\n"
    )
    for port in servers:
        exchange(port, NOPERM)
    assert_same_as_oracle(servers, payload)
    for port in servers:
        exchange(port, b"ACL DELUSER u6\r\n")


def _raw(port: int, *args: bytes) -> object:
    """One command's reply, parsed by hiredis without redis-py's callbacks."""
    import hiredis

    with connect(port) as s:
        s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args))
        reader = hiredis.Reader()
        while (reply := reader.gets()) is False:
            reader.feed(s.recv(1 << 20))
        return reply


def _log(port: int) -> list[dict]:
    entries = _raw(port, b"ACL", b"LOG")
    assert isinstance(entries, list)
    out = []
    for entry in entries:
        fields = dict(zip(entry[::2], entry[1::2], strict=True))
        assert isinstance(fields.pop(b"age-seconds"), bytes | float)
        info = fields.pop(b"client-info")
        user = re.search(rb"user=(\S+)", info)
        assert user is not None
        fields[b"client-user"] = user.group(1)
        out.append(fields)
    return out


def test_acl_log_entries_same_as_redis(servers):
    for port in servers:
        exchange(port, b"ACL LOG RESET\r\n" + NOPERM)
        exchange(
            port,
            b"AUTH u6 pw\r\nPUBLISH a b\r\nPUBLISH a b\r\nSUBSCRIBE zzz\r\nPSUBSCRIBE n*\r\n",
        )
        exchange(port, b"AUTH u6 bad\r\nHELLO 3 AUTH nobody x\r\n")
    assert _log(servers[1]) == _log(servers[0])
    assert [len(cast(list, _raw(p, b"ACL", b"LOG", b"2"))) for p in servers] == [2, 2]
    payload = b"ACL LOG 0\r\nACL LOG -1\r\nACL LOG x\r\nACL LOG RESET\r\nACL LOG\r\n"
    assert_same_as_oracle(servers, payload)
    for port in servers:
        exchange(port, b"ACL DELUSER u6\r\n")


@pytest.mark.parametrize(
    "change",
    [b"resetchannels &other", b"&more", b"allchannels", b"resetchannels &news"],
    ids=["revoked", "widened", "all channels", "pattern kept as a channel"],
)
def test_revoking_a_subscribed_channel_disconnects_as_redis(servers, change):
    results = []
    for port in servers:
        exchange(port, _setuser(b"u7", b"on >pw +@all &news &news* &n*"))
        with connect(port) as sub, connect(port) as sub2:
            sub.sendall(b"AUTH u7 pw\r\nSUBSCRIBE news\r\n")
            sub2.sendall(b"AUTH u7 pw\r\nPSUBSCRIBE news*\r\n")
            read_quiet(sub)
            read_quiet(sub2)
            exchange(port, b"ACL SETUSER u7 " + change + b"\r\n")
            results.append((read_quiet(sub, 0.3), read_quiet(sub2, 0.3)))
        exchange(port, b"ACL DELUSER u7\r\n")
    assert results[1] == results[0]


def test_deluser_disconnects_its_clients_as_redis(servers):
    results = []
    for port in servers:
        exchange(port, _setuser(b"u8", b"on >pw +@all allchannels"))
        with connect(port) as c:
            c.sendall(b"AUTH u8 pw\r\n")
            read_quiet(c)
            exchange(port, b"ACL DELUSER u8\r\n")
            results.append(read_quiet(c, 0.3))
    assert results[1] == results[0]


RULES = st.sampled_from(
    [
        "on", "off", "nopass", "resetpass", ">a", ">b", "<a", "#" + "0" * 64, "!" + "0" * 64,
        "&a*", "&b", "allchannels", "resetchannels", "~k", "%R~k", "allkeys", "resetkeys",
        "+@all", "-@all", "+@pubsub", "-@pubsub", "+@slow", "-@fast", "+@dangerous",
        "+publish", "-publish", "+subscribe", "+pubsub|numsub", "-pubsub|channels",
        "+pubsub", "allcommands", "nocommands", "reset", "+get", "+nosuch", "bogus", "&",
        "+@connection", "-@admin", "sanitize-payload",
    ]
)  # fmt: skip


def _split_commands(getuser: object) -> list:
    assert isinstance(getuser, list)
    fields = dict(zip(getuser[::2], getuser[1::2], strict=True))
    words = fields[b"commands"].split()
    # categories first, in Redis's order; single commands come in Redis's
    # randomised command-dict order: compared as a set
    fields[b"commands"] = (
        [w for w in words if w[1:2] == b"@"],
        {w for w in words if w[1:2] != b"@"},
    )
    return sorted(fields.items())


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(RULES, max_size=8))
def test_random_rule_lists_behave_as_redis(servers, rules):
    answers = []
    for port in servers:
        reply = _raw(port, b"ACL", b"SETUSER", b"fz", *(r.encode() for r in rules))
        user = _raw(port, b"ACL", b"GETUSER", b"fz")
        answers.append((str(reply), user and _split_commands(user)))
        _raw(port, b"ACL", b"DELUSER", b"fz")
    assert answers[1] == answers[0]


def test_help_genpass_dryrun_and_syntax_errors_same_bytes(servers):
    payload = (
        _setuser(b"u9", b"on >pw -@all +publish +subscribe &news*")
        + b"ACL HELP\r\nACL GENPASS 0\r\nACL GENPASS 4097\r\nACL GENPASS x\r\nACL GENPASS 1 2\r\n"
        b"ACL DRYRUN u9 publish news.a x\r\nACL DRYRUN u9 publish other x\r\n"
        b"ACL DRYRUN u9 ping\r\nACL DRYRUN nobody ping\r\nACL DRYRUN u9 nosuch\r\n"
        b"ACL DRYRUN u9 publish x\r\nACL DRYRUN u9 subscribe news.1 other\r\n"
        b"ACL LOG 1 2\r\nACL CAT a b\r\nACL NOSUCH\r\nACL WHOAMI x\r\nACL DELUSER u9\r\n"
    )
    assert_same_as_oracle(servers, payload)


def test_genpass_lengths_as_redis(servers):
    for bits in (b"1", b"5", b"256", b"4096"):
        lengths = [len(cast(bytes, _raw(p, b"ACL", b"GENPASS", bits))) for p in servers]
        assert lengths[1] == lengths[0]
