"""The bus handshake as a pure state machine: both ends driven by hand, no sockets."""

from __future__ import annotations

import os

import pytest

from cluster_bus.frames import Hello, HelloAuth, Ping
from cluster_bus.handshake import Handshake

A, B = "aa" * 20, "bb" * 20


def pair(secret_a: bytes | None, secret_b: bytes | None) -> tuple[Handshake, Handshake]:
    return Handshake(A, secret_a, outbound=True), Handshake(B, secret_b, outbound=False)


@pytest.mark.parametrize("secret", [None, b"s3cret"])
def test_three_frames_authenticate_both_ends(secret):
    dialer, acceptor = pair(secret, secret)
    hello = dialer.hello()
    step = acceptor.receive(hello)
    assert not step.done and step.error is None
    assert isinstance(step.send, Hello) and step.send.reply
    assert len(step.send.mac) == (32 if secret else 0)
    step2 = dialer.receive(step.send)
    assert step2.done and dialer.peer_id == B
    assert isinstance(step2.send, HelloAuth)
    step3 = acceptor.receive(step2.send)
    assert step3.done and step3.send is None and acceptor.peer_id == A


def test_wrong_secret_is_refused_by_the_dialer():
    dialer, acceptor = pair(b"one", b"two")
    step = dialer.receive(acceptor.receive(dialer.hello()).send)
    assert step.error == "bad cluster secret (acceptor's HMAC)" and not step.done
    assert dialer.peer_id is None


def test_missing_secret_is_refused_by_the_acceptor():
    dialer, acceptor = pair(None, b"two")  # the dialer cannot MAC
    reply = acceptor.receive(dialer.hello()).send
    # a dialer without the secret accepts anything; the acceptor checks its MAC
    auth = dialer.receive(reply).send
    step = acceptor.receive(auth)
    assert step.error == "bad cluster secret (initiator's HMAC)" and not step.done


def test_replayed_initiator_mac_does_not_fit_a_fresh_nonce():
    dialer, acceptor = pair(b"k", b"k")
    auth = dialer.receive(acceptor.receive(dialer.hello()).send).send
    other = Handshake(B, b"k", outbound=False)  # a new link, a new nonce
    other.receive(Hello(A, dialer.nonce))
    assert other.receive(auth).error == "bad cluster secret (initiator's HMAC)"


def test_out_of_order_frames_are_errors():
    dialer, acceptor = pair(None, None)
    assert acceptor.receive(HelloAuth()).error == "expected HELLO, got HelloAuth"
    assert acceptor.receive(Hello(A, os.urandom(16), reply=True)).error.startswith("expected HELLO")
    assert dialer.receive(Hello(B, os.urandom(16))).error.startswith("expected HELLO reply")
    acceptor.receive(dialer.hello())
    ping = Ping(A, "", 1, 2, 0, 0, 0, 0, False)
    assert acceptor.receive(ping).error == "expected HELLO_AUTH, got Ping"


def test_dialling_ourselves_is_recognised():
    me = Handshake(A, None, outbound=True)
    answer = Handshake(A, None, outbound=False).receive(me.hello()).send
    step = me.receive(answer)
    assert step.myself and not step.done and step.error is None


def test_each_side_learns_the_others_boot_and_a_forged_boot_breaks_the_mac():
    """The boot (random per process) rides in HELLO and in both MACs: a peer
    that restarted keeping its id is known to be a new life, and a man in the
    middle cannot swap it."""
    dialer = Handshake(A, b"s", outbound=True, boot=11)
    acceptor = Handshake(B, b"s", outbound=False, boot=22)
    reply = acceptor.receive(dialer.hello()).send
    assert isinstance(reply, Hello) and reply.boot == 22
    assert acceptor.peer_boot == 11
    forged = Hello(reply.node_id, reply.nonce, reply.mac, reply=True, boot=23)
    assert (
        Handshake(A, b"s", outbound=True, boot=11, nonce=dialer.nonce).receive(forged).error
        == "bad cluster secret (acceptor's HMAC)"
    )
    step = dialer.receive(reply)
    assert step.done and dialer.peer_boot == 22
    assert acceptor.receive(step.send).done
