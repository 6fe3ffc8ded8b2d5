"""cluster_bus: the binary node-to-node protocol, membership and PUBLISH forwarding.

Modules: ``frames`` (message dataclasses), ``codec`` (sans-IO encode/decode,
wire layout), ``membership`` (PFAIL/FAIL, gossip; pure state), ``routing``
(PeerTable: peer filters in bit-sliced indexes, the routing decision),
``bus`` (ClusterBus: the asyncio links, the node's ClusterLink),
``local_filters`` (the node's own filters as the bus reads them).
"""
