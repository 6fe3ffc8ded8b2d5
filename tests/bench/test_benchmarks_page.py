"""docs/benchmarks.md is a page a user reads (issue 43): under 600 lines, its
first screen a table against Redis Cluster and a plot that exists, and every
section a bench writes still there, so that a rerun rewrites it in place and
leaves the summary as it was. The summary and the short parts' sections come
from one run, whose commit they all name; the long parts name theirs (issue 48)."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

from bench.results import update_markdown
from bench.summary import HEADING as SUMMARY
from bench.summary import LONG_SECTIONS, SHORT_SECTIONS
from bench.zipf_report import HEADING as ZIPF_HEADING

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGE = DOCS / "benchmarks.md"
FIRST_SCREEN = 60

#: the ``## `` sections the benches write (bench/bench_command.py's
#: write_outputs and meta_markdown, bench/bloom.py, bench/simulate.py,
#: bench/membership_sim.py)
WRITTEN = (
    "How these numbers were taken",
    "single node",
    "cluster",
    ZIPF_HEADING,
    "convergence",
    "subscribe visibility",
    "faults",
    "hostile input",
    "scale",
    "chaos",
    "overload",
    "bloom",
    "simulation",
    "membership simulation",
    "membership under a slow CPU",
)


def test_the_page_is_under_600_lines():
    lines = PAGE.read_text().splitlines()
    assert len(lines) < 600, f"{len(lines)} lines: move history to git or trim the summary"


def test_the_first_screen_compares_with_redis_cluster_and_valkey_in_a_table_and_a_plot():
    screen = PAGE.read_text().splitlines()[:FIRST_SCREEN]
    headers = [
        line for line, rule in pairwise(screen) if line.startswith("|") and rule.startswith("|---")
    ]
    assert any("Redis Cluster" in h and "Valkey" in h for h in headers), headers
    plots = [m for line in screen for m in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", line)]
    assert plots, "no plot on the first screen"
    for name in plots:
        assert (DOCS / name).is_file(), name


def test_every_image_and_anchor_of_the_page_resolves():
    text = PAGE.read_text()
    for name in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (DOCS / name).is_file(), name
    slugs = {
        re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", text, re.M)
    }
    for anchor in re.findall(r"\]\(#([^)]+)\)", text):
        assert anchor in slugs, anchor


def test_every_section_a_bench_writes_is_there_once():
    text = PAGE.read_text()
    for heading in WRITTEN:
        found = re.findall(rf"^## {re.escape(heading)}[ \t]*$", text, re.M)
        assert len(found) == 1, heading


def test_a_bench_rewriting_its_sections_leaves_the_summary_and_the_rest_in_place(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text(PAGE.read_text())
    before = page.read_text().splitlines()
    update_markdown(page, {heading: f"rewritten {heading}" for heading in WRITTEN})
    after = page.read_text().splitlines()
    assert after[:FIRST_SCREEN] == before[:FIRST_SCREEN]
    assert len(after) < len(before)  # replaced in place, none appended
    headings = [line for line in after if line.startswith("## ")]
    assert headings == [line for line in before if line.startswith("## ")]


def _top_line_commit(text: str, heading: str) -> tuple[str, str]:
    """(commit, date) of the ``Command: `...` (date, bloomcast <commit>, ...`` line
    that opens the ``## heading`` section."""
    m = re.search(
        rf"^## {re.escape(heading)}\n\nCommand: `[^`]+` \(([^,]+), bloomcast (\w+),", text, re.M
    )
    assert m, f"the {heading} section does not open with its command and commit"
    return m.group(2), m.group(1)


def test_the_summary_and_the_short_parts_come_from_one_named_commit():
    text = PAGE.read_text()
    summary = re.search(rf"^## {re.escape(SUMMARY)}\n\n(.*?)(?=^## )", text, re.M | re.S)
    assert summary, "no summary"
    first = r"From one run: `bloomcast bench[^`]*` at \*\*bloomcast (\w+)\*\*, (\S+) "
    m = re.match(first, summary[1])
    assert m, "the summary's first line does not name its run's commit"
    commit, date = m.groups()
    for heading in SHORT_SECTIONS:
        assert _top_line_commit(text, heading) == (commit, date), heading


def test_the_long_parts_name_their_own_commit():
    text = PAGE.read_text()
    for heading in LONG_SECTIONS:
        commit, _ = _top_line_commit(text, heading)
        assert re.fullmatch(r"[0-9a-f]{7,40}", commit), (heading, commit)
