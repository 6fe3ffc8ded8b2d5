"""bench.overload_bench's section from a made-up result (the runs themselves
are tests/integration/test_overload.py's)."""

from bench.overload_bench import overload_markdown


def test_overload_section_rows():
    ledger = {
        "owed": 60066,
        "delivered": 60066,
        "counted": 0,
        "uncounted": 0,
        "duplicated": 0,
        "reordered": 0,
        "not_owed": 0,
        "excused": 0,
        "phantom": 0,
    }
    result = {"runs": [
        {"nodes": 100, "fault": "pause", "fault_s": 30.0, "stopped": 20, "ready_s": 24.1,
         "reconverge_s": 2.1, "forgotten": 0, "suspicions": 22, "fails_sent": 1611,
         "ledger": ledger, "clean": True},
        {"nodes": 100, "fault": "hog", "fault_s": 60.0, "stopped": 0, "ready_s": 31.5,
         "reconverge_s": None, "forgotten": 0, "suspicions": 0, "fails_sent": 0,
         "ledger": ledger, "clean": True},
    ]}  # fmt: skip
    text = overload_markdown(result)
    assert (
        "| 100 | SIGSTOP of 20 nodes for 30 s | 24.1 | 2.1 | 0 | 22 | 1611 | 60066 | 60066 "
        "| 0 | 0 | 0 | 0 | 0 |" in text
    )
    assert "| 100 | busy loops for 60 s | 31.5 | never |" in text
