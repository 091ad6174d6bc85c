"""A real HTTP server on 127.0.0.1 serving a directory, for tests that fetch (fetch, nix, build).

``LocalServer(root)`` serves ``root`` on a random port, records request paths, answers
``redirects`` (path -> Location) with 302, and stops with ``stop()``.
"""

from __future__ import annotations

import http.server
import threading
from functools import partial
from pathlib import Path


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files from the server's directory, plus ``server.redirects`` (path -> location)."""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.server.requests.append(self.path)
        location = self.server.redirects.get(self.path)
        if location is not None:
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *args):
        pass


class LocalServer:
    """A ThreadingHTTPServer on 127.0.0.1 (random port) serving ``root``; ``stop()`` closes it."""

    def __init__(self, root: Path):
        self.root = root
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(root)))
        self.httpd.redirects = {}
        self.httpd.requests = []
        self.port = self.httpd.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        self.running = True

    @property
    def requests(self) -> list[str]:
        return self.httpd.requests

    def put(self, rel: str, data: bytes) -> str:
        """Write ``data`` at ``root/rel``; return its URL."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return f"{self.base}/{rel}"

    def stop(self) -> None:
        if self.running:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join(5)
            self.running = False
