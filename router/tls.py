"""Client TLS with Redis's settings (``tls-port``, ``tls-cert-file``,
``tls-key-file``, ``tls-ca-cert-file``, ``tls-auth-clients``; Redis 7.0.15
``src/tls.c``): a TLS client port beside the plain one, both serving the same
node. ``tls-auth-clients`` is ``yes`` by default, as in Redis: a client must
present a certificate signed by the CA (``optional``: may; ``no``: is not
asked). A client that does not complete the handshake (a plain client on the
TLS port, a certificate the CA did not sign) is closed without a reply, as
Redis does, and counted in INFO ``tls_handshake_failures``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any, cast

from netutil.tls import TlsSession
from router.config import NodeConfig

_VERIFY = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "no": ssl.CERT_NONE}


class TlsConfigError(Exception):
    """The TLS settings cannot serve (one line for the operator)."""


def server_context(config: NodeConfig) -> ssl.SSLContext:
    """The TLS context of the client port, from the node's settings."""
    if not config.tls_cert_file or not config.tls_key_file:
        raise TlsConfigError("--tls-port needs --tls-cert-file and --tls-key-file")
    mode = config.tls_auth_clients
    if mode not in _VERIFY:
        raise TlsConfigError(f"--tls-auth-clients must be yes, no or optional, not {mode!r}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # redis.conf tls-protocols default
    try:
        context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
        if config.tls_ca_cert_file:
            context.load_verify_locations(config.tls_ca_cert_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the TLS certificates: {exc}") from exc
    if mode != "no" and not config.tls_ca_cert_file:
        raise TlsConfigError("--tls-auth-clients yes/optional needs --tls-ca-cert-file")
    context.verify_mode = _VERIFY[mode]
    return context


class TlsTransport:
    """What a :class:`router.client.Client` on the TLS port writes to: the
    subset of ``asyncio.Transport`` it uses, encrypting into the raw one."""

    #: CLUSTER SLOTS / NODES tell a client on this transport TLS ports
    tls = True

    def __init__(self, raw: asyncio.Transport, session: TlsSession) -> None:
        self._raw = raw
        self._session = session

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._raw.is_closing():
            self._raw.write(self._session.encrypt(bytes(data)))

    def write_eof(self) -> None:
        self._raw.close()  # TLS has no half-close: close_notify is not sent, as Redis

    def close(self) -> None:
        self._raw.close()

    def abort(self) -> None:
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._raw.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._raw.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()


class TlsClientProtocol(asyncio.Protocol):
    """The TLS client port's connection: the TLS handshake (sans-IO,
    :class:`netutil.tls.TlsSession`), then a plain client protocol over
    :class:`TlsTransport`. A connection that does not complete the handshake
    is closed (after the alert, if TLS produced one) and ``failed()`` is
    called: INFO ``tls_handshake_failures``."""

    def __init__(
        self, context: ssl.SSLContext, inner: asyncio.Protocol, failed: Callable[[str], None]
    ) -> None:
        self._session = TlsSession(context, server_side=True)
        self._inner = inner
        self._failed = failed
        self._raw: asyncio.Transport | None = None
        self._connected = False
        self._counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        raw = self._raw
        assert raw is not None
        try:
            plain = self._session.receive(data)
        except ssl.SSLError as exc:
            alert = self._session.outgoing()
            if alert:
                raw.write(alert)
            raw.close()
            if not self._connected:
                self._fail(str(exc))
            return
        out = self._session.outgoing()
        if out:
            raw.write(out)
        if not self._connected and self._session.established:
            self._connected = True
            self._inner.connection_made(cast(asyncio.Transport, TlsTransport(raw, self._session)))
        if plain:
            self._inner.data_received(plain)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connected:
            self._inner.connection_lost(exc)
        else:
            self._fail("connection closed during the TLS handshake")

    def _fail(self, reason: str) -> None:
        if not self._counted:
            self._counted = True
            self._failed(reason)

    def pause_writing(self) -> None:
        if self._connected:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._connected:
            self._inner.resume_writing()
