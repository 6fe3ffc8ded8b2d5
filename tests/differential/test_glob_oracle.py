"""router.glob against the oracle (redis-server 7.0.15, else valkey-server): a
random sample of patterns and channels, PSUBSCRIBE on one connection,
PUBLISH's receiver count on another.
(The reference transliteration and hypothesis: tests/router/test_glob.py.)"""

from __future__ import annotations

import pytest

from router.glob import stringmatch
from tests.differential.oracle import oracle_server
from tests.procs import connect, read_quiet

pytestmark = pytest.mark.timeout(120)


def test_glob_against_the_oracle():
    import random

    rnd = random.Random(7)
    alpha = b"ab*?[]^-\\"
    cases = []
    for _ in range(300):
        p = bytes(rnd.choice(alpha) for _ in range(rnd.randint(1, 7)))
        s = bytes(rnd.choice(b"ab-]^") for _ in range(rnd.randint(1, 6)))
        cases.append((p, s))
    with oracle_server() as port:
        sub, pub = connect(port), connect(port)
        for i, (p, s) in enumerate(cases):
            sub.sendall(b"*2\r\n$10\r\nPSUBSCRIBE\r\n$%d\r\n%b\r\n" % (len(p), p))
            read_quiet(sub, 0.02)
            pub.sendall(b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%b\r\n$1\r\nm\r\n" % (len(s), s))
            got, _ = read_quiet(pub, 0.02)
            assert got == (b":1\r\n" if stringmatch(p, s) else b":0\r\n"), (i, p, s)
            sub.sendall(b"PUNSUBSCRIBE\r\n")
            read_quiet(sub, 0.02)
        sub.close()
        pub.close()
