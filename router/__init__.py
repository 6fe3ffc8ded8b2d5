"""router: the Redis-compatible pub/sub node (RESP server, subscriptions, routing)."""
