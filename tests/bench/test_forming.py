"""bench.forming on three nodes: ready, the start-up work read per node, an
idle second with no suspicion."""

from bench.forming import form, show


def test_three_nodes_form_and_their_work_is_read():
    row = form(3, 60.0, 1.0, None)
    assert row["ready_s"] is not None and row["ready_s"] < 60
    work = row["work"]
    # two peers each: a MEET per link we dialled, two filters asked for per peer
    assert work["cluster_stats_messages_meet_sent"]["mean"] == 2
    assert work["cluster_stats_messages_filter_request_sent"]["mean"] >= 4
    assert row["cpu_s_per_node"]["mean"] > 0
    idle = row["idle"]
    assert idle["cluster_stats_suspicions"] == 0 and idle["pfail_or_fail_at_end"] == 0
    assert "N = 3: ready in" in show(row)
