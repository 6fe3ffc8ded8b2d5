"""router/acl/user.py fuzzed with hypothesis: any rule bytes either apply or
raise AclError (nothing else escapes); the description ACL LIST shows, fed
back as rules to a fresh user, gives the same permissions (Redis relies on
this for ACL SAVE / LOAD). The byte-level comparison with redis-server is
tests/differential/test_acl.py."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from router.acl.user import CATEGORIES, COMMAND_CATEGORIES, AclError, User, describe

NAMES = sorted(COMMAND_CATEGORIES)
RULE = st.one_of(
    st.binary(max_size=12),
    st.sampled_from(
        [
            b"on",
            b"off",
            b"nopass",
            b"resetpass",
            b"reset",
            b"allchannels",
            b"resetchannels",
            b"allkeys",
            b"resetkeys",
            b"allcommands",
            b"nocommands",
            b"+@all",
            b"-@all",
            b"sanitize-payload",
            b"skip-sanitize-payload",
        ]
    ),
    st.sampled_from(CATEGORIES).map(lambda c: b"+@" + c.encode()),
    st.sampled_from(CATEGORIES).map(lambda c: b"-@" + c.encode()),
    st.sampled_from(NAMES).map(lambda n: b"+" + n.encode()),
    st.sampled_from(NAMES).map(lambda n: b"-" + n.encode()),
    st.binary(max_size=6).map(lambda b: b"&" + b),
    st.binary(max_size=6).map(lambda b: b">" + b),
    st.binary(max_size=6).map(lambda b: b"~" + b),
)


def _apply_all(user: User, rules: list[bytes]) -> None:
    for rule in rules:
        with contextlib.suppress(AclError):
            user.apply(rule)


@settings(max_examples=1500, deadline=None)
@given(st.lists(RULE, max_size=12))
def test_rules_apply_or_raise_acl_error_and_describe_round_trips(rules):
    user = User(b"u")
    _apply_all(user, rules)
    line = describe(user)
    assert line.startswith("user u ")
    again = User(b"u")
    for word in line.split(" ")[2:]:
        again.apply(word.encode(errors="surrogateescape"))  # the description is always valid rules
    assert again.allowed == user.allowed
    assert again.allcommands == user.allcommands
    assert (again.allchannels, again.channels) == (user.allchannels, user.channels)
    assert (again.enabled, again.nopass, again.passwords) == (
        user.enabled,
        user.nopass,
        user.passwords,
    )


def test_psubscribe_patterns_are_matched_literally_channels_by_glob():
    user = User(b"u")
    user.apply(b"&news.*")
    assert user.may_use_channel(b"news.a", False)
    assert user.may_use_channel(b"news.*", True)
    assert not user.may_use_channel(b"news.a*", True)
    assert not user.may_use_channel(b"other", False)


def test_acl_log_keeps_the_128_newest_entries_as_redis():
    """ACL LOG is bounded as Redis's ``acllog-max-len`` 128 (issue 41)."""
    from router.acl.registry import LOG_MAX, Acl

    acl = Acl(None)
    for i in range(LOG_MAX + 50):
        acl.add_log("command", b"cmd%d" % i, b"default", "id=1")  # distinct: never grouped
    assert len(acl.log) == LOG_MAX == 128
    assert acl.log[0].object == b"cmd%d" % (LOG_MAX + 49)  # newest first
    assert acl.denied_commands == LOG_MAX + 50  # every denial counted all the same
