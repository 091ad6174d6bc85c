"""The status page: ``GET /`` (the page), ``GET /status/{app.js,app.css}`` (its static files,
shipped in the package: ``lemonpack/server/static/``) and ``GET /v1/status`` (the JSON it
polls). Loopback clients only, as ``/v1/events`` and ``/metrics`` (403 otherwise) unless the
server was started with ``status_remote``.

The page loads nothing from elsewhere (no CDN) and runs under a strict Content Security Policy
(:data:`CSP`: scripts, styles and connections from this origin only, no inline script or style,
no frames, no forms posted anywhere): it is the answer to a model name or a log line that holds
markup, together with the page's own rule of writing every server-given text with
``textContent``. Its buttons call the existing ``POST /v1/load`` and ``POST /v1/unload``; its
live log is ``GET /v1/events`` (server-sent events) plus each engine's last output lines from
the status JSON; its chat playground posts ``/v1/chat/completions`` with ``stream: true``.

``GET /v1/status`` (:meth:`StatusPage.status`) is ``{"server": {...}, "models": [...]}``:

- ``server``: ``budget`` and ``used`` bytes (the policy's), ``queue_timeout``, ``uptime_s``,
  ``requests`` and ``ttfb_sum``/``ttfb_count`` over every model: the very counters
  ``/metrics`` exposes (``lemonpack_requests_total``, ``lemonpack_time_to_first_byte_seconds``),
  so the page's requests per second and mean time to first byte are differences of two polls;
- ``models``: each model ``/v1/models`` lists (same ``id``, ``state``, ``reason``, ``recipe``,
  ``remote``), plus ``in_flight`` and ``queued`` (the policy's), ``engine`` (``pid``,
  ``container``, ``url``; None when none runs), ``memory`` (``estimate``: the admission figure
  of the engine running, the engine's floor included; ``rss``: ``VmRSS`` of
  ``/proc/PID/status`` for a process engine, None for a container or none), ``digests``
  (``model``: ``sha256:...`` of the main model file, hashed once per file, size and mtime in a
  background thread, ``"pending"`` meanwhile, None when it is not a local file; ``image``: None,
  as no engine image digest is known to serve yet), ``trust`` (the runner's last trust check
  of the model's engine images, :meth:`lemonpack.runtime.lifecycle.runner.Runner.trust_status`:
  ``{"allowed", "scope", "reason", "reference", "policy"}``, ``reason`` None when allowed;
  None when no check ran: no policy file, no registry image, not requested yet, or a remote
  model), its own ``requests``/``ttfb_sum``/``ttfb_count`` and ``log`` (the engine's
  last :data:`LOG_LINES` output lines).
"""

from __future__ import annotations

import os
import threading
import time
from importlib import resources
from typing import Any

from aiohttp import web

from lemonpack.digest import file_digest
from lemonpack.hosts import is_loopback
from lemonpack.server.body import clip
from lemonpack.server.responses import error

#: The page's Content Security Policy (W3C CSP level 3): nothing inline, nothing from elsewhere.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
#: Headers of every answer of the page (CSP, no MIME sniffing, no referrer, no framing).
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
#: The static files: URL name -> (package file, content type).
FILES = {"index.html": ("index.html", "text/html; charset=utf-8"),
         "app.js": ("app.js", "text/javascript; charset=utf-8"),
         "app.css": ("app.css", "text/css; charset=utf-8")}
#: Engine output lines each model carries in the status JSON.
LOG_LINES = 40


