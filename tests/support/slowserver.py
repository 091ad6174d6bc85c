"""A real HTTP server on 127.0.0.1 whose bodies are hostile to a reader: a path holding
``/trickle/`` sends one byte every ``interval`` seconds forever (no Content-Length), one holding
``/endless/`` sends zeros as fast as it can forever, one holding ``/big/`` declares a
Content-Length of ``big`` bytes and sends zeros; any other path is served from ``files`` (path ->
bytes, a dict the caller may keep adding to). As a mirror (``LEMONPACK_MIRROR``), origin
``https://example.invalid/trickle/x`` is the path ``/example.invalid/trickle/x``. ``bytes_sent`` counts what the endless
and big bodies wrote before the client hung up. Used by the bounded-fetch tests (issue 28,
case 73)."""

from __future__ import annotations

import http.server
import threading
import time


class SlowServer:
    """``SlowServer(files, interval=1.0, big=...)``; ``base`` is ``http://127.0.0.1:PORT``;
    ``stop()`` closes it (also a context manager)."""

    def __init__(self, files: dict[str, bytes] | None = None, *, interval: float = 1.0, big: int = 1 << 30):
        self.files = files if files is not None else {}  # the caller may add files later
        self.interval, self.big = interval, big
        self.bytes_sent = 0
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 (http.server's naming)
                outer.requests.append(self.path)
                try:
                    if "/trickle/" in self.path:
                        self.send_response(200)
                        self.end_headers()
                        while True:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                            time.sleep(outer.interval)
                    elif "/endless/" in self.path or "/big/" in self.path:
                        self.send_response(200)
                        if "/big/" in self.path:
                            self.send_header("Content-Length", str(outer.big))
                        self.end_headers()
                        chunk = b"\0" * 65536
                        while True:
                            self.wfile.write(chunk)
                            outer.bytes_sent += len(chunk)
                    elif self.path in outer.files:
                        data = outer.files[self.path]
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                    else:
                        self.send_error(404)
                except OSError:
                    return  # the client hung up

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> SlowServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
