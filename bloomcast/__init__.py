"""bloomcast: the product's entry points, kept apart from the components they wire.

The components (``router``, ``bloom``, ``cluster_bus``, ``spark``) import
nothing from here, so each can be tested and reused alone; this package is the
composition root that puts them together for a user.

Modules: ``cli`` (the ``bloomcast`` console script, one subcommand per module),
``node_command`` (``bloomcast node``: one Node and its ClusterBus),
``cluster_command`` (``bloomcast cluster up``), ``demo`` (``bloomcast demo``,
the product end to end) and ``testing`` (the process toolkit that tests, the
benchmarks and the demo share: free ports, server launchers, LocalCluster).
"""
