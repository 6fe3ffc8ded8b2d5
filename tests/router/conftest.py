"""The router tests' fixtures: ``plane``, each data plane a node can run
(:mod:`router.dataplane`), so a test of the hot classes runs over both
implementations, as aiohttp's tests run over its C and Python parsers."""

from __future__ import annotations

import os

import pytest

from router import dataplane


def _compiled() -> dataplane.Plane | None:
    try:
        return dataplane.compiled()
    except ImportError:
        if os.environ.get(dataplane.ENV):
            return None  # a pure build (BLOOMCAST_NO_EXTENSIONS=1 at `uv sync`) may lack it
        raise  # anywhere else the compiled plane is built: its absence is a failure


@pytest.fixture(params=["python", "compiled"])
def plane(request: pytest.FixtureRequest) -> dataplane.Plane:
    """The pure-Python data plane, then the compiled plane (skipped only on a pure build)."""
    if request.param == "python":
        return dataplane.python()
    compiled = _compiled()
    if compiled is None:
        pytest.skip("a pure build (BLOOMCAST_NO_EXTENSIONS=1): no compiled plane")
    return compiled
