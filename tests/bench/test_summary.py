"""The summary of docs/benchmarks.md is generated from one run's benchmarks.json
(bench/summary.py, issue 48): rendered here from a small benchmarks.json of a
``bloomcast bench --quick`` run (tests/bench/benchmarks_quick.json), no server
started. Its sentences follow the ratios, its tables the figures, and a part
taken by another commit is refused."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench.summary import (
    HEADING,
    LONG_SECTIONS,
    SHORT_SECTIONS,
    cpu_cost_markdown,
    forward_latency_markdown,
    main,
    summary_markdown,
)

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "benchmarks_quick.json"
PAGE = HERE.parents[1] / "docs" / "benchmarks.md"
LONG = (
    "## scale\n\nCommand: `bloomcast bench scale --nodes 10,50` (2026-12-02T03:40:35+00:00, "
    "bloomcast fdbc1a2, load average at the end 1.00, 1.00, 1.00).\n\nscale tables\n"
)


@pytest.fixture
def data() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def _block(text: str, title: str) -> list[str]:
    """The bullet lines under ``**title**``."""
    m = re.search(rf"^\*\*{re.escape(title)}\*\*.*?\n((?:- .*\n)+)", text, re.M)
    assert m, title
    return m[1].splitlines()


def test_the_first_lines_name_the_run_and_say_where_bloomcast_wins_and_costs_more(data):
    text = summary_markdown(data, LONG)
    first = text.splitlines()[0]
    assert first.startswith(
        "From one run: `bloomcast bench all --quick --out /tmp/bp-quick` at **bloomcast "
        "e24e40b**, 2026-12-08T01:28:40+00:00 "
    )
    wins, costs = _block(text, "Where bloomcast wins:"), _block(text, "Where it costs more:")
    # the fixture's ratios, bloomcast / Valkey at N = 3 (no Redis Cluster in a --quick run)
    assert "- `-P 1`, each channel on one node, on 3 nodes: 0.64x Valkey's PUBLISH/s" in costs
    assert "- `-P 16`, each channel on one node, on 3 nodes: 0.87x Valkey's PUBLISH/s" in costs
    assert (
        "- `-P 16`, Zipf-popular channels and patterns, on 3 nodes: 1.24x Valkey's PUBLISH/s"
        in wins
    )
    assert any(line.startswith("- bus messages per PUBLISH, each channel") for line in wins)
    assert any("one node, `-P 1`, 0 subscribers: 2.00x redis-server's CPU" in c for c in costs)
    assert text.index("**Where bloomcast wins:**") < text.index("**Where it costs more:**")
    # the long parts keep their own runs, read from the page
    assert "*scale* (`bloomcast bench scale --nodes 10,50`, bloomcast fdbc1a2, 2026-12-02)" in text


def test_the_sentences_follow_the_ratios(data):
    ratios = data["cluster"]["sizes"][0]["ratios"]["valkey-server"]
    ratios["throughput_P1"] = 1.5
    ratios["throughput_P16"] = 1.02
    text = summary_markdown(data)
    assert "- `-P 1`, each channel on one node, on 3 nodes: 1.50x Valkey's PUBLISH/s" in _block(
        text, "Where bloomcast wins:"
    )
    even = re.search(r"^\*\*About even\*\* \(within 5%\): (.*)$", text, re.M)
    assert (
        even
        and "`-P 16`, each channel on one node, on 3 nodes: 1.02x Valkey's PUBLISH/s" in (even[1])
    )
    assert not any("each channel on one node, on 3 nodes" in c and "PUBLISH/s" in c
                   for c in _block(text, "Where it costs more:"))  # fmt: skip


def test_the_tables_hold_the_run_s_figures(data):
    text = summary_markdown(data)
    size = data["cluster"]["sizes"][0]["results"]
    node_bytes = round(size["bloomcast"]["bus"]["bus_bytes_per_publish"])
    valkey_bytes = round(size["valkey-server"]["bus"]["bus_bytes_per_publish"])
    row = f"| 3 | 0.66 / 2.00 / - | {node_bytes} / {valkey_bytes} / - | -; 0.64x | -; 0.87x | "
    assert row + "1.30 / 2.00 / - | -; 0.32x | -; 1.24x |" in text
    assert "![bus messages and bus bytes per PUBLISH" in text
    assert (
        "| 0 | 0.86x (0.91x) | 2.00x (20.00 / 10.00) | 0.73x (0.80x) | 1.00x (4.00 / 4.00) |"
        in (text)
    )
    vis = data["visibility"]["sizes"][0]["results"]["bloomcast"]
    assert f"| 3 | {vis['subscribe_p50_ms']:.2f} / " in text
    # the sections' own tables of the two printed measures
    cpu = cpu_cost_markdown(data["cpu_cost"])
    assert "| -P | 0 subscribers | 1 subscriber |" in cpu
    assert "| 1 | 20.00 / 10.00 / 20.00 (2.00x) | 15.00 / 15.00 (1.00x) |" in cpu
    latency = forward_latency_markdown(data["forward_latency"])
    assert "| PUBLISH/s | bloomcast | Valkey |" in latency
    lat = data["forward_latency"]["systems"]["bloomcast"][0]
    assert (
        f"| 200 | {lat['p50'] / 1e3:.2f} / {lat['p99'] / 1e3:.2f} / {lat['max'] / 1e3:.2f} ("
        in (latency)
    )


def test_a_part_taken_by_another_commit_is_refused(data):
    data["visibility"]["versions"]["bloomcast"] = "bloomcast 0000000"
    with pytest.raises(ValueError, match="visibility comes from bloomcast 0000000"):
        summary_markdown(data)


def test_the_command_rewrites_the_summary_and_the_short_parts_and_nothing_else(
    data, tmp_path, capsys
):
    page, js = tmp_path / "benchmarks.md", tmp_path / "benchmarks.json"
    page.write_text(PAGE.read_text())
    js.write_text(json.dumps(data))
    assert main(["--json", str(js), "--page", str(page)]) == 0
    before, after = PAGE.read_text(), page.read_text()
    assert after.startswith(before[: before.index(f"## {HEADING}")])
    assert "at **bloomcast e24e40b**, 2026-12-08T01:28:40+00:00" in after
    opening = "Command: `bloomcast bench all --quick --out /tmp/bp-quick` (2026-12-08T01:28:40"
    for heading in SHORT_SECTIONS:
        assert f"## {heading}\n\n{opening}" in after, heading
    assert "Last run: `bloomcast bench all --quick --out /tmp/bp-quick` at 2026-12-08T01:28:40" in (
        _section(after, "How these numbers were taken")
    )
    for heading in (*LONG_SECTIONS, "bloom", "spark"):
        assert _section(after, heading) == _section(before, heading), heading
    assert (tmp_path / "cluster_bus_messages.png").stat().st_size > 1000
    bad = copy.deepcopy(data)
    bad["cluster"]["versions"]["bloomcast"] = "bloomcast 0000000"
    js.write_text(json.dumps(bad))
    assert main(["--json", str(js), "--page", str(page)]) == 2
    assert "cluster comes from bloomcast 0000000" in capsys.readouterr().err
    assert page.read_text() == after


def _section(text: str, heading: str) -> str:
    m = re.search(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", text, re.M | re.S)
    assert m, heading
    return m[0]