def vm_rss(pid: int) -> int | None:
    """Resident set of ``pid`` in bytes: ``VmRSS`` of ``/proc/PID/status`` (proc(5)); None when
    the process is gone or the field is missing (a kernel thread, another OS)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class ModelDigests:
    """``sha256:...`` of model files, hashed in one background thread, one file at a time,
    cached by path, size and modification time (a changed file is hashed again)."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, int, int], str] = {}
        self._queue: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None

    def get(self, path: str) -> str | None:
        """The digest of ``path``, ``"pending"`` while it is hashed, None when it is not a
        regular file."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        if not os.path.isfile(path):
            return None
        key = (path, st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._done:
                return self._done[key]
            if key not in self._queue:
                self._queue.append(key)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="status-digests", daemon=True)
                self._worker.start()
        return "pending"

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    return
                key = self._queue[0]
            try:
                got = str(file_digest(key[0])[0])
            except OSError as e:
                got = f"unreadable: {e.strerror or e}"
            with self._lock:
                self._done[key] = got
                self._queue.remove(key)
                if len(self._done) > 256:
                    self._done.pop(next(iter(self._done)))


def _static(name: str) -> bytes:
    return resources.files("lemonpack.server").joinpath("static", name).read_bytes()


class StatusPage:
    """The page's handlers over the server's parts (``server``: a
    :class:`lemonpack.server.app.Server`); ``remote``: answer non-loopback clients too."""

    def __init__(self, server: Any, remote: bool = False) -> None:
        self.server, self.remote = server, remote
        self.started = time.monotonic()
        self.digests = ModelDigests()
        self._files = {name: (_static(file), ctype) for name, (file, ctype) in FILES.items()}

    def _refused(self, request: web.Request) -> web.Response | None:
        if self.remote or is_loopback(request.remote):
            return None
        return error(403, "permission_error", "the status page answers loopback clients only")

    async def page(self, request: web.Request) -> web.Response:
        """``GET /``: the page."""
        return self._file(request, "index.html")

    async def asset(self, request: web.Request) -> web.Response:
        """``GET /status/NAME``: one of :data:`FILES` (any other name: 404)."""
        return self._file(request, request.match_info.get("name", ""))

    def _file(self, request: web.Request, name: str) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        got = self._files.get(name)
        if got is None:
            return error(404, "not_found", "no such file of the status page")
        body, ctype = got
        return web.Response(body=body, headers={**HEADERS, "Content-Type": ctype})

    async def status(self, request: web.Request) -> web.Response:
        """``GET /v1/status``: the JSON of the module docstring."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        # on the loop: the policy has one owner (the /proc reads and stats here take microseconds;
        # model files are hashed by ModelDigests' own thread)
        doc = self._document(self.server.management.model_rows())
        return web.json_response(doc, headers={"Cache-Control": "no-store"})

    def _document(self, listed: list[dict[str, Any]]) -> dict[str, Any]:
        srv = self.server
        policy = srv.policy
        counts = _counters(srv.metrics)
        in_flight, queued, memory = policy.in_flight(), policy.queued(), policy.memory()
        models = []
        trust_of = getattr(srv.runner, "trust_status", None)
        for m in listed:
            name = m["id"]
            eng = srv.runner.engine(name) if not m.get("remote") else None
            engine = None
            rss = None
            if eng is not None and eng.poll() is None:
                container = eng.plan.container_name
                engine = {"pid": eng.pid, "container": container, "url": eng.url}
                rss = None if container or eng.plan.container_runtime else vm_rss(eng.pid)
            req, tsum, tcount = counts.get(clip(name, 200), (0, 0.0, 0))
            models.append({
                "id": name, "state": m["state"], "reason": m.get("reason"), "recipe": m.get("recipe"),
                "remote": m.get("remote", False), "in_flight": in_flight.get(name, 0), "queued": queued.get(name, 0),
                "engine": engine, "memory": {"estimate": memory.get(name), "rss": rss},
                "digests": {"model": self._model_digest(name), "image": None},
                "trust": trust_of(name) if trust_of is not None and not m.get("remote") else None,
                "requests": req, "ttfb_sum": tsum, "ttfb_count": tcount,
                "log": eng.logs.tail(LOG_LINES) if eng is not None else []})
        total = [sum(v[i] for v in counts.values()) for i in range(3)]
        return {"server": {"budget": policy.budget, "used": policy.used(), "queue_timeout": policy.queue_timeout,
                           "uptime_s": round(time.monotonic() - self.started, 1), "requests": total[0],
                           "ttfb_sum": total[1], "ttfb_count": total[2]},
                "models": models}

    def _model_digest(self, name: str) -> str | None:
        entry = self.server.catalog.entries().get(name)
        main = (entry.checkpoints or {}).get("main") if entry is not None else (name if os.path.isabs(name) else None)
        if not main or not os.path.isabs(os.path.expanduser(str(main))):
            return None
        return self.digests.get(os.path.realpath(os.path.expanduser(str(main))))


def _counters(metrics: Any) -> dict[str, tuple[int, float, int]]:
    """``model label -> (requests answered, time-to-first-byte seconds summed, their count)``,
    read from the collectors ``/metrics`` renders (one source for both; flushed first)."""
    metrics.flush()
    out: dict[str, list[float]] = {}
    for fam in metrics.requests.collect():
        for s in fam.samples:
            if s.name.endswith("_total"):
                out.setdefault(s.labels["model"], [0, 0.0, 0])[0] += s.value
    for fam in metrics.ttfb.collect():
        for s in fam.samples:
            if s.name.endswith("_sum"):
                out.setdefault(s.labels["model"], [0, 0.0, 0])[1] += s.value
            elif s.name.endswith("_count"):
                out.setdefault(s.labels["model"], [0, 0.0, 0])[2] += s.value
    return {k: (int(v[0]), round(v[1], 6), int(v[2])) for k, v in out.items()}


__all__ = ["CSP", "FILES", "HEADERS", "LOG_LINES", "ModelDigests", "StatusPage", "vm_rss"]
