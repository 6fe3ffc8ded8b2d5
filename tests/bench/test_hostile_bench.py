"""bench/hostile.py's section: one row per case with both servers' worst
probe wait, time and memory, whether the attacker got Redis's reply, and
issue 28's goal; a 'bench hostile' part in the command."""

from __future__ import annotations

from bench.bench_command import PARTS
from bench.hostile import cases, hostile_markdown
from bench.servers import NODE
from bloomcast.testing import REDIS


def figures(wait: float, seconds: float, idle: float, rss: float, reply: list[int]) -> dict:
    return {
        "seconds": seconds,
        "worst_ping": wait,
        "rss_idle_mb": idle,
        "rss_mb": rss,
        "peak_mb": rss + 1,
        "reply": reply,
        "collector": {"gc_pause_max_ms": "1.50", "gc_pauses_over_50ms": 0},
    }


def test_section_has_a_row_per_case_with_both_servers_and_the_goal():
    result = {
        "scale": 1.0,
        "servers": {
            NODE: {
                "UNSUBSCRIBE x": figures(0.004, 2.0, 28, 40, [10, 2]),
                "SUBSCRIBE y": figures(0.2, 1.0, 28, 30, [10, 2]),
            },
            REDIS: {
                "UNSUBSCRIBE x": figures(0.8, 1.0, 8, 18, [10, 2]),
                "SUBSCRIBE y": figures(0.1, 1.0, 8, 10, [12, 2]),
            },
        },
    }
    text = hostile_markdown(result)
    row = next(line for line in text.splitlines() if line.startswith("| UNSUBSCRIBE x"))
    assert row == "| UNSUBSCRIBE x | 4.0 | 800.0 | 2,000 | 1,000 | 40 | 18 | 41 | 19 | yes | yes |"
    row = next(line for line in text.splitlines() if line.startswith("| SUBSCRIBE y"))
    assert row.endswith("| no | no (wait) |")  # 200 ms; another reply
    assert "| UNSUBSCRIBE x | 1.50 | 0 |" in text  # the node's collector


def test_without_redis_the_anchor_columns_say_so():
    result = {"servers": {NODE: {"r": figures(0.001, 0.1, 28, 30, [1, 1])}}}
    row = next(line for line in hostile_markdown(result).splitlines() if line.startswith("| r "))
    assert row.split(" | ")[2] == "-" and row.endswith("| - | - |")


def test_every_case_of_issue_28_is_a_row():
    labels = " / ".join(case.label for case in cases())
    for words in (
        "SUBSCRIBE 1,000,000",
        "UNSUBSCRIBE (bare) of 1,000,000",
        "SUNSUBSCRIBE (bare)",
        "of 500,000",
        "PUNSUBSCRIBE 1,000,000 names given",
        "PUBSUB NUMSUB",
        "close at once",
        "PUNSUBSCRIBE 1,000 patterns each",
        "30,000 patterns",
        "100,000 patterns",
        "50,000",
        "slow subscribers",
        "pipelined SUBSCRIBE bursts",
        "PUBSUB CHANNELS",
    ):
        assert words in labels, words


def test_hostile_is_a_part_of_bench_all():
    assert "hostile" in PARTS


def test_issue_41s_bounds_are_a_second_table_beside_redis():
    from bench.hostile_bounds import CASES

    pause, peer, flood, disk, *_ = (label for label, _, _ in CASES)
    node_pause = {"worst_ping": 0.012, "rss_idle_mb": 30, "rss_mb": 30, "peak_mb": 64, "cut": True}
    redis_pause = {**node_pause, "worst_ping": 0.001, "rss_idle_mb": 12, "peak_mb": 47}
    node_peer = {"worst_ping": 0.002, "rss_idle_mb": 30, "rss_mb": 40, "peak_mb": 41,
                 "sent": 10, "delivered": 8, "counted_lost": 2}  # fmt: skip
    disk_figures = {"worst_ping": 0.014, "rss_idle_mb": 50, "rss_mb": 55, "peak_mb": 55,
                    "sent": 100, "written": 90, "dropped": 10, "disk_errors": 0}  # fmt: skip
    result = {
        "servers": {NODE: {}},
        "bounds": {
            "scale": 1.0,
            "cases": {
                pause: {NODE: node_pause, REDIS: redis_pause},
                peer: {NODE: node_peer, REDIS: {**node_peer, "counted_lost": None}},
                disk: {NODE: disk_figures},
            },
        },
    }
    lines = hostile_markdown(result).splitlines()
    row = next(line for line in lines if line.startswith("| CLIENT PAUSE ALL"))
    assert row.endswith("| 12.0 | 1.0 | 30 / 30 / 64 | 12 / 30 / 47 | cut | cut |")
    row = next(line for line in lines if line.startswith("| a peer stops"))
    assert row.endswith("| 8 of 10 delivered; nothing counted |")
    assert "2 counted lost | 8 of 10 delivered; nothing counted |" in row
    row = next(line for line in lines if line.startswith("| a slow disk"))
    assert row.endswith("| 90 written + 10 dropped (counted) of 100; 0 disk errors | - |")
    assert "1,000,000 pipelined SUBSCRIBE" in flood


