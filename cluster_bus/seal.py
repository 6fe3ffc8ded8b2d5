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
    16s tag   MAC(seq | frames), 128 bits: keyed BLAKE2s (RFC 7693 section
              3.3, a MAC by construction) for a batch under SMALL_BATCH
              bytes, HMAC-SHA256 truncated (RFC 2104, RFC 4868's
              HMAC-SHA-256-128) from there; each with its own subkey
    frames    the batch: whole frames, as they would go out unsealed

Two MACs for speed, measured: a single forwarded PUBLISH is a ~60-byte
batch, where one keyed BLAKE2s call costs ~0.7 us against ~1.9 us for HMAC
(two SHA-256 passes and their setup); a large batch is hashed faster by
SHA-256, which CPUs accelerate (64 KiB: ~38 us against ~75 us).

One SEALED frame carries a whole coalesced batch (what one ``transport.write``
sends), so the MAC costs one tag per send call, not per frame. The receiver
checks the MAC and that ``seq`` is exactly the next before it decodes a byte
of the batch: an injected or altered frame fails the MAC, a replayed one the
sequence (a frame replayed on another link fails the MAC: another key). Any
failure raises :class:`SealError` and the link is closed and counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster_bus.codec import (
    _SEALED,
    _TYPES,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    VERSION,
    BusProtocolError,
    encode_sealed,
)
from cluster_bus.frames import Message, MsgType

if TYPE_CHECKING:
    from cluster_bus.decoder import FrameDecoder

TAG_SIZE = 16
_T_SEALED = int(MsgType.SEALED)
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
    import hmac  # with a cluster secret only: hashlib maps OpenSSL's digests (~0.6 MB)

    prk = hmac.digest(secret, transcript, "sha256")
    return (
        hmac.digest(prk, b"bloomcast frames initiator\x01", "sha256"),
        hmac.digest(prk, b"bloomcast frames acceptor\x01", "sha256"),
    )


#: below this many bytes a batch is tagged with keyed BLAKE2s, else HMAC-SHA256
SMALL_BATCH = 4096


class _Mac:
    """The tag function of one direction of one link (two subkeys of its key)."""

    __slots__ = ("_blake", "_blake2s", "_hmac", "_new_hmac", "_sha256", "same")

    def __init__(self, key: bytes) -> None:
        # imported with the first sealed link, not at start (hashlib maps
        # OpenSSL's digests, ~0.6 MB on every node)
        import hmac
        from hashlib import blake2s, sha256

        self._blake2s, self._sha256, self._new_hmac = blake2s, sha256, hmac.new
        #: hmac.compare_digest: constant-time comparison of two tags
        self.same = hmac.compare_digest
        self._blake = hmac.digest(key, b"blake2s subkey", "sha256")
        self._hmac = hmac.digest(key, b"hmac-sha256 subkey", "sha256")

    def tag(self, seq: int, batch: bytes) -> bytes:
        head = seq.to_bytes(8, "big")
        if len(batch) < SMALL_BATCH:
            return self._blake2s(head + batch, key=self._blake, digest_size=TAG_SIZE).digest()
        mac = self._new_hmac(self._hmac, head, self._sha256)
        mac.update(batch)
        return mac.digest()[:TAG_SIZE]


class Sealer:
    """The sending half: seals each batch with the next sequence number."""

    __slots__ = ("_mac", "_sender", "seq")

    def __init__(self, key: bytes, sender: int) -> None:
        self._mac = _Mac(key)
        self._sender = sender  # our short id, in the SEALED header
        self.seq = 0

    def seal(self, batch: bytes) -> bytes:
        """``batch`` (whole frames) as one or more SEALED frames."""
        if len(batch) > MAX_BATCH:
            return b"".join(
                self.seal(batch[i : i + MAX_BATCH]) for i in range(0, len(batch), MAX_BATCH)
            )
        self.seq = seq = self.seq + 1
        return encode_sealed(self._sender, seq, self._mac.tag(seq, batch), batch)


class SealedDecoder:
    """The receiving half, in place of a link's :class:`FrameDecoder` once the
    keys are known. It parses the outer stream itself (only SEALED frames may
    come, from the link's peer), checks each tag and sequence number before
    anything inside is decoded, then feeds the batch to ``inner``, which
    decodes the frames inside with the link's limits (a frame may span two
    batches). ``outer`` is the link's decoder until now: the bytes it holds
    after the handshake's last frame are taken over."""

    __slots__ = ("_buf", "_mac", "expect_sender", "inner", "seq")

    def __init__(self, key: bytes, outer: FrameDecoder, inner: FrameDecoder) -> None:
        self._mac = _Mac(key)
        self.inner = inner
        self.expect_sender = inner.expect_sender
        self._buf = outer.take_buffer()
        self.seq = 0  # the last sequence number accepted

    @property
    def buffered(self) -> int:
        return len(self._buf) + self.inner.buffered

    def feed(self, data: bytes) -> list[Message]:
        buf = self._buf + data if self._buf else data
        out: list[Message] = []
        end, pos = len(buf), 0
        while end - pos >= HEADER_SIZE:
            magic, version, mtype, _flags, length, sender = HEADER.unpack_from(buf, pos)
            if magic != MAGIC or version != VERSION:
                raise BusProtocolError(f"bad frame header {buf[pos : pos + 4]!r}")
            if mtype != _T_SEALED:
                name = MsgType(mtype).name if mtype in _TYPES else str(mtype)
                raise SealError(f"unsealed {name} frame on a sealed link")
            if sender != self.expect_sender:
                raise BusProtocolError(f"sender {sender:08x} is not the link's peer")
            if not SEAL_OVERHEAD <= length <= SEAL_OVERHEAD + MAX_BATCH:
                raise BusProtocolError(f"SEALED frame length {length}")
            stop = pos + HEADER_SIZE + length
            if stop > end:
                break
            seq, tag = _SEALED.unpack_from(buf, pos + HEADER_SIZE)
            out += self._open(seq, tag, buf[pos + HEADER_SIZE + SEAL_OVERHEAD : stop])
            pos = stop
        self._buf = buf[pos:] if pos < end else b""
        return out

    def _open(self, seq: int, tag: bytes, batch: bytes) -> list[Message]:
        if not self._mac.same(self._mac.tag(seq, batch), tag):
            raise SealError("bad frame MAC (injected, altered, or from another link)")
        if seq != self.seq + 1:
            raise SealError(f"SEALED sequence {seq}, expected {self.seq + 1} (a replay)")
        self.seq = seq
        return self.inner.feed(batch)
