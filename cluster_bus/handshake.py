"""The bus handshake as a pure state machine (sans-IO: no socket, no clock).

Three frames open every link::

    dialer   -> HELLO(id_a, nonce_a, boot_a)
    acceptor -> HELLO(reply, id_b, nonce_b, boot_b, mac_b)
    dialer   -> HELLO_AUTH(mac_a)

With a cluster secret S, mac_b = HMAC-SHA256(S, b"acceptor" | nonce_a |
nonce_b | id_a | id_b | boot_a | boot_b) and mac_a the same with
b"initiator" (RFC 2104 HMAC, compared in constant time); each side checks
the other's, so a process without the secret can neither join nor make a
node accept its frames. ``boot`` is random per process: a node that keeps its
id across a restart is still known to be a new life (its peers' forwarding
sessions for the old one end: :mod:`cluster_bus.forwarding`).
Without a secret the MACs are empty and only the protocol order is checked.
With one, :meth:`Handshake.frame_keys` then gives the per-link keys that
seal every later frame (:mod:`cluster_bus.seal`).

:meth:`Handshake.receive` takes each frame that arrives before the link is
authenticated and returns a :class:`Step`: what to send, and whether the
link is now authenticated, refused, or turned out to be a link to itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cluster_bus.frames import Hello, HelloAuth, Message
from cluster_bus.seal import link_keys


@dataclass(frozen=True, slots=True)
class Step:
    """The outcome of one handshake frame.

    ``send``: a frame to send back (or None). ``done``: the peer is
    authenticated (``Handshake.peer_id`` is set). ``error``: refuse and close
    the link, counting an authentication failure. ``myself``: the dialled
    address is this node's own bus (close quietly, never dial it again).
    """

    send: Message | None = None
    done: bool = False
    error: str | None = None
    myself: bool = False


class Handshake:
    """One link's handshake, from either end (``outbound``: we dialled)."""

    __slots__ = (
        "_me",
        "_secret",
        "boot",
        "nonce",
        "outbound",
        "peer_boot",
        "peer_id",
        "peer_nonce",
    )

    def __init__(
        self,
        my_id: str,
        secret: bytes | None,
        outbound: bool,
        nonce: bytes | None = None,
        boot: int = 0,
    ) -> None:
        self._me = my_id
        self._secret = secret
        self.outbound = outbound
        self.nonce = nonce if nonce is not None else os.urandom(16)
        self.boot = boot
        self.peer_id: str | None = None
        self.peer_nonce = b""
        self.peer_boot = 0

    @property
    def my_id(self) -> str:
        return self._me

    def hello(self) -> Hello:
        """The dialer's first frame."""
        return Hello(self._me, self.nonce, boot=self.boot)

    def receive(self, msg: Message) -> Step:
        return self._as_dialer(msg) if self.outbound else self._as_acceptor(msg)

    def _as_dialer(self, msg: Message) -> Step:
        if not isinstance(msg, Hello) or not msg.reply or self.peer_id is not None:
            return Step(error=f"expected HELLO reply, got {type(msg).__name__}")
        ids = bytes.fromhex(self._me) + bytes.fromhex(msg.node_id) + _boots(self.boot, msg.boot)
        expected = self._mac(b"acceptor", self.nonce, msg.nonce, ids)
        if self._secret is not None and not _same(expected, msg.mac):
            return Step(error="bad cluster secret (acceptor's HMAC)")
        if msg.node_id == self._me:
            return Step(myself=True)
        self.peer_id = msg.node_id
        self.peer_nonce = msg.nonce
        self.peer_boot = msg.boot
        return Step(HelloAuth(self._mac(b"initiator", msg.nonce, self.nonce, ids)), done=True)

    def _as_acceptor(self, msg: Message) -> Step:
        if self.peer_id is None:
            if not isinstance(msg, Hello) or msg.reply:
                return Step(error=f"expected HELLO, got {type(msg).__name__}")
            self.peer_id = msg.node_id
            self.peer_nonce = msg.nonce
            self.peer_boot = msg.boot
            ids = self._acceptor_ids()
            mac = self._mac(b"acceptor", msg.nonce, self.nonce, ids)
            return Step(Hello(self._me, self.nonce, mac, reply=True, boot=self.boot))
        if not isinstance(msg, HelloAuth):
            return Step(error=f"expected HELLO_AUTH, got {type(msg).__name__}")
        ids = self._acceptor_ids()
        expected = self._mac(b"initiator", self.nonce, self.peer_nonce, ids)
        if self._secret is not None and not _same(expected, msg.mac):
            return Step(error="bad cluster secret (initiator's HMAC)")
        return Step(done=True)

    def _acceptor_ids(self) -> bytes:
        assert self.peer_id is not None
        return (
            bytes.fromhex(self.peer_id)
            + bytes.fromhex(self._me)
            + _boots(self.peer_boot, self.boot)
        )

    def frame_keys(self) -> tuple[bytes, bytes] | None:
        """(send key, receive key) for sealing frames after the handshake
        (cluster_bus.seal), from the secret and this handshake's nonces and
        ids; None without a secret. Call once the handshake is done."""
        if self._secret is None or self.peer_id is None:
            return None
        if self.outbound:
            nonces, ids = self.nonce + self.peer_nonce, self._me + self.peer_id
        else:
            nonces, ids = self.peer_nonce + self.nonce, self.peer_id + self._me
        to_acceptor, to_initiator = link_keys(self._secret, nonces + bytes.fromhex(ids))
        return (to_acceptor, to_initiator) if self.outbound else (to_initiator, to_acceptor)

    def _mac(self, label: bytes, first: bytes, second: bytes, ids: bytes) -> bytes:
        if self._secret is None:
            return b""
        import hmac  # with a cluster secret only: hashlib maps OpenSSL's digests

        return hmac.digest(self._secret, label + first + second + ids, "sha256")


def _boots(dialer: int, acceptor: int) -> bytes:
    return dialer.to_bytes(8, "big") + acceptor.to_bytes(8, "big")


def _same(a: bytes, b: bytes) -> bool:
    """``hmac.compare_digest``: constant time (only called with a cluster secret)."""
    import hmac

    return hmac.compare_digest(a, b)
