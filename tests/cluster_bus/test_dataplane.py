"""The bus's compiled forwarding twins and their switch (issue 29).

The long differential run is ``python -m tests.fuzz.fuzz_forwarding``; here:
which link and forwarding a bus picks, a node that falls back to the pure-Python
data plane when the bus's twin is missing, and a short run of the fuzzer. The
cluster's own tests (tests/integration) run on the twins by default and on
the references under ``BLOOMCAST_NO_EXTENSIONS=1``."""

from __future__ import annotations

import importlib
import logging
import os
import sys

import pytest

import cluster_bus
from cluster_bus import dataplane
from cluster_bus.api import BusConfig
from cluster_bus.bus import ClusterBus
from cluster_bus.forwarding import Forwarding
from cluster_bus.link import Link
from cluster_bus.routing import PeerTable
from router import dataplane as node_plane
from router.config import NodeConfig
from router.node import Node
from tests.fuzz import fuzz_forwarding

try:
    _compiled = importlib.import_module("cluster_bus._forwarding")
except ImportError:
    _compiled = None

#: only a build asked to be pure (BLOOMCAST_NO_EXTENSIONS=1 at `uv sync`) may
#: lack the extension; anywhere else test_the_bus_twin_is_built fails
needs_compiled = pytest.mark.skipif(
    _compiled is None and bool(os.environ.get(dataplane.ENV)),
    reason="a pure build (BLOOMCAST_NO_EXTENSIONS=1)",
)


@needs_compiled
def test_the_bus_twin_is_built():
    assert _compiled is not None, "cluster_bus._forwarding was not built (see `uv sync`'s output)"


def test_the_bus_builds_its_links_and_forwarding_from_the_switch(monkeypatch):
    monkeypatch.setenv(dataplane.ENV, "1")
    bus = ClusterBus(Node(NodeConfig(port=0)).pubsub, BusConfig(port=0))
    assert bus.plane.name == "python"
    assert bus.link_class is Link and type(bus.forwarding) is Forwarding
    assert type(bus.routing) is PeerTable
    assert bus.forwarder() == bus.forwarding.forward
    monkeypatch.delenv(dataplane.ENV)
    bus = ClusterBus(Node(NodeConfig(port=0)).pubsub, BusConfig(port=0))
    if _compiled is None:
        assert bus.link_class is Link
        return
    assert bus.plane.name == "compiled"
    assert bus.link_class.__module__ == "cluster_bus._link"
    assert type(bus.forwarding).__module__ == "cluster_bus._forwarding"
    assert type(bus.routing).__module__ == "cluster_bus._routing"
    assert bus.forwarder() == bus.forwarding.forward


@needs_compiled
def test_the_compiled_forwarding_agrees_with_the_reference():
    """A short run of tests/fuzz/fuzz_forwarding.py: the same frames read by
    both links, the same PUBLISH forwarded by both buses, everything each
    wrote and counted compared (the long run: ``python -m
    tests.fuzz.fuzz_forwarding --count 100000``)."""
    assert fuzz_forwarding.run(300, seed=5) == 300


def test_a_missing_bus_twin_is_one_warning_and_the_python_core(monkeypatch, caplog):
    monkeypatch.delenv(dataplane.ENV, raising=False)
    monkeypatch.setitem(sys.modules, "cluster_bus._forwarding", None)  # import fails
    monkeypatch.delattr(cluster_bus, "_forwarding", raising=False)
    with caplog.at_level(logging.WARNING, logger="bloomcast.node"):
        assert node_plane.load() is node_plane.python()
    assert len(caplog.records) == 1
    assert "the whole node runs the pure-Python data plane" in caplog.records[0].getMessage()
    assert node_plane.load().bus is dataplane.python()  # the router's plane carries the bus's
    assert dataplane.load().name == "python"
    assert dataplane.load().Link is Link and dataplane.load().Forwarding is Forwarding
