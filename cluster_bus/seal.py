"""Frame authentication after the handshake: every batch of frames sealed with
a MAC over the link's own sequence number (sans-IO: bytes in, bytes out).

The handshake (:mod:`cluster_bus.handshake`) proves that both ends hold the
cluster secret; without more, a process that can reach a link's TCP stream
could still inject, alter or replay frames after it. So, with a cluster
secret and no ``tls-cluster`` (TLS already gives integrity), each side
derives two per-link keys from the handshake (HKDF-Expand of RFC 5869 with
HMAC-SHA256, one key per direction, bound to both nonces and both node ids,
so no key is ever used on two links) and sends everything as SEALED frames::

    header (type SEALED, sender = our short id), then the body:
    u64 seq   the link's batch counter in this direction: 1, 2, 3 ...
    16s mac   HMAC-SHA256(key, seq | frames)[:16]  (RFC 2104; 128-bit tag, as
              RFC 4868's HMAC-SHA-256-128)
    frames    the batch: whole frames, as they would go out unsealed

One SEALED frame carries a whole coalesced batch (what one ``transport.write``
sends), so the MAC costs one HMAC per send call, not per frame. The receiver
checks the MAC and that ``seq`` is exactly the next before it decodes a byte
of the batch: an injected or altered frame fails the MAC, a replayed one the
sequence (a frame replayed on another link fails the MAC: another key). Any
failure raises :class:`SealError` and the link is closed and counted.
"""

from __future__ import annotations

import hmac
from hashlib import sha256

from cluster_bus.codec import BusProtocolError, encode_sealed
from cluster_bus.decoder import FrameDecoder
from cluster_bus.frames import Message, Sealed

TAG_SIZE = 16
SEAL_OVERHEAD = 8 + TAG_SIZE  # SEALED body bytes before the batch
#: a batch is split into SEALED frames of at most this many bytes of frames
#: (a frame may span two: the receiver decodes the concatenated batches)
MAX_BATCH = 1 << 20


class SealError(BusProtocolError):
    """A SEALED frame whose MAC or sequence number is wrong, or a frame that is
    not sealed where one must be: the link is not to be trusted."""


def link_keys(secret: bytes, transcript: bytes) -> tuple[bytes, bytes]:
    """(initiator -> acceptor key, acceptor -> initiator key), 32 bytes each.

    HKDF (RFC 5869) with HMAC-SHA256: PRK = HMAC(secret, transcript), then
    one Expand block per direction with the direction as ``info``.
    ``transcript``: both nonces and both node ids, as the handshake MACs them."""
    prk = hmac.digest(secret, transcript, "sha256")
    return (
        hmac.digest(prk, b"bloomcast frames initiator\x01", "sha256"),
        hmac.digest(prk, b"bloomcast frames acceptor\x01", "sha256"),
    )


def _tag(key: bytes, seq: int, batch: bytes) -> bytes:
    mac = hmac.new(key, seq.to_bytes(8, "big"), sha256)
    mac.update(batch)
    return mac.digest()[:TAG_SIZE]


class Sealer:
    """The sending half: seals each batch with the next sequence number."""

    __slots__ = ("_key", "_sender", "seq")

    def __init__(self, key: bytes, sender: int) -> None:
        self._key = key
        self._sender = sender  # our short id, in the SEALED header
        self.seq = 0

    def seal(self, batch: bytes) -> bytes:
        """``batch`` (whole frames) as one or more SEALED frames."""
        if len(batch) > MAX_BATCH:
            return b"".join(
                self.seal(batch[i : i + MAX_BATCH]) for i in range(0, len(batch), MAX_BATCH)
            )
        self.seq = seq = self.seq + 1
        return encode_sealed(self._sender, seq, _tag(self._key, seq, batch), batch)


class SealedDecoder:
    """The receiving half, in place of a link's :class:`FrameDecoder` once the
    keys are known: the link's decoder (``outer``, bytes already buffered
    kept) now yields only SEALED frames; each is checked, then its batch fed
    to ``inner``, which decodes the frames inside with the link's limits."""

    __slots__ = ("_key", "inner", "outer", "seq")

    def __init__(self, key: bytes, outer: FrameDecoder, inner: FrameDecoder) -> None:
        self._key = key
        self.outer = outer
        outer.max_body = SEAL_OVERHEAD + MAX_BATCH
        outer.expect_sender = inner.expect_sender
        self.inner = inner
        self.seq = 0  # the last sequence number accepted

    @property
    def buffered(self) -> int:
        return self.outer.buffered + self.inner.buffered

    def feed(self, data: bytes) -> list[Message]:
        out: list[Message] = []
        for msg in self.outer.feed(data):
            out += self.open(msg)
        return out

    def open(self, msg: Message) -> list[Message]:
        """The frames inside one SEALED frame, once its MAC and sequence check."""
        if type(msg) is not Sealed:
            raise SealError(f"unsealed {type(msg).__name__} frame on a sealed link")
        if not hmac.compare_digest(_tag(self._key, msg.seq, msg.batch), msg.tag):
            raise SealError("bad frame MAC (injected, altered, or from another link)")
        if msg.seq != self.seq + 1:
            raise SealError(f"SEALED sequence {msg.seq}, expected {self.seq + 1} (a replay)")
        self.seq = msg.seq
        return self.inner.feed(msg.batch)
