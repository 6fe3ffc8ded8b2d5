"""Prometheus ``/metrics`` and ``/healthz`` of real node processes (issue 15):
scraped and parsed with prometheus-client's text parser while PUBLISH traffic
runs; the counters move by exactly what was sent."""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from bloomcast.testing import free_port, stop_process, wait_port
from tests.integration.conftest import cut_a_slow_subscriber

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def node(*extra: str, bus: bool = True) -> Iterator[tuple[int, int, int]]:
    """(client port, bus port, metrics port) of a running node."""
    port, bus_port, metrics = free_port(), free_port(), free_port()
    argv = [sys.executable, "-m", "bloomcast.cli", "node", "--port", str(port)]
    argv += ["--cluster-port", str(bus_port)] if bus else ["--no-bus"]
    proc = subprocess.Popen(
        [*argv, "--metrics-port", str(metrics), "--loglevel", "warning", *extra],
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        wait_port(port, proc)
        wait_port(metrics, proc)
        yield port, bus_port, metrics
    finally:
        stop_process(proc, timeout=10)


def get(port: int, path: str) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read().decode()
    finally:
        conn.close()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """sample (name, sorted labels) -> value, parsed by prometheus_client.parser."""
    status, kind, text = get(port, "/metrics")
    assert status == 200 and kind.startswith("text/plain; version=")
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(metrics: dict, name: str, **labels: str) -> float:
    return metrics[(name, tuple(sorted(labels.items())))]


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    # a labelled series appears at its first increment: absent before = 0
    previous = before.get((name, tuple(sorted(labels.items()))), 0.0)
    return value(after, name, **labels) - previous


def links(metrics: dict) -> dict[str, float]:
    """peer id -> bloomcast_peer_link_connected."""
    return {
        dict(labels)["peer"]: v
        for (name, labels), v in metrics.items()
        if name == "bloomcast_peer_link_connected"
    }


def test_counters_move_by_the_traffic_sent():
    with ExitStack() as stack:
        port1, bus1, metrics1 = stack.enter_context(node())
        port2, _, metrics2 = stack.enter_context(
            node("--join", f"127.0.0.1:{bus1}", "--subscribe-visibility-timeout", "5000")
        )
        r1, r2 = redis.Redis(port=port1), redis.Redis(port=port2)
        node2_id = r2.execute_command("CLUSTER", "MYID").decode()
        deadline = time.monotonic() + 30
        # node 1's link state for node 2 in CLUSTER NODES, as a labelled gauge
        while links(scrape(metrics1)) != {node2_id: 1.0}:
            assert time.monotonic() < deadline, r1.execute_command("CLUSTER", "NODES")
            time.sleep(0.05)
        while int(r2.cluster("info")["cluster_filters_converged"]) != 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sub = r2.pubsub()
        sub.subscribe("news")  # confirmed once node 1 holds the filter change
        assert sub.get_message(timeout=5)["type"] == "subscribe"
        received = 0
        before1, before2 = scrape(metrics1), scrape(metrics2)
        for batch in range(5):  # scraped between batches: traffic keeps running
            mid1 = scrape(metrics1)
            for i in range(20):
                assert r1.publish("news", f"{batch}-{i}") == 0  # no local receiver
                assert r1.publish("nobody", "x") == 0
            after1 = scrape(metrics1)
            assert delta(mid1, after1, "bloomcast_publish_received_total") == 40
            assert delta(mid1, after1, "bloomcast_forwards_sent_total") == 20
            assert delta(mid1, after1, "bloomcast_forwards_suppressed_total") == 20
            assert delta(mid1, after1, "bloomcast_command_calls_total", command="publish") == 40
        while received < 100:
            message = sub.get_message(ignore_subscribe_messages=True, timeout=5)
            assert message is not None, f"only {received} of 100 delivered"
            received += 1
        after1, after2 = scrape(metrics1), scrape(metrics2)
        assert delta(before1, after1, "bloomcast_publish_received_total") == 200
        assert delta(before1, after1, "bloomcast_forwards_sent_total") == 100
        assert delta(before2, after2, "bloomcast_forwards_received_total") == 100
        assert delta(before2, after2, "bloomcast_messages_delivered_total") == 100
        assert delta(before2, after2, "bloomcast_forwards_false_positive_total") == 0
        assert delta(before1, after1, "bloomcast_forwards_lost_total") == 0
        assert value(after2, "bloomcast_pubsub_clients") == 1
        assert value(after2, "bloomcast_pubsub_channels") == 1
        assert value(after2, "bloomcast_filter_set_bits", filter="channel") > 0
        assert value(after2, "bloomcast_filter_bits", filter="channel") >= 1024
        assert 0 < value(after2, "bloomcast_filter_fill_ratio", filter="channel") < 1
        assert value(after1, "bloomcast_cluster_known_nodes") == 2
        assert value(after1, "bloomcast_cluster_links_connected") >= 1
        assert get(metrics1, "/healthz")[:1] == (200,)
        assert get(metrics2, "/healthz")[:1] == (200,)
        sub.close()


def test_output_buffer_cut_is_counted():

    with node("--pubsub-hard-limit", str(64 * 1024), bus=False) as (port, _, metrics):
        before = scrape(metrics)
        cut_a_slow_subscriber(port)
        after = scrape(metrics)
        assert delta(before, after, "bloomcast_output_buffer_disconnections_total") == 1


def test_healthz_without_a_bus_and_unknown_paths():
    with node(bus=False) as (_, _, metrics):
        assert get(metrics, "/healthz") == (200, "text/plain", "ok\n")
        assert get(metrics, "/nope")[0] == 404


def test_idle_connections_never_turn_healthz_into_503():
    """Issue 49 finding 5: 64 idle TCP connections made /healthz answer 503;
    now each new connection closes the oldest idle one, counted and exported."""
    import socket

    with node(bus=False) as (_, _, metrics):
        idle = [socket.create_connection(("127.0.0.1", metrics), 5) for _ in range(100)]
        try:
            time.sleep(0.2)
            assert get(metrics, "/healthz") == (200, "text/plain", "ok\n")
            after = scrape(metrics)
        finally:
            for s in idle:
                s.close()
        # each of the 36 idle ones over MAX_WAITING (64), then the probe, closed the
        # oldest waiting connection; the probe's place was free again for the scrape
        assert value(after, "bloomcast_http_refused_total", reason="idle_closed") == 37
        assert value(after, "bloomcast_http_refused_total", reason="busy") == 0


@pytest.mark.cluster
def test_healthz_is_503_while_cut_off_from_the_nodes_it_had(tmp_path):
    """Two nodes, one killed for good: the survivor reaches one node of the two
    it knows or has lost, never a majority, so /healthz answers 503 naming
    cluster_state, through FAIL and after the forget (issue 26), while it was
    200 with both up; the lost node shows in its gauge."""
    from bloomcast.testing import LocalCluster

    metrics_ports = [free_port(), free_port()]
    args = ["--node-timeout-ms", "2000", "--cluster-fail-forget-ms", "3000"]
    with LocalCluster(2, extra_args=args, metrics_ports=metrics_ports, log_dir=tmp_path) as c:
        assert get(metrics_ports[0], "/healthz") == (200, "text/plain", "ok\n")
        c.kill(1)
        deadline = time.monotonic() + 20
        while value(scrape(metrics_ports[0]), "bloomcast_cluster_nodes_lost") != 1:
            status, _, body = get(metrics_ports[0], "/healthz")
            if value(scrape(metrics_ports[0]), "bloomcast_cluster_nodes_fail") == 1:
                assert status == 503 and body.startswith("cluster_state:fail"), body
            assert time.monotonic() < deadline, "the killed node was never forgotten"
            time.sleep(0.1)
        status, _, body = get(metrics_ports[0], "/healthz")
        assert (status, body) == (
            503,
            "cluster_state:fail (cut off from the majority; 1 nodes lost)\n",
        )


def test_a_refused_bus_link_is_counted_on_both_sides():
    """Two nodes with different cluster secrets: the one that finds the bad MAC
    and the one whose handshake was ended both count it (issue 30 item 4)."""
    with ExitStack() as stack:
        _, a_bus, a_metrics = stack.enter_context(node("--cluster-secret", "one"))
        seed = ["--join", f"127.0.0.1:{a_bus}", "--cluster-secret", "two"]
        _, _, b_metrics = stack.enter_context(node(*seed))
        deadline = time.monotonic() + 20
        while True:
            a, b = scrape(a_metrics), scrape(b_metrics)
            refused = value(a, "bloomcast_bus_handshakes_refused_total")
            failed = value(b, "bloomcast_bus_auth_failures_total")
            if refused >= 1 and failed >= 1:
                break
            assert time.monotonic() < deadline, (refused, failed)
            time.sleep(0.2)
