"""``tls-cluster``: the bus over TLS with mutual authentication, as Redis 7.0
runs its cluster bus (``src/tls.c``: one certificate and CA for every TLS
connection of a node, ``SSL_VERIFY_PEER`` both ways).

Both ends present the node's certificate (``tls-cert-file`` / ``tls-key-file``)
and require the peer's to be signed by the cluster CA (``tls-ca-cert-file``):
a process without a CA-signed certificate cannot open a bus link. Host names
are not checked (nodes meet by address, as in Redis). TLS gives integrity,
so frames are not sealed as well (cluster_bus.seal); a cluster secret still
authenticates the handshake. A link whose TLS handshake fails is closed and
counted (``cluster_stats_tls_handshake_failures``).
"""

from __future__ import annotations

import ssl


class BusTlsError(ValueError):
    """The tls-cluster settings cannot serve (one line for the operator)."""


def bus_contexts(
    cert_file: str | None, key_file: str | None, ca_file: str | None
) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(context of accepted links, context of dialled links), both requiring a
    CA-signed certificate from the peer. Raises :class:`BusTlsError`."""
    if not cert_file or not key_file or not ca_file:
        raise BusTlsError(
            "--tls-cluster yes needs --tls-cert-file, --tls-key-file and --tls-ca-cert-file"
        )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False  # peers are met by address
    for context in (server, client):
        context.minimum_version = ssl.TLSVersion.TLSv1_2  # redis.conf tls-protocols default
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_cert_chain(cert_file, key_file)
            context.load_verify_locations(ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise BusTlsError(f"cannot load the tls-cluster certificates: {exc}") from None
    return server, client


class TlsSession:
    """TLS on one bus link, sans-IO (``ssl.SSLObject`` over two memory BIOs, as
    the ``ssl`` docs' "Memory BIO Support" describes): bytes from the socket
    in, application bytes out, and what to send back. The link owns the
    socket; a failed handshake is an ``ssl.SSLError`` from :meth:`receive`,
    which the link counts, so no TLS failure is silent.

    Why not asyncio's ``start_tls``: on an accepted connection the peer's
    ClientHello may reach the protocol before ``start_tls`` takes the
    transport over; here every byte goes through the session."""

    __slots__ = ("_in", "_obj", "_out", "established")

    def __init__(self, context: ssl.SSLContext, server_side: bool) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=server_side)
        self.established = False
        if not server_side:
            self._handshake()  # the ClientHello, waiting in outgoing()

    def _handshake(self) -> None:
        try:
            self._obj.do_handshake()
        except ssl.SSLWantReadError:
            return
        self.established = True

    def receive(self, data: bytes) -> bytes:
        """Feed bytes from the socket; the application bytes they complete.
        Raises ``ssl.SSLError`` (a handshake or record the peer got wrong)."""
        self._in.write(data)
        if not self.established:
            self._handshake()
            if not self.established:
                return b""
        chunks = []
        while True:
            try:
                chunk = self._obj.read(1 << 16)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def encrypt(self, data: bytes) -> bytes:
        """``data`` as TLS records (only once :attr:`established`)."""
        self._obj.write(data)
        return self._out.read()

    def outgoing(self) -> bytes:
        """Handshake bytes to send now (b"" when none)."""
        return self._out.read()
