"""CLIENT REPLY ON|OFF|SKIP against the oracle, byte for byte: replies are
silenced, pub/sub confirmations and messages still arrive (Redis 7.0 sends
them as pushes), RESET turns replies back on, and the argument errors."""

from __future__ import annotations

import pytest

from tests.differential.oracle import HELLO3, assert_same_as_oracle

pytestmark = pytest.mark.timeout(120)

CASES = {
    "off then on": b"CLIENT REPLY OFF\r\nPING\r\nECHO x\r\nFOO\r\nCLIENT REPLY ON\r\nPING\r\n",
    "skip one": b"CLIENT REPLY SKIP\r\nPING\r\nECHO a\r\nCLIENT REPLY SKIP\r\nECHO b\r\nPING\r\n",
    "skip while off": b"CLIENT REPLY OFF\r\nCLIENT REPLY SKIP\r\nPING\r\n"
    b"CLIENT REPLY ON\r\nPING\r\n",
    "errors": b"CLIENT REPLY foo\r\nCLIENT REPLY\r\nCLIENT REPLY on off\r\nclient reply On\r\n",
    "silenced errors": b"CLIENT REPLY OFF\r\nCLIENT REPLY foo\r\nCLIENT REPLY ON\r\n",
    "reset turns replies on": b"CLIENT REPLY OFF\r\nPING\r\nRESET\r\nPING\r\n",
    "confirmations still arrive": b"CLIENT REPLY OFF\r\nSUBSCRIBE a b\r\nPSUBSCRIBE c*\r\n"
    b"PING\r\nUNSUBSCRIBE a\r\nPUNSUBSCRIBE\r\nUNSUBSCRIBE\r\nCLIENT REPLY ON\r\nPING\r\n",
    "messages still arrive resp3": HELLO3 + b"SUBSCRIBE me\r\nCLIENT REPLY OFF\r\n"
    b"PUBLISH me m1\r\nCLIENT REPLY SKIP\r\nPUBLISH me m2\r\nCLIENT REPLY ON\r\nPUBLISH me m3\r\n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_client_reply_same_bytes_as_the_oracle(servers, name):
    assert_same_as_oracle(servers, CASES[name])