def test_issue_49s_monitor_cases_are_judged_on_their_peak_beside_redis():
    """The MONITOR cases' goal: the peak RSS the case added at most 2x Redis's,
    the worst wait <= Redis's (+ one probe period) or <= 100 ms."""
    labels = [case.label for case in cases() if case.notes.get("peak_ratio")]
    assert len(labels) == 2 and all("MONITOR attached" in label for label in labels)
    text, binary = labels

    def monitor(wait: float, grown: float) -> dict:
        return {**figures(wait, 0.1, 30, 31, [4, 1]), "peak_growth_mb": grown, "peak_ratio": 2.0}

    result = {
        "servers": {
            NODE: {text: monitor(0.034, 12.0), binary: monitor(0.090, 40.0)},
            REDIS: {text: monitor(0.630, 14.4), binary: monitor(0.020, 19.0)},
        }
    }
    lines = hostile_markdown(result).splitlines()
    assert next(line for line in lines if line.startswith(f"| {text} | 34.0")).endswith("| yes |")
    row = next(line for line in lines if line.startswith(f"| {binary} | 90.0"))
    assert row.endswith("| no (RSS) |")  # 40 MB > 2 x 19; 90 ms: under 100 ms
    assert f"| {text} | 12.0 | 14.4 | 0.83 |" in lines
    assert f"| {binary} | 40.0 | 19.0 | 2.11 |" in lines


def test_idle_metrics_connections_are_a_row_of_the_bounds_table():
    from bench.hostile_bounds import CASES

    label = next(label for label, _, _ in CASES if "idle connections to the metrics" in label)
    figures = {"worst_ping": 0.02, "rss_idle_mb": 36, "rss_mb": 39, "peak_mb": 39,
               "healthz_total": 21, "healthz_ok": 21, "healthz_worst_ms": 10.4, "idle": 100,
               "renewed": 2100, "idle_closed": 2137}  # fmt: skip
    result = {"servers": {NODE: {}}, "bounds": {"scale": 1.0, "cases": {label: {NODE: figures}}}}
    row = next(line for line in hostile_markdown(result).splitlines() if "idle conn" in line)
    assert row.endswith(
        "| /healthz 21 of 21 answered 200 (slowest 10 ms); 2,137 idle connections closed "
        "to make room, 2,100 reopened | - |"
    )


def test_stalled_spool_downloads_are_a_row_of_the_bounds_table():
    from bench.hostile_bounds import CASES

    label = next(label for label, _, _ in CASES if "spool downloads that stop" in label)
    figures = {"worst_ping": 0.008, "rss_idle_mb": 42, "rss_mb": 43, "peak_mb": 48,
               "healthz_total": 148, "healthz_ok": 148, "healthz_worst_ms": 12.2,
               "file_bytes": 8_400_000, "stalled": 64, "cut": 48, "busy": 16}  # fmt: skip
    result = {"servers": {NODE: {}}, "bounds": {"scale": 1.0, "cases": {label: {NODE: figures}}}}
    row = next(line for line in hostile_markdown(result).splitlines() if "spool down" in line)
    assert row.endswith(
        "| /healthz 148 of 148 answered 200 (slowest 12 ms); 48 of 64 stalled downloads "
        "(8.4 MB) cut by the drain timeout, 16 refused as busy | - |"
    )


def test_the_bus_flood_row_says_what_each_server_closed_counted_and_answered():
    from bench.hostile_bounds import CASES, bounds_markdown

    label = next(label for label, _, _ in CASES if "bare connections" in label)
    base = {"worst_ping": 0.011, "rss_idle_mb": 33, "rss_mb": 33, "peak_mb": 34, "flood": 400,
            "connected": 400, "new_client_ms": 9.0, "cluster_ok": True}  # fmt: skip
    node = {**base, "closed": 400, "counted": 384, "new_client_ping": True, "maxclients": 120}
    anchor = {**base, "closed": 0, "counted": None, "new_client_ping": False,
              "cluster_ok": False, "maxclients": 224}  # fmt: skip
    table = bounds_markdown({"scale": 1.0, "cases": {label: {NODE: node, REDIS: anchor}}})
    row = next(line for line in table.splitlines() if line.startswith("| 400 bare"))
    assert (
        "| maxclients 120; 400 of 400 closed by the node (384 at accept, counted); a new "
        "client's PING answered in 9 ms; every node ok | maxclients 224; 0 of 400 closed by "
        "the node (none counted); a new client's PING failed; cluster_state not ok |"
    ) in row
