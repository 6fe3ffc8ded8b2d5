"""CLUSTER, DBSIZE, FLUSHALL/FLUSHDB, FUNCTION FLUSH: what Redis Cluster clients
and tools (redis-cli --cluster, Redis's own test suite) expect of a node.

Replies follow Redis 7.0.15 byte for byte (``clusterCommand`` in redis
``src/cluster.c``): CLUSTER SLOTS is ``[start, end, [endpoint, port, id,
metadata]]`` per range (the metadata: the IP and hostname that are not the
endpoint, a flat array in RESP2, a map in RESP3); CLUSTER SHARDS is one map
per shard (``slots``, ``nodes``: id, port, tls-port, ip, endpoint, hostname,
role, replication-offset, health). The endpoint follows
``cluster-preferred-endpoint-type``; ports and addresses are what nodes
announce (``cluster-announce-*``), and a client on the TLS port is told TLS
ports, as Redis 7.0 does in a TLS cluster (there, only with ``tls-cluster
yes``; a bloomcast node tells each node's TLS port whenever it has one). The slot map is the bus's
(:mod:`cluster_bus.slots`): the same on every node with the same membership.
A node holds no keys: DBSIZE, COUNTKEYSINSLOT and GETKEYSINSLOT answer 0 and
nothing, after Redis's argument checks. A node without a bus (``--no-bus``)
is a standalone server: every CLUSTER subcommand answers Redis 7.0.15's
"This instance has cluster support disabled".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cluster_bus.api import SlotRange
from cluster_bus.slots import CLUSTER_SLOTS, key_slot, shard_id
from netutil.addresses import client_port
from router import resp
from router.commands.base import Command, Handler, Reply, subcommand_table
from router.commands.tracking import flush_invalidations
from router.parser import string2ll

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext

_NOT_INTEGER = resp.error("ERR value is not an integer or out of range")


def cluster_info(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    text = "".join(f"{k}:{v}\r\n" for k, v in ctx.view.cluster_info().items())
    return resp.verbatim(text.encode(), client.resp)


def cluster_myid(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.bulk(ctx.node_id.encode())


def _tls(client: CommandClient) -> bool:
    """The client came over the TLS port (router/tls.py ``TlsTransport``)."""
    return bool(getattr(client.transport, "tls", False))


def cluster_nodes(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    text = "".join(line + "\n" for line in ctx.link.nodes_lines(_tls(client)))
    return resp.verbatim(text.encode(), client.resp)


def _endpoint(ctx: CommandContext, r: SlotRange) -> str | None:
    """``cluster-preferred-endpoint-type`` (Redis 7.0 ``getPreferredEndpoint``):
    the IP, the hostname ("?" when the node has none), or no endpoint."""
    kind = ctx.config.cluster_preferred_endpoint_type
    if kind == "hostname":
        return r.hostname or "?"
    if kind == "unknown-endpoint":
        return None
    return r.host


def cluster_slots(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """``[start, end, [endpoint, port, id, {ip | hostname that is not the
    endpoint}]]`` per range (Redis 7.0 ``addNodeToNodeReply``); the port is
    the TLS one for a client on the TLS port."""
    kind = ctx.config.cluster_preferred_endpoint_type
    tls = _tls(client)
    ranges = ctx.link.slot_map()
    out = [resp.array_header(len(ranges))]
    for r in ranges:
        meta: list[tuple[bytes, bytes]] = []
        if kind != "ip":
            meta.append((b"ip", r.host.encode()))
        if kind != "hostname" and r.hostname:
            meta.append((b"hostname", r.hostname.encode()))
        endpoint = _endpoint(ctx, r)
        out.append(
            b"*3\r\n%b%b*4\r\n%b%b%b%b"
            % (
                resp.integer(r.start),
                resp.integer(r.end),
                resp.null(client.resp) if endpoint is None else resp.bulk(endpoint.encode()),
                resp.integer(client_port(r.port, r.tls_port, tls)),
                resp.bulk(r.node_id.encode()),
                resp.map_header(len(meta), client.resp)
                + b"".join(resp.bulk(k) + resp.bulk(v) for k, v in meta),
            )
        )
    return b"".join(out)


def cluster_shards(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """One map per shard (Redis 7.0 ``addNodeDetailsToShardReply``): the
    plaintext ``port`` and the ``tls-port`` where the node has them."""
    shards: list[Any] = []
    for r in ctx.link.slot_map():
        details: dict[str, Any] = {"id": r.node_id}
        if r.port:
            details["port"] = r.port
        if r.tls_port:
            details["tls-port"] = r.tls_port
        details["ip"] = r.host
        details["endpoint"] = _endpoint(ctx, r) or ""
        if r.hostname:
            details["hostname"] = r.hostname
        details.update({"role": "master", "replication-offset": 0, "health": "online"})
        shards.append({"slots": [r.start, r.end], "nodes": [details]})
    return resp.encode_value(shards, client.resp)


def cluster_myshardid(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """Redis 7.2's: this node's shard (each node is its own shard)."""
    return resp.bulk(shard_id(ctx.node_id).encode())


def cluster_forget(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    error = ctx.link.forget_node(args[2].decode(errors="replace"))
    return resp.OK if error is None else resp.error(f"ERR {error}")


def cluster_meet(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """CLUSTER MEET <ip> <port> [<bus-port>]: Redis 7.0's checks and wording
    (an IP address, not a host name; bus port = port + 10000 by default), then
    the bus dials it like a ``--join`` seed."""
    if len(args) > 5:
        return resp.error(
            f"ERR unknown subcommand or wrong number of arguments for "
            f"'{args[1].decode(errors='replace')}'. Try CLUSTER HELP."
        )
    port = string2ll(args[3])
    if port is None:
        return resp.error(
            f"ERR Invalid TCP base port specified: {args[3].decode(errors='replace')}"
        )
    bus_port = port + 10000
    if len(args) == 5:
        given = string2ll(args[4])
        if given is None:
            return resp.error(
                f"ERR Invalid TCP bus port specified: {args[4].decode(errors='replace')}"
            )
        bus_port = given
    from netutil.addresses import normal_ip

    try:
        ip = normal_ip(args[2].decode())
    except UnicodeDecodeError:
        ip = None
    if ip is None or not 0 < port <= 65535 or not 0 < bus_port <= 65535:
        address = b"%b:%b" % (args[2], args[3])
        return resp.error(f"ERR Invalid node address specified: {address.decode(errors='replace')}")
    ctx.link.meet(ip, bus_port, port)
    return resp.OK


def cluster_links(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    links: list[Any] = [
        {
            "direction": link.direction,
            "node": link.node,
            "create-time": link.create_time,
            "events": link.events,
            "send-buffer-allocated": link.send_buffer_allocated,
            "send-buffer-used": link.send_buffer_used,
        }
        for link in ctx.link.links()
    ]
    return resp.encode_value(links, client.resp)


def cluster_keyslot(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.integer(key_slot(args[2]))


def _slot(arg: bytes) -> int | bytes:
    """A slot argument as Redis's getSlotOrReply reads it, or the error reply."""
    slot = string2ll(arg)
    if slot is None:
        return _NOT_INTEGER
    if not 0 <= slot < CLUSTER_SLOTS:
        return resp.error("ERR Invalid slot")
    return slot


