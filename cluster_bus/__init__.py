"""cluster_bus: the binary node-to-node protocol, membership and PUBLISH forwarding."""
