"""``bloomcast dashboard`` against a real 3-node cluster under traffic, looked
at in headless Chromium (issue 15): the rendered page shows 3 nodes, a
non-zero PUBLISH rate and a saving against broadcast; a screenshot is kept.
Then a node stops answering: the dashboard shows it down and carries on."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bloomcast.testing import LocalCluster
from tests.dashboard.conftest import OUTPUT, Traffic

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


class Rendered(HTMLParser):
    """The text of every element with an id, and the classes of table rows,
    from Chromium's ``--dump-dom`` (the DOM after the page's scripts ran)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.text: dict[str, str] = {}
        self.rows: list[list[str]] = []  # per <tr class="node ...">: its cells' text
        self._open: list[tuple[str, str | None]] = []  # (tag, id)
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("br", "img", "meta", "link", "input", "i"):
            return
        self._open.append((tag, a.get("id")))
        if a.get("id"):
            self.text[a["id"] or ""] = ""
        if tag == "tr" and "node" in (a.get("class") or "").split():
            self._row = [a.get("class") or ""]
            self.rows.append(self._row)
        if tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        if tag == "tr":
            self._row = None
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, ident in self._open:
            if ident:
                self.text[ident] += data
        if self._cell is not None:
            self._cell.append(data + " ")

    def number(self, ident: str) -> float:
        """The number shown in element ``ident`` ("1,234", "62.5 %")."""
        shown = self.text[ident].strip()
        match = re.fullmatch(r"([\d,]+(?:\.\d+)?)(?: %)?", shown)
        assert match, f"#{ident} shows {shown!r}"
        return float(match.group(1).replace(",", ""))


def test_page_shows_nodes_rates_and_saving(cluster_under_traffic: Traffic, dashboard_of, chromium):
    cluster = cluster_under_traffic.cluster
    dash = dashboard_of(cluster.ports[0], "--interval", "1")
    # two polls under traffic before the browser looks: rates exist from the second
    dash.wait("rates", lambda d: (d["cluster"]["publish_per_s"] or 0) > 0 and len(d["history"]) > 1)

    dom = chromium(dash.url, "--virtual-time-budget=4000", "--dump-dom")
    page = Rendered(dom)
    assert page.number("total-nodes") == 3
    assert page.text["total-nodes-up"].strip() == "3 up"
    assert page.number("total-publish") > 0
    assert page.number("total-forwards") > 0
    # only node 0 publishes; it forwards 3 of every 8 broadcast would send: a
    # saving of 62.5 % (within a poll, a batch of publishes may be half counted)
    assert page.number("total-saving") == pytest.approx(62.5, abs=5)
    assert page.number("total-saving-start") == pytest.approx(62.5, abs=2)
    assert page.number("total-broadcast") > page.number("total-forwards")
    assert page.number("total-lost") == 0
    assert page.number("total-cuts") == 0
    assert page.number("total-channels") == 2 and page.number("total-patterns") == 1
    assert len(page.rows) == 3
    assert all(row[0].split() == ["node", "up"] for row in page.rows)
    publisher = next(r for r in page.rows if f":{cluster.ports[0]} (joined)" in r[1])
    assert "2/2" in publisher[3]  # both bus links of node 0 connected
    assert float(publisher[8].replace(",", "")) > 0  # its PUBLISH/s column
    assert float(publisher[11].removesuffix(" %")) == pytest.approx(62.5, abs=5)  # its saving

    OUTPUT.mkdir(parents=True, exist_ok=True)
    shot = OUTPUT / "dashboard.png"
    chromium(dash.url, "--virtual-time-budget=4000", f"--screenshot={shot}",
             "--window-size=1280,900")  # fmt: skip
    assert shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\ndashboard screenshot: {shot}")


def test_a_node_that_stops_answering_is_shown_down(dashboard_of, chromium, tmp_path: Path):
    """Node 1 of 2 killed: shown down, and the survivor, which reaches one node
    of the two it knows or has lost, shows cluster_state fail (issue 26: a node
    cut off from the nodes it had never looks ok), then the node lost."""
    args = [
        "--loglevel",
        "warning",
        "--node-timeout-ms",
        "2000",
        "--cluster-fail-forget-ms",
        "2000",
    ]
    with LocalCluster(2, extra_args=args) as cluster:
        dash = dashboard_of(cluster.ports[0], "--interval", "0.5")
        dash.wait("2 nodes up", lambda d: d["cluster"]["nodes_up"] == 2)
        cluster.kill(1)
        data = dash.wait("node 1 down", lambda d: d["cluster"]["nodes_down"] == 1)
        down = next(n for n in data["nodes"] if n["address"].endswith(f":{cluster.ports[1]}"))
        assert down["up"] is False and down["error"]
        assert dash.process.poll() is None

        def survivor(d):
            return next(n for n in d["nodes"] if n["address"].endswith(f":{cluster.ports[0]}"))

        dash.wait("the survivor's node lost", lambda d: survivor(d).get("nodes_lost") == 1)
        assert survivor(dash.api())["cluster_state"] == "fail"
        page = Rendered(chromium(dash.url, "--virtual-time-budget=3000", "--dump-dom"))
        assert page.number("total-nodes") >= 1
        up = next(row for row in page.rows if row[0] == "node up")
        assert "cluster_state:fail" in " ".join(up) and "1 lost" in " ".join(up), up
