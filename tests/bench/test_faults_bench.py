"""bench/faults.py's section: the ledger row per system, scenario and subscriber,
and whether the system counted the loss (Redis Cluster cannot)."""

from bench.faults import SCENARIOS, _counted_cell, faults_markdown


def verdict(name, expected, lost):
    return {
        "subscriber": name,
        "expected": expected,
        "delivered": expected - lost,
        "lost": lost,
        "duplicated": 0,
        "reordered": 0,
        "lost_numbers": [],
    }


def test_counted_cell_says_whether_the_count_matches_the_ledger():
    assert _counted_cell(5, 5) == "yes: 5 (= ledger)"
    assert _counted_cell(5, 4) == "yes: 4 (differs!)"
    assert _counted_cell(5, None) == "no counter: lost silently"
    assert _counted_cell(0, None) == "no counter"


def test_section_has_a_row_per_system_scenario_and_subscriber_and_the_command():
    row_b = {"subscribers": {"channel": verdict("channel", 100, 7)}, "counted": 7}
    row_r = {"subscribers": {"channel": verdict("channel", 100, 9)}, "counted": None}
    result = {
        "scenarios": SCENARIOS,
        "results": {
            "bloomcast": {s: row_b for s in SCENARIOS},
            "redis": {s: row_r for s in SCENARIOS},
        },
    }
    text = faults_markdown(result)
    assert "| bloomcast | reset | channel | 100 | 93 | 7 | 0 | 0 | yes: 7 (= ledger) |" in text
    assert "| redis | beyond | channel | 100 | 91 | 9 | 0 | 0 | no counter: lost silently |" in text
    assert text.count("\n| bloomcast |") == len(SCENARIOS)
    assert "uv run bloomcast bench faults" in text
