"""Options shared by every test folder.

``--long``: also run the tests marked ``long`` (fault runs of minutes: the
chaos seeds, the 120 s cut at the default node timeout). They are deselected
otherwise, so ``uv run pytest`` (and CI) stays within its time budget; each
has a short sibling that CI runs.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long", action="store_true", help="also run the tests marked long (minutes each)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long"):
        return
    keep = [item for item in items if "long" not in item.keywords]
    dropped = [item for item in items if "long" in item.keywords]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
