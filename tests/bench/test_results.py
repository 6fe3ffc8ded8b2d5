"""bench/results.py: the shared docs/benchmarks.md is edited section by section
(other parts' sections survive byte for byte), the JSON merged key by key."""

import json

from bench.results import (
    cluster_markdown,
    fmt_ratio,
    replace_section,
    table,
    update_json,
    update_markdown,
)

DOC = """# Benchmarks

## bloom

bloom text, kept as is
  with odd spacing\t

## simulation

| a | b |
|---|---|

## spark

spark text
"""


def test_replace_section_keeps_other_sections_exactly():
    new = replace_section(DOC, "simulation", "new simulation body")
    assert "new simulation body" in new
    assert "| a | b |" not in new
    head, _, _ = DOC.partition("## simulation")
    assert new.startswith(head)
    assert new.endswith("## spark\n\nspark text\n")


def test_replace_section_appends_when_absent_and_is_idempotent():
    once = replace_section(DOC, "cluster", "cluster table v1")
    assert once.startswith(DOC)
    assert once.endswith("## cluster\n\ncluster table v1\n\n")
    twice = replace_section(once, "cluster", "cluster table v2")
    assert twice.count("## cluster") == 1
    assert "v1" not in twice and "v2" in twice
    assert twice.startswith(DOC)


def test_replace_section_does_not_match_a_longer_heading():
    text = "# B\n\n## cluster bus\n\nkeep\n"
    out = replace_section(text, "cluster", "mine")
    assert "## cluster bus\n\nkeep\n" in out
    assert out.endswith("## cluster\n\nmine\n\n")


def test_update_markdown_and_json_on_disk(tmp_path):
    md = tmp_path / "benchmarks.md"
    md.write_text(DOC)
    update_markdown(md, {"single node": "S", "convergence": "C"})
    text = md.read_text()
    assert text.startswith(DOC)
    assert "## single node\n\nS\n" in text and "## convergence\n\nC\n" in text

    js = tmp_path / "benchmarks.json"
    js.write_text(json.dumps({"simulation": {"n": 1}, "cluster": {"old": True}}))
    data = update_json(js, {"cluster": {"new": True}})
    assert data == {"simulation": {"n": 1}, "cluster": {"new": True}}
    assert json.loads(js.read_text()) == data


def test_table_and_ratio_format():
    assert table(["a", "b"], [["1", "2"]]) == "| a | b |\n|---|---|\n| 1 | 2 |"
    assert fmt_ratio(None) == "-"
    assert fmt_ratio(0.25) == "0.25x"


def test_cluster_markdown_shows_ratios():
    bus = {
        "msgs_per_publish": 0.5,
        "exact_min_per_publish": 0.5,
        "broadcast_per_publish": 2,
        "bus_bytes_per_publish": 30.0,
        "delivered_all": True,
    }
    anchor_bus = dict(bus, msgs_per_publish=2.0, bus_bytes_per_publish=4540.0)
    tp = {"P1": {"rps": 100.0}, "P16": {"rps": 400.0}}
    result = {
        "plan": {"channels_per_node": 4, "publishes_per_node": 10, "clients": 50},
        "sizes": [
            {
                "nodes": 3,
                "results": {
                    "bloomcast": {"bus": bus, "throughput": tp},
                    "redis-server": {"bus": anchor_bus, "throughput": tp},
                },
                "ratios": {
                    "exact_min": {"msgs_per_publish": 1.0},
                    "redis-server": {
                        "msgs_per_publish": 0.25,
                        "bus_bytes_per_publish": 30 / 4540,
                        "throughput_P1": 1.0,
                        "throughput_P16": 1.0,
                    },
                },
            }
        ],
    }
    text = cluster_markdown(result)
    assert "| 3 | bloomcast / redis-server | 0.25x | 0.007x | 1.00x | 1.00x |" in text
    assert "| 3 | bloomcast | 0.500 | 0.500 | 2 | 1.00x | 30.0 | yes |" in text


def test_profile_markdown_drops_the_entry_chain_and_c_frames():
    from bench.results import profile_markdown

    profile = {
        "samples": 100,
        "pipeline": 16,
        "self": [["write (router/client.py)", 0.4]],
        "inclusive": [
            ["main (router/cli.py)", 0.98],
            ["run (uvloop/__init__.py)", 0.98],
            ["uv__read (stream.c)", 0.96],
            ["data_received (router/client.py)", 0.95],
            ["write (router/client.py)", 0.4],
        ],
    }
    text = profile_markdown(profile)
    inclusive = text.split("Inclusive time")[1]
    assert "main (router/cli.py)" not in inclusive
    assert "uv__read" not in inclusive  # C frames are in the self-time table only
    assert "`data_received (router/client.py)` 95.0%" in inclusive
    assert len(text.splitlines()) == 4  # docs/benchmarks.md stays under 600 lines
    assert profile_markdown({"error": "py-spy not found"}).startswith("Profile: not taken")


def test_hot_path_bench_drives_the_real_client(capsys):
    # the in-process hot-path tool: every case runs through the real parser,
    # Client, ClusterBus and bus Link, and its output names each case (no speed
    # is asserted; receive_us raises unless every forwarded frame was delivered)
    from bench.hot_path import CountingTransport, main, run

    result = run(batches=20, repeats=1)
    assert set(result) == {
        "parse, reference (pure Python)",
        "parse, hiredis fast path",
        "parse, compiled twin",  # uv sync builds it (tests/router/test_dataplane.py)
        "Client, PUBLISH, 0 subscribers",
        "Client, PUBLISH, 1 subscribers",
        "Client, PUBLISH, 10 subscribers",
        "ClusterBus.forward_publish, 1 peer",
        "bus link, PUBLISH received, 1 subscriber",
    }
    assert all(us > 0 for us in result.values())
    assert main(["--batches", "5", "--repeats", "1"]) == 0
    assert "x the reference" in capsys.readouterr().out
    assert CountingTransport().get_write_buffer_size() == 0
