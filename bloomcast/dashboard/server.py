"""The dashboard's HTTP side: one static page and its JSON, HTTP/1.0 on
``asyncio.start_server`` (as bloomcast/metrics.py; no web framework).

``GET /`` the page (``index.html`` beside this module: vanilla JS, no build
step, nothing fetched from elsewhere); ``GET /api/cluster`` the poller's
latest snapshot; ``GET /healthz`` 200 while the dashboard runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from bloomcast.dashboard.poller import Poller
from bloomcast.http_server import SmallHttpServer

PAGE = Path(__file__).with_name("index.html")


class DashboardServer(SmallHttpServer):
    """Serves the page and ``/api/cluster`` from ``poller``."""

    extra_headers = "Cache-Control: no-store\r\n"

    def __init__(self, poller: Poller) -> None:
        super().__init__()
        self.poller = poller
        self.page = PAGE.read_bytes()

    def respond(self, path: str) -> tuple[str, str, bytes]:
        """(status, content type, body) of ``GET path``."""
        if path in ("/", "/index.html"):
            return "200 OK", "text/html; charset=utf-8", self.page
        if path == "/api/cluster":
            body = json.dumps(self.poller.snapshot(), separators=(",", ":")).encode()
            return "200 OK", "application/json", body
        if path == "/healthz":
            return "200 OK", "text/plain", b"ok\n"
        return "404 Not Found", "text/plain", b"try / or /api/cluster\n"
