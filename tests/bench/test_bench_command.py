"""`bloomcast bench`: runs the parts end to end at --quick sizes and writes the
JSON keys and markdown sections it promises (it measures; it asserts no speed)."""

import json

import pytest

from bench.bench_command import parse_sizes
from bloomcast.cli import main

DOC = "# Benchmarks\n\n## spark\n\nspark text, owned by another part\n"


def test_parse_sizes():
    assert parse_sizes(None, (3, 6)) == (3, 6)
    assert parse_sizes("3,6,12", ()) == (3, 6, 12)
    with pytest.raises(ValueError):
        parse_sizes("1", ())


def test_missing_redis_benchmark_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-benchmark on PATH
    code = main(["bench", "single", "--quick", "--out", str(tmp_path)])
    assert code == 1
    assert "apt-get install redis-tools" in capsys.readouterr().err
    assert not (tmp_path / "benchmarks.json").exists()


def test_bad_nodes_flag_is_an_error(tmp_path, capsys):
    code = main(["bench", "cluster", "--quick", "--nodes", "1", "--out", str(tmp_path)])
    assert code == 2
    assert "--nodes" in capsys.readouterr().err


def test_single_quick_writes_json_and_markdown(tmp_path):
    (tmp_path / "benchmarks.md").write_text(DOC)
    code = main(["bench", "single", "--quick", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    assert data["meta"]["command"] == f"bloomcast bench single --quick --out {tmp_path}"
    assert {"redis-benchmark", "bloomcast", "valkey-server"} <= set(data["meta"]["versions"])
    single = data["single_node"]
    cases = {(c["subscribers"], c["pipeline"]) for c in single["publish"]}
    assert cases == {(0, 1), (1, 1), (0, 16), (1, 16)}
    for case in single["publish"]:
        assert case["results"]["bloomcast"]["rps"] > 0
        assert case["results"]["valkey-server"]["rps"] > 0
        assert case["results"]["bloomcast"]["delivered"]
        # the ratio is formed from the two measurements of the same run
        r = case["ratios"]["valkey-server"]
        node, anchor = case["results"]["bloomcast"]["rps"], case["results"]["valkey-server"]["rps"]
        assert r == pytest.approx(node / anchor)
    fan = single["fanout"]["results"]["bloomcast"]
    assert fan["complete"] and fan["messages"] >= fan["expected"]
    profile = single["profile"]
    assert "error" not in profile, profile
    assert profile["samples"] > 0 and profile["self"]
    text = (tmp_path / "benchmarks.md").read_text()
    assert text.startswith(DOC)  # the other part's section is untouched
    assert "## single node" in text and "## How these numbers were taken" in text
    assert "bloomcast / valkey-server" in text
    # bench.cpu_cost's CPU per request, beside redis-server, in the same run
    for row in data["cpu_cost"]["rows"]:
        assert row["bloomcast"] > 0 and row["redis-server"] > 0
    assert "CPU per request (`bench.cpu_cost`)" in text


def test_simulate_quick_calls_the_simulation_and_leaves_its_section(tmp_path):
    doc = DOC + "\n## simulation\n\nowned by the bloom part\n"
    (tmp_path / "benchmarks.md").write_text(doc)
    code = main(["bench", "simulate", "--quick", "--nodes", "20,30", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    assert data["meta"]["parts"] == ["simulation"]
    for n in ("20", "30"):
        sim = data["simulation"]["tail"][n]
        assert sim["broadcast_per_publish"] == int(n) - 1
        assert sim["forwards_per_publish"] >= sim["exact_per_publish"]
    text = (tmp_path / "benchmarks.md").read_text()
    assert "## simulation\n\nowned by the bloom part\n" in text


def test_cluster_quick_reads_bus_counters_and_forms_ratios(tmp_path):
    code = main(["bench", "cluster", "--quick", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    (size,) = data["cluster"]["sizes"]
    assert size["nodes"] == 3
    node, anchor = size["results"]["bloomcast"], size["results"]["valkey-server"]
    for res in (node, anchor):
        bus = res["bus"]
        assert bus["delivered_all"] and bus["bus_publish_received_settled"]
        # counters were read back from CLUSTER INFO: every cross-node delivery
        # took at least one bus PUBLISH
        assert bus["bus_publish_messages"] >= bus["exact_min_per_publish"] * bus["publishes"] > 0
        assert bus["bus_bytes_per_publish"] > 0
        assert res["throughput"]["P1"]["rps"] > 0 and res["throughput"]["P16"]["rps"] > 0
    assert anchor["bus"]["msgs_per_publish"] == 2
    ratios = size["ratios"]["valkey-server"]
    assert ratios["msgs_per_publish"] == pytest.approx(
        node["bus"]["msgs_per_publish"] / anchor["bus"]["msgs_per_publish"]
    )
    assert ratios["throughput_P16"] == pytest.approx(
        node["throughput"]["P16"]["rps"] / anchor["throughput"]["P16"]["rps"]
    )
    assert (tmp_path / "cluster_bus_messages.png").stat().st_size > 1000
    assert "## cluster" in (tmp_path / "benchmarks.md").read_text()
    # bench.forward_latency: PUBLISH on one node reached the subscriber on the other
    for rows in data["forward_latency"]["systems"].values():
        (row,) = rows
        assert 0 < row["received"] <= row["sent"] and 0 < row["p50"] <= row["p99"]


def test_convergence_quick_measures_delays(tmp_path):
    code = main(["bench", "convergence", "--quick", "--out", str(tmp_path)])
    assert code == 0
    data = json.loads((tmp_path / "benchmarks.json").read_text())
    (size,) = data["convergence"]["sizes"]
    for system in ("bloomcast", "valkey-server"):
        res = size["results"][system]
        assert res["trials"] == 5 and res["timeouts"] == 0
        assert 0 < res["p50_ms"] <= res["p99_ms"] <= res["max_ms"]
    assert "## convergence" in (tmp_path / "benchmarks.md").read_text()


def test_a_part_that_fails_to_start_runs_once_more_and_keeps_its_failure():
    from bench.bench_command import _once_more

    tries: list[int] = []

    def part() -> dict[str, int]:
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("node 1 exited with 1")
        return {"rps": 5}

    result = _once_more("faults", part)
    assert len(tries) == 2
    assert result == {"rps": 5, "run_twice": "RuntimeError: node 1 exited with 1"}
    assert _once_more("faults", lambda: {"rps": 6}) == {"rps": 6}  # no failure, no mark
