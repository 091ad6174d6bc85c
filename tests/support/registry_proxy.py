"""A recording HTTP proxy on 127.0.0.1 in front of a real registry (``LocalRegistry``), able to
behave as registries the real one is not:

- ``dcd``: ``"ok"`` (forward ``Docker-Content-Digest`` as sent), ``"none"`` (drop it from
  manifest answers: the header is not guaranteed by the distribution-spec; containerd#3238),
  ``"wrong"`` (replace it on manifest answers by a digest of nothing we have);
- ``mount_202``: answer a cross-repository mount (``POST ...?mount=&from=``) as a registry that
  did not mount: the request goes to the registry as a plain ``POST``, so the answer is a real
  upload session (``202`` + ``Location``; harbor#22863);
- ``hold``: a set of methods (``{"PATCH"}``) whose requests are held (``held`` is set) until
  ``release`` is set: a command stays mid-transfer for as long as a test needs; ``hold_path``:
  only requests whose path holds this string are held;
- ``cut``: ``{METHOD: {n, ...}}``: the n-th request of METHOD (1-based) is forwarded to the
  registry, which acts on it, and its answer is never sent: the connection is closed instead (a
  connection dropped after the registry got the bytes).

- ``fail``: ``{METHOD: {n: status}}``: the n-th request of METHOD to a repository (``/v2/<name>/...``,
  counted as they arrive, 1-based) is answered ``status`` (a 429 with ``Retry-After: 0``) and
  never reaches the registry (a transient fault of a busy registry or of a load balancer);
- ``drop_blob``: ``(n, nbytes)``: the n-th blob ``GET`` is answered with its headers and the first
  ``nbytes`` of its body, then the connection is closed (a download cut mid-body);
- ``stall``: ``{METHOD: seconds}``: the first request of METHOD to a repository waits that long
  before it is forwarded (a stalled registry: the client's timeout decides);
- ``chunk_min``: add ``OCI-Chunk-Min-Length: <n>`` to the answers opening an upload session (a
  registry that takes no chunk smaller than n bytes but the last, distribution-spec v1.1);
- ``redirect_blobs``: blob ``GET``s are answered ``307`` to ``/storage/...`` on the proxy, which
  serves the blob from the registry there (blob storage behind a redirect).

Every request is appended to ``log`` as ``{"method", "path", "query", "status", "mount"}``
once answered (``status`` None for one cut before its answer). The ``Host`` header is
forwarded as is, so the registry's ``Location`` URLs point at the proxy.
Use: ``with RegistryProxy(registry) as proxy: ... proxy.host``.
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class RegistryProxy:
    """See the module doc. ``host`` is ``127.0.0.1:PORT`` of the proxy."""

    def __init__(self, registry, *, dcd: str = "ok", mount_202: bool = False, hold: set[str] | None = None,
                 hold_path: str = "", cut: dict[str, set[int]] | None = None,
                 fail: dict[str, dict[int, int]] | None = None, drop_blob: tuple[int, int] | None = None,
                 stall: dict[str, float] | None = None, redirect_blobs: bool = False, chunk_min: int | None = None):
        self.upstream = registry.host
        self.dcd, self.mount_202, self.hold, self.hold_path = dcd, mount_202, set(hold or ()), hold_path
        self.log: list[dict] = []
        self.cut = {m: set(ns) for m, ns in (cut or {}).items()}
        self._seen: dict[str, int] = {}
        self.fail = {m: dict(ns) for m, ns in (fail or {}).items()}
        self.drop_blob, self.stall, self.redirect_blobs = drop_blob, dict(stall or {}), redirect_blobs
        self.chunk_min = chunk_min
        self._arrived: dict[str, int] = {}
        self._blob_gets = 0
        self._lock = threading.Lock()
        self.held = threading.Event()
        self.release = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _forward(self):
                u = urllib.parse.urlsplit(self.path)
                q = urllib.parse.parse_qs(u.query)
                entry = {"method": self.command, "path": u.path, "query": u.query, "status": None,
                         "mount": "mount" in q, "range": self.headers.get("Range"),
                         "content_range": self.headers.get("Content-Range")}
                proxy.log.append(entry)
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                blob_get = self.command == "GET" and "/blobs/sha256:" in u.path
                if u.path.startswith("/v2/") and u.path != "/v2/" and not u.path.startswith("/v2/storage"):
                    with proxy._lock:
                        arrived = proxy._arrived[self.command] = proxy._arrived.get(self.command, 0) + 1
                        if blob_get:
                            proxy._blob_gets += 1
                        blob_n = proxy._blob_gets
                    status = proxy.fail.get(self.command, {}).get(arrived)
                    if status is not None:
                        entry["status"] = status
                        self.send_response(status)
                        if status == 429:
                            self.send_header("Retry-After", "0")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    if arrived == 1 and self.command in proxy.stall:
                        import time

                        time.sleep(proxy.stall[self.command])
                    if blob_get and proxy.redirect_blobs:
                        entry["status"] = 307
                        self.send_response(307)
                        self.send_header("Location", "/storage" + self.path)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                else:
                    blob_n = 0
                path = self.path
                if path.startswith("/storage/"):
                    path = path[len("/storage"):]
                if self.command in proxy.hold and proxy.hold_path in u.path:
                    proxy.held.set()
                    proxy.release.wait(120)
                if proxy.mount_202 and self.command == "POST" and "mount" in q:
                    path = u.path  # a plain POST: the registry opens a session
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                try:
                    conn.request(self.command, path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    out = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP | {"content-length"}]
                finally:
                    conn.close()
                with proxy._lock:
                    nth = proxy._seen[self.command] = proxy._seen.get(self.command, 0) + 1
                if nth in proxy.cut.get(self.command, ()):
                    self.close_connection = True
                    return
                if "/manifests/" in u.path and proxy.dcd != "ok":
                    out = [(k, v) for k, v in out if k.lower() != "docker-content-digest"]
                    if proxy.dcd == "wrong":
                        out.append(("Docker-Content-Digest", "sha256:" + "ab" * 32))
                if blob_get and proxy.drop_blob is not None and blob_n == proxy.drop_blob[0] and resp.status == 200:
                    entry["status"] = "dropped"
                    self.send_response(200)
                    for k, v in out:
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[:proxy.drop_blob[1]])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if proxy.chunk_min is not None and self.command == "POST" and "/blobs/uploads/" in u.path:
                    out.append(("OCI-Chunk-Min-Length", str(proxy.chunk_min)))
                entry["status"] = resp.status  # before the answer: a client that has it may read the log at once
                self.send_response(resp.status, resp.reason)
                for k, v in out:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(resp.getheader("Content-Length") or len(data))
                                 if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command != "HEAD" and data:
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _forward

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # a client cut off mid-answer (Ctrl-C)
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        from support.registry import declare_insecure

        declare_insecure(self.host)  # a plain-http registry, said as its users say it

    def requests(self, method: str | None = None, path_part: str = "") -> list[dict]:
        """Logged requests with ``method`` (any when None) whose path holds ``path_part``."""
        return [e for e in self.log if (method is None or e["method"] == method) and path_part in e["path"]]

    def __enter__(self) -> "RegistryProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