def cluster_countkeysinslot(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    slot = _slot(args[2])
    return slot if isinstance(slot, bytes) else resp.integer(0)


def cluster_getkeysinslot(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    slot, count = string2ll(args[2]), string2ll(args[3])
    if slot is None or count is None:
        return _NOT_INTEGER
    if not 0 <= slot < CLUSTER_SLOTS or count < 0:
        return resp.error("ERR Invalid slot or number of keys")
    return resp.array_header(0)


_HELP = (
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "COUNTKEYSINSLOT <slot>",
    "    Return the number of keys in <slot>.",
    "FORGET <node-id>",
    "    Remove a node from the cluster.",
    "GETKEYSINSLOT <slot> <count>",
    "    Return key names stored by current node in a slot.",
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "MEET <ip> <port> [<bus-port>]",
    "    Connect nodes into a working cluster.",
    "MYID",
    "    Return the node id.",
    "MYSHARDID",
    "    Return the node's shard id.",
    "NODES",
    "    Return cluster configuration seen by node. Output format:",
    "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
    "SLOTS",
    "    Return information about slots range mappings. Each range is made of:",
    "    start, end, master and replicas IP addresses, ports and ids",
    "SHARDS",
    "    Return information about slot range mappings and the nodes associated with them.",
    "LINKS",
    "    Return information about all network links between this node and its peers.",
    "    Output format is an array where each array element is a map containing attributes "
    "of a link",
    "HELP",
    "    Prints this help.",
)


def cluster_help(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """Redis 7.0.15's lines for the subcommands this node has."""
    return resp.array_header(len(_HELP)) + b"".join(resp.simple(line) for line in _HELP)


def dbsize(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return resp.integer(0)  # a pub/sub node holds no keys


def flush(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """FLUSHALL / FLUSHDB [ASYNC|SYNC]: nothing to flush; Redis's argument check
    (test suites and tools call them between tests), and Redis's "every key"
    invalidation to the clients that track keys (:mod:`router.commands.tracking`)."""
    if len(args) > 2 or (len(args) == 2 and args[1].lower() not in (b"async", b"sync")):
        return resp.error("ERR syntax error")
    return resp.OK + flush_invalidations(ctx, client)


def function_flush(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """FUNCTION FLUSH [ASYNC|SYNC]: a node has no functions to delete."""
    if len(args) > 3 or (len(args) == 3 and args[2].lower() not in (b"async", b"sync")):
        return resp.error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
    return resp.OK


def _container(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    raise AssertionError("a container always dispatches to a subcommand")


_DISABLED = resp.error("ERR This instance has cluster support disabled")


def _cluster_only(handler: Handler) -> Handler:
    """A CLUSTER subcommand of a node with a bus; a node without one answers
    as a standalone Redis 7.0.15 (``clusterCommand``'s first check, after the
    command's existence and arity)."""

    def checked(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
        return handler(ctx, client, args) if ctx.cluster_enabled else _DISABLED

    return checked


def _sub(name: str, arity: int, handler: Handler, summary: str) -> Command:
    return Command(f"cluster|{name}", arity, _cluster_only(handler), summary, "cluster")


COMMANDS = (
    Command(
        "cluster",
        -2,
        _container,
        "A container for Redis Cluster commands.",
        "cluster",
        subcommands=subcommand_table(
            _sub(
                "countkeysinslot",
                3,
                cluster_countkeysinslot,
                "Returns the number of keys in a hash slot.",
            ),
            _sub(
                "getkeysinslot", 4, cluster_getkeysinslot, "Returns the key names in a hash slot."
            ),
            _sub("forget", 3, cluster_forget, "Forgets a node."),
            _sub("help", 2, cluster_help, "Returns helpful text about the different subcommands."),
            _sub("info", 2, cluster_info, "Returns information about the state of a node."),
            _sub("keyslot", 3, cluster_keyslot, "Returns the hash slot for a key."),
            _sub(
                "links", 2, cluster_links, "Returns a list of all TCP links to and from peer nodes."
            ),
            _sub("meet", -4, cluster_meet, "Forces a node to handshake with another node."),
            _sub("myid", 2, cluster_myid, "Returns the ID of a node."),
            _sub("myshardid", 2, cluster_myshardid, "Returns the shard ID of a node."),
            _sub("nodes", 2, cluster_nodes, "Returns the cluster configuration for a node."),
            _sub("shards", 2, cluster_shards, "Returns the mapping of cluster slots to shards."),
            _sub("slots", 2, cluster_slots, "Returns the mapping of cluster slots to nodes."),
        ),
    ),
    Command("dbsize", 1, dbsize, "Returns the number of keys in the database.", "keyspace"),
    Command("flushall", -1, flush, "Removes all keys from all databases.", "keyspace"),
    Command(
        "function",
        -2,
        _container,
        "A container for function commands.",
        "scripting",
        subcommands=subcommand_table(
            Command(
                "function|flush",
                -2,
                function_flush,
                "Deletes all library and functions.",
                "scripting",
            ),
        ),
    ),
    Command("flushdb", -1, flush, "Remove all keys from the current database.", "keyspace"),
)
