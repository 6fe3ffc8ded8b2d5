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

import ssl

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
