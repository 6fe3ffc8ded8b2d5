"""PING, ECHO, HELLO, AUTH, RESET, QUIT: the connection's own commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from router import resp
from router.commands.base import Command, Reply
from router.commands.client_view import acl_context, info_line
from router.identity import REDIS_VERSION, SERVER_NAME
from router.parser import string2ll
from router.states import ReplyMode

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext


def ping(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if len(args) > 2:
        return resp.error("ERR wrong number of arguments for 'ping' command")
    # RESP2 in subscribed mode: [pong, arg-or-empty] (Redis pingCommand)
    if client.resp == 2 and (client.channels or client.patterns or client.shard_channels):
        return b"*2\r\n$4\r\npong\r\n" + resp.bulk(args[1] if len(args) == 2 else b"")
    return resp.bulk(args[1]) if len(args) == 2 else resp.PONG


def echo(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.bulk(args[1])


def _login(
    ctx: CommandContext, client: CommandClient, user: bytes, password: bytes, args: list[bytes]
) -> bool:
    """Authenticate ``client`` as ``user`` (Redis's ``ACLAuthenticateUser``):
    a failure is logged in ACL LOG with reason auth and the command's name."""
    found = ctx.acl.authenticate(user, password)
    if found is None:
        line = info_line(client, args)
        ctx.acl.add_log("auth", args[0], user, line, acl_context(client))
        return False
    client.user = found
    client.set_authenticated(True)
    return True


def auth(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if len(args) > 3:
        return resp.error("ERR syntax error")
    if len(args) == 2:
        if not ctx.acl.default_has_password():
            return resp.error(
                "ERR AUTH <password> called without any password configured for the "
                "default user. Are you sure your configuration is correct?"
            )
        user, password = b"default", args[1]
    else:
        user, password = args[1], args[2]
    if not _login(ctx, client, user, password, args):
        return resp.error("WRONGPASS invalid username-password pair or user is disabled.")
    return resp.OK


def hello(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """HELLO [protover [AUTH user pass] [SETNAME name]] (Redis 7.0.15
    ``helloCommand``): options take effect as they are read, then the
    NOAUTH check; the map declares :mod:`router.identity`'s version and
    ``mode`` cluster only for a node with a bus (``ctx.cluster_enabled``)."""
    version = client.resp
    i = 1
    if len(args) >= 2:
        # Redis getLongLongFromObjectOrReply: string2ll's strict rules
        parsed = string2ll(args[1])
        if parsed is None:
            return resp.error("ERR Protocol version is not an integer or out of range")
        version = parsed
        if version not in (2, 3):
            return resp.error("NOPROTO unsupported protocol version")
        i = 2
    while i < len(args):
        opt = args[i].lower()
        more = len(args) - i - 1
        if opt == b"auth" and more >= 2:
            if not _login(ctx, client, args[i + 1], args[i + 2], args):
                return resp.error("WRONGPASS invalid username-password pair or user is disabled.")
            i += 3
        elif opt == b"setname" and more >= 1:
            # set at once, as Redis's clientSetNameOrReply: a later bad option
            # or the NOAUTH below does not undo it
            if not valid_client_name(args[i + 1]):
                return resp.error(
                    "ERR Client names cannot contain spaces, newlines or special characters."
                )
            client.name = args[i + 1]
            i += 2
        else:
            return resp.error(f"ERR Syntax error in HELLO option '{resp.c_string(args[i])}'")
    if not client.authenticated:
        return resp.error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise "
            "the HELLO AUTH <user> <pass> option can be used to authenticate the "
            "client and select the RESP protocol version at the same time"
        )
    client.resp = version
    return resp.encode_value(
        {
            "server": SERVER_NAME,
            "version": REDIS_VERSION,
            "proto": version,
            "id": client.id,
            "mode": "cluster" if ctx.cluster_enabled else "standalone",
            "role": "master",
            "modules": [],
        },
        version,
    )


def valid_client_name(name: bytes) -> bool:
    """Redis ``validateClientName``: printable ASCII 33..126 only."""
    return all(33 <= c <= 126 for c in name)


#: redis.conf ``databases``
DATABASES = 16


def select(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """SELECT db: pub/sub does not depend on the database (as in Redis), so the
    number is only recorded (CLIENT LIST db=). A Redis Cluster node refuses any
    db but 0; bloomcast accepts 0..15 as a standalone Redis does, so clients
    configured with a database (redis-py ``db=1``, node-redis ``database``)
    keep working."""
    db = string2ll(args[1])  # Redis getIntFromObjectOrReply
    if db is None:
        return resp.error("ERR value is not an integer or out of range")
    if not -(2**31) <= db < 2**31:
        return resp.error(
            "ERR value is out of range, value must between -2147483648 and 2147483647"
        )
    if not 0 <= db < DATABASES:
        return resp.error("ERR DB index is out of range")
    client.extras.db = db
    return resp.OK


def reset(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    dropped = ctx.subscriptions.drop(client)  # a future when it runs over several loop iterations
    client.resp = 2
    client.name = b""
    client.extras.tracking = None  # Redis's clearClientConnectionState: disableTracking
    client.set_reply_mode(ReplyMode.ON)
    client.extras.db = 0
    client.extras.readonly = False
    if client.extras.monitor:  # Redis's clearClientConnectionState leaves MONITOR
        ctx.hooks.forget(ctx, client)
    client.end_multi()  # discardTransaction + unwatchAllKeys
    client.user = ctx.acl.default
    client.set_authenticated(not ctx.acl.default_requires_auth())
    return b"+RESET\r\n" if dropped is None else ctx.pubsub.after(dropped, b"+RESET\r\n")


def quit_(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    client.close_after_reply()
    return resp.OK


COMMANDS = (
    Command("ping", -1, ping, "Returns the server's liveliness response.", "connection", ("fast",)),
    Command("echo", 2, echo, "Returns the given string.", "connection", ("fast",)),
    Command("hello", -1, hello, "Handshakes with the server.", "connection", no_auth=True),
    Command("auth", -2, auth, "Authenticates the connection.", "connection", no_auth=True),
    Command("reset", 1, reset, "Resets the connection.", "connection", no_auth=True),
    Command("select", 2, select, "Changes the selected database.", "connection", ("fast",)),
    Command("quit", -1, quit_, "Closes the connection.", "connection", no_auth=True),
)
