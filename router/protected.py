"""Protected mode, as Redis 7.0.15 has it, and its counterpart for the bus.

Clients (``clientAcceptHandler``, ``src/networking.c``): with protected mode
on (the default) and no password for the default user, a connection whose
peer is not loopback (Redis's ``connIsLocal``: an address starting ``127.``
or ``::1``) gets :data:`DENIED` — Redis's text byte for byte, taken from
redis-server 7.0.15 itself, its "Setup a an" included — and is closed before
anything it sent is read. Redis counts it in ``rejected_connections``, not in
``total_connections_received``, and not as an error reply; so does the node,
and it also counts it in ``protected_mode_denied_connections``. Redis 7.0
no longer looks at ``bind`` here: a node bound to loopback simply never sees
such a peer.

The bus (no Redis counterpart: Redis Cluster's bus has no authentication at
all): a node whose bus would listen beyond loopback with no
``--cluster-secret`` refuses to start, unless protected mode is off
(:func:`bus_refusal`, called by ``bloomcast node`` before anything listens).
"""

from __future__ import annotations

DENIED = (
    b"-DENIED Redis is running in protected mode because protected mode is enabled "
    b"and no password is set for the default user. In this mode connections are only "
    b"accepted from the loopback interface. If you want to connect from external "
    b"computers to Redis you may adopt one of the following solutions: 1) Just disable "
    b"protected mode sending the command 'CONFIG SET protected-mode no' from the "
    b"loopback interface by connecting to Redis from the same host the server is "
    b"running, however MAKE SURE Redis is not publicly accessible from internet if you "
    b"do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can "
    b"just disable the protected mode by editing the Redis configuration file, and "
    b"setting the protected mode option to 'no', and then restarting the server. 3) If "
    b"you started the server manually just for testing, restart it with the "
    b"'--protected-mode no' option. 4) Setup a an authentication password for the "
    b"default user. NOTE: You only need to do one of the above things in order for the "
    b"server to start accepting connections from the outside.\r\n"
)


def is_local(peer_ip: str) -> bool:
    """Redis's ``connIsLocal``: the peer address starts ``127.`` or is ``::1``."""
    return peer_ip.startswith("127.") or peer_ip == "::1"


def denies(protected_mode: bool, default_user_has_password: bool, peer_ip: str) -> bool:
    """Whether a new client connection from ``peer_ip`` gets :data:`DENIED`.
    A connection with no IP peer (``""``: not TCP, as Redis's exempt Unix
    sockets, or an in-process transport) is never denied."""
    return (
        protected_mode and not default_user_has_password and peer_ip != "" and not is_local(peer_ip)
    )


def binds_beyond_loopback(bind: str) -> bool:
    """True unless every one of Redis's ``bind`` words is a loopback address
    or ``localhost`` (a ``-`` prefix, optional, counts the same)."""
    return any(_beyond(word.removeprefix("-")) for word in bind.split())


def _beyond(address: str) -> bool:
    if address in ("localhost", "127.0.0.1", "::1"):
        return False
    import ipaddress  # here: 0.3 MB of RSS that a node on loopback never needs

    try:
        return not ipaddress.ip_address(address).is_loopback
    except ValueError:
        return True  # a wildcard (*, ::*) or a name: beyond loopback


def _where(bind: str, port: int) -> str:
    words = bind.split()
    return f"{words[0]}:{port}" if len(words) == 1 else f"{bind} (bus port {port})"


def bus_refusal(
    protected_mode: bool, bind: str, bus_port: int, authenticated: str | bool | None
) -> str | None:
    """The one line ``bloomcast node`` exits with when its bus would be open to
    anyone who reaches it, or None when it may start. ``authenticated``: a
    cluster secret or ``tls-cluster`` (truthy) makes peers prove themselves."""
    if not protected_mode or authenticated or not binds_beyond_loopback(bind):
        return None
    return (
        f"bloomcast node: refusing to start: the cluster bus would listen on "
        f"{_where(bind, bus_port)}, beyond loopback, with no --cluster-secret, so any process "
        f"that reaches it could join the cluster; give every node the same "
        f"--cluster-secret (or --tls-cluster yes), bind to 127.0.0.1, or pass "
        f"--protected-mode no"
    )
