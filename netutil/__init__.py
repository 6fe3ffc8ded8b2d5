"""netutil: what the router, the cluster bus, the traffic tap and the node's
entry points share, at the bottom of the import graph (issue 50).

Modules: ``acceptor`` (a listening socket whose accept errors are counted and
logged), ``addresses`` (Redis's ``bind`` and announce settings, the listeners
they open, the address checks MEET and nodes.conf share), ``tls`` (the TLS
contexts of the client port and the bus), ``rate_limited_log`` (the node's
one rate-limited log), ``dataplane`` (the node's one choice of data plane and
the list of its compiled modules). Each module is a front door; netutil
imports no other package of bloomcast (docs/architecture.md §2,
tests/test_import_graph.py), but for ``dataplane``'s check that a build is
whole, which imports each compiled module by the name its list gives.
"""
