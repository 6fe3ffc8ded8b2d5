"""bench/plots.py: the cluster chart's caption names the workload, the sizes
and the commit; the chart is drawn from stored results without a benchmark."""

import json

from bench.plots import caption, main

RESULT = {
    "plan": {"channels_per_node": 4, "publishes_per_node": 2000},
    "versions": {"bloomcast": "bloomcast abc1234", "valkey-server": "Valkey 9.1.2"},
    "sizes": [
        {
            "nodes": n,
            "results": {
                system: {
                    "bus": {
                        "msgs_per_publish": msgs,
                        "bus_bytes_per_publish": 10.0 * msgs + 1,
                        "exact_min_per_publish": 0.66,
                    }
                }
                for system, msgs in (("bloomcast", 0.66), ("valkey-server", n - 1))
            },
        }
        for n in (3, 6)
    ],
}


def test_caption_names_workload_sizes_and_commit():
    text = " ".join(caption(RESULT).split())
    assert "4 x N channels" in text and "publishes 2000 times" in text
    assert "N = 3, 6." in text
    assert "bloomcast commit abc1234" in text and "Valkey 9.1.2" in text


def test_redrawn_from_the_json(tmp_path):
    source = tmp_path / "benchmarks.json"
    source.write_text(json.dumps({"cluster": RESULT}))
    png = tmp_path / "chart.png"
    assert main([str(source), str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    source.write_text("{}")
    assert main([str(source), str(png)]) == 1
