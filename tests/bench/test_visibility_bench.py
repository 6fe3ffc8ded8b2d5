"""bench/visibility.py (issue 27 item 1) and bench/chaos_bench.py's section
(issue 26): the quick visibility part measures what it names on real
clusters; the chaos section renders a run's ledger."""

from __future__ import annotations

import json

import pytest

from bench.chaos_bench import chaos_markdown
from bench.servers import NODE
from bench.visibility import OFF
from bloomcast.cli import main

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def test_visibility_quick_measures_every_system(tmp_path):
    assert main(["bench", "visibility", "--quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())["visibility"]
    (size,) = data["sizes"]
    results = size["results"]
    assert {NODE, OFF, "valkey-server"} <= set(results)
    for system, r in results.items():
        assert 0 < r["subscribe_p50_ms"] <= r["subscribe_p99_ms"], system
        assert r["churn_per_s"] > 0 and r["expected"] == 12, system
        assert r["churn_many_per_s"] > 0, system
    # the default and the anchors deliver what is published right after the reply
    for system in (NODE, "valkey-server"):
        assert results[system]["delivered"] == 12, system
    stopped = data["stopped_peer"]
    assert max(stopped["waits_ms"]) < 1500 and stopped["timeouts"] >= 1
    text = (tmp_path / "benchmarks.md").read_text()
    assert "## subscribe visibility" in text and "One peer stopped" in text


def test_chaos_section_has_a_row_per_seed():
    totals = {
        "owed": 51680,
        "delivered": 48190,
        "counted": 3490,
        "uncounted": 0,
        "duplicated": 0,
        "reordered": 0,
        "phantom": 0,
        "not_owed": 7,
        "excused": 5,
    }
    run = {
        "seed": 11,
        "faults": {"kill": 2, "pause": 3},
        "longest_fault_s": 15.1,
        "totals": totals,
        "reconverge_s": 1.4,
    }
    text = chaos_markdown({"runs": [run]})
    row = next(line for line in text.splitlines() if line.startswith("| 11 "))
    assert row == (
        "| 11 | 2 kill, 3 pause | 15.1 s | 51,680 | 48,190 | 3,490 | 0 | 0 | 0 | 0 | 7 | 5 "
        "| 1.4 s |"
    )
