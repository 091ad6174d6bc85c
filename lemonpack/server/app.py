"""The HTTP front of ``lemonpack serve``: capability-gated OpenAI-compatible proxy and management API.

Built on aiohttp (server and upstream client in one asyncio stack). Routes follow RFC
section 5 under both ``/v1/`` and ``/api/v1/``; each route is gated on the capability the
model's recipe declared (an undeclared one is HTTP 400 ``unsupported_operation``, the
engine is not touched); ``endpoints`` remaps a declared capability to the engine's path.
Engines are driven by :class:`lemonpack.runtime.runner.Runner` (one start for N
concurrent cold requests). Management (sections 10, 21): ``GET /v1/models``,
``POST /v1/load``, ``POST /v1/unload``, ``GET /v1/health``, ``GET /v1/system-info``.

Proxy rules: the request body streams to the engine (:mod:`lemonpack.server.body`: a JSON body
is read, bounded, to find the model; a multipart body only up to its ``model`` field) with
the client's ``Content-Length`` when it sent one; hop-by-hop headers are stripped both ways;
the engine is asked for ``identity`` encoding; no read timeout on inference routes; the
response streams chunk by chunk (``X-Accel-Buffering: no`` on event streams). Each engine has
its own upstream client session for its whole life (one model's traffic never touches
another's connections). A client that leaves, before or after the first byte, cancels the
handler (aiohttp's handler cancellation), which closes the upstream request at once and frees
its slot; an engine dying mid-stream ends the stream. One structured log line per request goes
to the ``lemonpack.server.access`` logger (status 499: the client left).

Serving policy (who is answered, who waits, who starts, who gives way, memory admission, TTL
and soft-idle, load timeouts, slot policies, load-option reloads) is the runtime's pure
:class:`~lemonpack.runtime.serving.ServingPolicy`. This module only drives it: every event
(request arrived, finished or abandoned, time passed, engine ready/failed/exited/stopped) is
posted from the event loop (engine transitions arrive through the loop's queue) and its
effects are performed here (grant or reject a waiting handler, start or stop an engine
through the :class:`~lemonpack.runtime.runner.Runner`, POST a ``downsize_endpoint``). The idle
sweep posts ``Tick`` every :attr:`ServerConfig.idle_check` seconds and unloads a model whose
registration, recipe or model file went away (the discovery watcher). ``GET /metrics``:
:mod:`lemonpack.server.metrics`.

Gateway: a registered model with ``endpoints`` is served by engines lemonpack does not spawn.
Their health and the choice of endpoint per request are the runtime's pure
:class:`~lemonpack.runtime.gateway.EndpointPool`; here a probe task runs the recipe's
``health_probe`` against each endpoint when the pool says it is due and reports the model up
(``EngineReady``) or down (``EngineFailed``/``EngineExited``) to the policy. A request is
granted like any other (same in-flight limits and metrics), then relayed to the endpoint the
pool picks through the same :class:`~lemonpack.server.upstream.Upstream` relay (one pool of
connections per endpoint URL). A connection that cannot be made takes the endpoint out and
the request goes once to another live endpoint (nothing reached the first engine); an answer
that started is never retried. ``POST /v1/load`` waits for a passing probe,
``POST /v1/unload`` stops nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import urllib.parse
import logging
import re
import ssl
import threading
import time
from collections.abc import Mapping
from collections import deque
from dataclasses import dataclass, replace

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from lemonpack.hosts import is_loopback
from lemonpack.contract.capabilities import CAPABILITIES
from lemonpack.errors import LemonpackError, one_line
from lemonpack.runtime.gateway import DOWN, UP, EndpointPool
from lemonpack.runtime.tokens import OPTION_DEFAULTS, check_load_options
from lemonpack.runtime.probes import check_once
from lemonpack.runtime.memory import estimate_model
from lemonpack.runtime.runner import Runner
from lemonpack.runtime.serving import (
    Arrive, EngineExited, EngineFailed, EngineReady, EngineStopped, Finish, ModelInfo, Phase, ServingPolicy,
    Shutdown, Tick, Unload, options_key,
)
from lemonpack.runtime.selector import BackendSelectionError
from lemonpack.runtime.supervisor import State
from lemonpack.server.body import (
    MAX_JSON_BYTES, BadBody, Body, multipart_field, parse_json, read_bounded, read_multipart_model, shown, clip,
)
from lemonpack.server.catalog import Catalog, ModelNotFound
from lemonpack.server.metrics import Metrics
from lemonpack.server.upstream import ConnectFailed, Upstream, UpstreamError

access_log = logging.getLogger("lemonpack.server.access")
log = logging.getLogger("lemonpack.server")

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
                        "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection"})
DEFAULT_MAX_IN_FLIGHT = 64

# route (after the /v1 or /api/v1 prefix) -> (method, capability), from the registry (section 5)
ROUTES: dict[str, tuple[str, str]] = {}
for _cap in CAPABILITIES.values():
    for _r in _cap.routes:
        _method, _path = _r.split(" ", 1)
        if _method in ("GET", "POST") and _path.startswith("/v1/"):
            ROUTES[_path[3:]] = (_method, _cap.name)


@dataclass
class ServerConfig:
    """Tunables: ``max_in_flight`` requests per model (over it: 429 with ``Retry-After``),
    ``load_timeout`` seconds a request waits for an engine to become ready (None: the
    recipe's probe timeout bounds it); ``ttl`` seconds idle before a model is unloaded and
    ``soft_idle`` seconds idle before its ``downsize_endpoint`` is called (None: never);
    ``idle_check`` seconds between idle sweeps."""

    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    load_timeout: float | None = None
    ttl: float | None = None
    soft_idle: float | None = None
    idle_check: float = 0.25
    memory_budget: int | None = None
    metrics_remote: bool = False


def error(status: int, kind: str, message: str, headers: Mapping[str, str] | None = None,
          code: str | None = None) -> web.Response:
    """The OpenAI error envelope ``{"error": {"message", "type"}}`` (plus ``code`` when given)
    with ``status``."""
    doc = {"message": message, "type": kind}
    if code is not None:
        doc["code"] = code
    return web.json_response({"error": doc}, status=status, headers=headers)


def selection_error(e: BackendSelectionError) -> web.Response:
    """HTTP 400 ``backend_selection_error``; ``code`` is the selector's kind (``unknown``,
    ``unavailable``, ``cannot-serve``; ``no-backend`` when nothing serves a model file)."""
    kind = getattr(e, "kind", None) or "no-backend"
    return error(400, "backend_selection_error", f"{kind}: {e}", code=kind)


def _strip(headers, drop=()) -> CIMultiDict:
    """``headers`` without hop-by-hop ones (RFC 9110 section 7.6.1, and those ``Connection``
    names) and without ``drop``; repeated headers are kept."""
    conn = {t.strip().lower() for v in headers.getall("Connection", []) for t in v.split(",")}
    return CIMultiDict((k, v) for k, v in headers.items()
                       if k.lower() not in HOP_BY_HOP and k.lower() not in conn and k.lower() not in drop)


class Server:
    """The application state: the :class:`Catalog`, the :class:`Runner`, upstream sessions
    (one per engine, so no request reuses a pooled connection of a dead engine) and the
    in-flight counters. :meth:`app` builds the aiohttp application."""

    def __init__(self, catalog: Catalog, runner: Runner | None = None, config: ServerConfig | None = None):
        self.catalog = catalog
        self.runner = runner or Runner(catalog.plan)
        self.config = cfg = config or ServerConfig()
        self._sessions: dict[int, tuple[object, aiohttp.ClientSession]] = {}  # downsize calls
        self._pools: dict[int, tuple[object, Upstream]] = {}  # the proxy's upstream connections
        self.known: set[str] = set()  # models this server asked for
        self.policy = ServingPolicy(self, clock=time.monotonic, budget=cfg.memory_budget,
                                    max_in_flight=cfg.max_in_flight, ttl=cfg.ttl, soft_idle=cfg.soft_idle,
                                    load_timeout=cfg.load_timeout)
        self._events: deque = deque()
        self._handling = False
        self._waiters: dict[int, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task | None = None
        self._estimates: dict[tuple, int] = {}
        #: Endpoint models (served by engines lemonpack does not spawn): health and choice.
        self.gateway = EndpointPool(time.monotonic)
        self._remote_pools: dict[str, Upstream] = {}
        self._remote_engines: dict[str, RemoteEngine] = {}
        self._probe_task: asyncio.Task | None = None
        self._probe_client = None
        self._ssl_ctx: ssl.SSLContext | None = None
        self._probe_lock = threading.Lock()
        self.metrics = Metrics(lambda: ({**dict.fromkeys(self.known, 0), **self.policy.in_flight()},
                                       self.policy.memory(), self.policy.budget),
                               endpoints=self._endpoint_rows)
        self.runner.add_observer(self._engine_event)

    @property
    def in_flight(self) -> dict[str, int]:
        """Requests busy or waiting for an engine, by model (the policy's count)."""
        return self.policy.in_flight()

    # -- the policy's driver: one owner of its state, the event loop

    def post(self, event) -> None:
        """Hand ``event`` to the :class:`ServingPolicy`. Call on the event loop only; an
        event posted by an effect while another is handled is queued, never nested."""
        self._events.append(event)
        if self._handling:
            return
        self._handling = True
        try:
            while self._events:
                ev = self._events.popleft()
                if isinstance(ev, EngineExited) and self.policy.phase(ev.model) is Phase.READY \
                        and not self.gateway.has(ev.model):  # an endpoint model counts endpoints_down
                    self.metrics.failures.labels(clip(ev.model, 200), "exited").inc()  # not asked to stop
                try:
                    self.policy.handle(ev)
                except Exception:  # noqa: BLE001 (a bug of ours must not stop the loop)
                    log.exception("serving policy failed on %r", ev)
        finally:
            self._handling = False

    def _engine_event(self, model: str, old: State, new: State) -> None:
        """Runner observer (any thread, under the runner's lock): turn a transition into a
        policy event and queue it on the event loop."""
        if new is State.READY:
            ev = EngineReady(model, self.runner.engine(model))
        elif new is State.STOPPING and old is State.STARTING:
            ev = EngineFailed(model, self._failure_text(model, self.runner.last_error(model) or "start failed"))
            self.metrics.failures.labels(clip(model, 200), "start_failed").inc()
        elif new is State.STOPPING:
            ev = EngineExited(model, self.runner.last_error(model) or "")
        elif new is State.STOPPED:
            ev = EngineStopped(model)
            loop = self._loop
            if loop is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(self._drop_sessions)
                except RuntimeError:
                    pass
        else:
            return
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self.post, ev)
        except RuntimeError:  # the loop closed meanwhile (shutdown)
            pass

    def _failure_text(self, model: str, msg: str) -> str:
        eng = self.runner.engine(model)
        if eng is not None and "last log lines" not in msg:
            tail = eng.logs.tail(20)
            if tail:
                msg += "\nlast log lines:\n  " + "\n  ".join(tail)
        return msg

    # Effects (ServingEffects): called from post(), must not block

    def grant(self, req, model: str, engine) -> None:
        fut = self._waiters.get(req)
        if fut is not None and not fut.done():
            fut.set_result(engine)

    def reject(self, req, status: int, kind: str, message: str) -> None:
        fut = self._waiters.get(req)
        if fut is not None and not fut.done():
            fut.set_exception(Rejected(status, kind, message))

    def start(self, model: str, info: ModelInfo) -> None:
        self.known.add(model)
        if info.remote:  # nothing to start: the endpoints' verdict, now or after their first probe
            self._sync_remote()
            state = self.gateway.state(model)
            if state == UP:
                self.post(EngineReady(model, self._remote_engine(model)))
            elif state == DOWN:
                self.post(EngineFailed(model, self.gateway.reason(model)))
            elif not self.gateway.has(model):
                self.post(EngineFailed(model, "it has no endpoint any more"))
            return
        self.metrics.starts.labels(clip(model, 200)).inc()
        self.catalog.load_options[model] = dict(info.options)
        fut = self.runner.request(model)
        fut.add_done_callback(lambda f: f.exception())  # the outcome arrives as a state event

    def stop(self, model: str) -> None:
        self.runner.unload(model, timeout=0)

    def downsize(self, model: str, engine) -> None:
        asyncio.ensure_future(self._downsize(model, engine))

    async def _acquire(self, model: str, info: ModelInfo, load: bool = False):
        """Wait until the policy grants a request for ``model``; ``(req, engine)``. Raises
        :class:`Rejected`. The caller must :meth:`_release` ``req`` (also when cancelled:
        then the policy forgets a request still waiting)."""
        req = next(self._ids)
        fut = self._waiters[req] = asyncio.get_running_loop().create_future()
        self.post(Arrive(req, model, info, load))
        try:
            return req, await fut
        except BaseException:
            self._release(req)
            raise

    def _release(self, req) -> None:
        self._waiters.pop(req, None)
        self.post(Finish(req))

    async def _info(self, served) -> ModelInfo:
        """What admission needs of ``served`` (memory estimated before start; an endpoint
        model is ``remote`` and holds nothing here)."""
        rec = served.recipe
        modes = sorted({CAPABILITIES[c].mode for c in rec.capabilities if c in CAPABILITIES
                        and CAPABILITIES[c].mode}) if rec is not None else []
        if served.remote:
            return ModelInfo(kind=modes[0] if modes else "chat", remote=True)
        opts = self.catalog.load_options.get(served.name, {})
        return ModelInfo(memory=await self._estimate(served, opts), slot_policy=rec.slot_policy if rec else "standard",
                         kind=modes[0] if modes else "chat", options=options_key(opts))

    async def _estimate(self, served, options) -> int:
        """:func:`lemonpack.runtime.memory.estimate_model` of the model's main file at the
        context size its launch would use (cached per file, size, mtime and options; 0 when
        the model is not a local file)."""
        path = (served.spec.checkpoints or {}).get("main")
        if not path or not os.path.isabs(os.path.expanduser(str(path))):
            return 0
        path = os.path.expanduser(str(path))
        merged = {**(served.recipe.recipe_options if served.recipe else {}), **served.spec.recipe_options, **options}
        ctx = merged.get("ctx_size") or OPTION_DEFAULTS["ctx_size"]
        k = str(merged.get("cache_type_k") or OPTION_DEFAULTS["cache_type_k"])
        v = str(merged.get("cache_type_v") or OPTION_DEFAULTS["cache_type_v"])
        try:
            st = os.stat(path)
            ctx_n = int(ctx)
        except (OSError, ValueError):
            return 0
        key = (path, st.st_size, st.st_mtime_ns, ctx_n, k, v)
        got = self._estimates.get(key)
        if got is None:
            try:
                est = await asyncio.get_running_loop().run_in_executor(None, estimate_model, path, ctx_n, k, v)
            except LemonpackError:
                return 0
            got = self._estimates[key] = est.total
            if len(self._estimates) > 1024:
                self._estimates.pop(next(iter(self._estimates)))
        return got

    # -- aiohttp wiring

    def app(self) -> web.Application:
        """The aiohttp application with every route under ``/v1`` and ``/api/v1``."""
        app = web.Application(client_max_size=MAX_JSON_BYTES, middlewares=[_errors])
        for prefix in ("/v1", "/api/v1"):
            app.router.add_get(prefix + "/models", self.models)
            app.router.add_post(prefix + "/load", self.load)
            app.router.add_post(prefix + "/unload", self.unload)
            app.router.add_get(prefix + "/health", self.health)
            app.router.add_get(prefix + "/system-info", self.system_info)
            for path, (method, cap) in ROUTES.items():
                app.router.add_route(method, prefix + path.replace("{id}", "{id:[^/]+}"), self.proxy)
        app.router.add_get("/metrics", self.metrics_route)
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _startup(self, _app) -> None:
        self._loop = asyncio.get_running_loop()
        self._sweeper = asyncio.ensure_future(self._sweep_loop())
        self._probe_task = asyncio.ensure_future(self._probe_loop())

    async def _cleanup(self, _app) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._probe_task is not None:
            self._probe_task.cancel()
        for pool in self._remote_pools.values():
            pool.close()
        self._remote_pools.clear()
        if self._probe_client is not None:
            self._probe_client.close()
        self.post(Shutdown())
        for _eng, s in list(self._sessions.values()):
            await s.close()
        for _eng, pool in list(self._pools.values()):
            pool.close()
        self._sessions.clear()

    def _drop_sessions(self) -> None:
        """Close the upstream sessions and pools of engines that have exited."""
        for k, (eng, sess) in list(self._sessions.items()):
            if eng.poll() is not None:
                asyncio.ensure_future(sess.close())
                del self._sessions[k]
        for k, (eng, pool) in list(self._pools.items()):
            if eng.poll() is not None:
                pool.close()
                del self._pools[k]

    def _upstream(self, eng) -> Upstream:
        """The connection pool of engine ``eng``: one per engine, kept for its life (one
        model's traffic never touches another's connections); one per endpoint URL for an
        endpoint model (dropped when the endpoint goes down)."""
        if isinstance(eng, _Target):
            pool = self._remote_pools.get(eng.url)
            if pool is None:
                u = urllib.parse.urlsplit(eng.url)
                ctx = None
                if u.scheme == "https":  # one context (the trust store is read once), shared
                    ctx = self._ssl_ctx = self._ssl_ctx or ssl.create_default_context()
                pool = self._remote_pools[eng.url] = Upstream(u.hostname or "", u.port or 80, ssl=ctx)
            return pool
        got = self._pools.get(id(eng))
        if got is not None and got[0] is eng:
            return got[1]
        self._drop_sessions()
        u = urllib.parse.urlsplit(eng.url)
        pool = Upstream(u.hostname or "127.0.0.1", u.port or 80)
        self._pools[id(eng)] = (eng, pool)
        return pool

    def _session(self, eng) -> aiohttp.ClientSession:
        """The upstream client session of engine ``eng``: one per engine, kept for the
        engine's life (its pool is never shared with another engine, so no request reuses a
        connection of a dead one, and using one model never touches another's connections).
        Sessions of engines that have exited are closed here, never one in use."""
        key = id(eng)
        got = self._sessions.get(key)
        if got is not None and got[0] is eng:
            return got[1]
        for k, (old_eng, old) in list(self._sessions.items()):
            if old_eng.poll() is not None or k == key:  # an engine gone (or an id reused)
                asyncio.ensure_future(old.close())
                del self._sessions[k]
        s = aiohttp.ClientSession(
            auto_decompress=False, trust_env=False, skip_auto_headers=("User-Agent", "Content-Type"),
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, use_dns_cache=False),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None))
        self._sessions[key] = (eng, s)
        return s

    # -- engines

    async def _get(self, model: str):
        """``catalog.get(model)``, off the event loop when it may probe presence (I/O)."""
        if self.catalog.may_probe(model):
            return await asyncio.get_running_loop().run_in_executor(None, self.catalog.get, model)
        return self.catalog.get(model)

    # -- the proxy

    async def _read_body(self, request: web.Request) -> tuple[str | None, Body]:
        """The model a request names and its :class:`Body` (:mod:`lemonpack.server.body`):
        a JSON body is read (bounded) and parsed (depth-bounded); a multipart body is read
        only up to its ``model`` field; another body with ``?model=`` is not read at all.
        Raises :class:`BadBody`."""
        ctype = request.headers.get("Content-Type", "")
        length = request.content_length
        if ctype.startswith("multipart/"):
            name, body = await read_multipart_model(request, ctype)
            return name or request.query.get("model"), body
        if request.query.get("model") and ctype and "json" not in ctype:
            return request.query["model"], Body(request, complete=False, length=length)
        raw = await read_bounded(request)
        body = Body(None, raw, complete=True, length=len(raw))
        if raw:
            try:
                doc = parse_json(raw)
            except BadBody:
                if not ctype or "json" in ctype:  # said to be JSON (or said nothing): say it is not
                    raise
                doc = None  # `curl -d` sends JSON as a form: read if it parses, else only ?model=
            if isinstance(doc, dict) and isinstance(doc.get("model"), str):
                return doc["model"], body
        return request.query.get("model"), body

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        """Forward one inference request to the model's engine (module docstring)."""
        t0 = time.monotonic()
        info = {"model": None, "route": request.path, "status": 0, "bytes": 0, "ttfb_ms": None}
        try:
            resp = await self._proxy(request, info, t0)
            info["status"] = info["status"] or resp.status  # 499 when the client left mid-stream
            return resp
        except asyncio.CancelledError:
            info["status"] = 499  # the client left: aiohttp cancelled the handler
            raise
        except ConnectionError:
            info["status"] = 499  # the client left while we wrote: nothing to answer, no traceback
            return web.Response(status=499)
        finally:
            info["total_ms"] = round((time.monotonic() - t0) * 1000, 2)
            if info["model"] is not None:
                info["model"] = clip(info["model"])
            access_log.info("request", extra={"fields": info})
            # labels stay bounded whatever clients send: a model name only once it resolved to a
            # served model, a route as the router's pattern (``/v1/slots/{id}``), never the path
            label = info["model"] if info.get("known") else ("<unknown>" if info["model"] else "")
            resource = request.match_info.route.resource
            self.metrics.request(label, resource.canonical if resource is not None else "<other>", info["status"],
                                 info["total_ms"] / 1000, None if info["ttfb_ms"] is None else info["ttfb_ms"] / 1000)

    async def _proxy(self, request: web.Request, info: dict, t0: float) -> web.StreamResponse:
        route = request.path.removeprefix("/api").removeprefix("/v1")
        key = route if route in ROUTES else re.sub(r"^/slots/[^/]+$", "/slots/{id}", route)
        _method, cap = ROUTES[key]
        try:
            model, body = await self._read_body(request)
        except BadBody as e:
            return error(e.status, "invalid_request_error", str(e))
        try:
            info["model"] = model
            if not model:
                return error(400, "invalid_request_error", "no model given (JSON body, form field or ?model=)")
            served = await self._served_or_error(model)
            if isinstance(served, web.Response):
                return served
            info["known"] = True
            if cap not in served.capabilities:
                return error(400, "unsupported_operation",
                             f"model {shown(model)} (recipe {served.recipe_id!r}) does not declare the {cap!r} "
                             f"capability needed by {request.method} {request.path}")
            return await self._forward(request, served, route, body, info, t0)
        finally:
            body.close()

    async def _forward(self, request, served, route: str, body: Body, info: dict, t0: float):
        try:
            req, eng = await self._acquire(served.name, await self._info(served))
        except Rejected as e:
            return e.response()
        if isinstance(eng, RemoteEngine):
            try:
                return await self._forward_remote(request, served, route, body, info, t0)
            finally:
                self._release(req)
        try:
            if eng.poll() is not None:  # exited, and the policy has not heard yet
                raise _EngineGone()
            return await self._relay(request, served, eng, route, body, info, t0)
        except _EngineGone as e:
            if info.get("retried") or not body.replayable:
                return error(502, "upstream_error", f"{served.name}: engine at {eng.url} did not answer: {e.why}")
            info["retried"] = True  # the engine died just before: the next attempt restarts it
        finally:
            self._release(req)
        await self._engine_left(served.name, eng)
        return await self._forward(request, served, route, body, info, t0)

    async def _forward_remote(self, request, served, route: str, body: Body, info: dict, t0: float):
        """Relay to the endpoint the :class:`EndpointPool` picks; a connection that cannot be
        made takes that endpoint out and the request goes once to another live endpoint
        (nothing reached the first); an answer that started is never retried."""
        tried: list[str] = []
        while True:
            url = self.gateway.pick(served.name, exclude=tried)
            if url is None:
                return error(503, "model_unavailable",
                             f"model {shown(served.name)} is down: {self.gateway.reason(served.name)}",
                             headers={"Retry-After": "1"})
            info["endpoint"] = url
            try:
                return await self._relay(request, served, _Target(url), route, body, info, t0)
            except _EndpointFailed as e:
                self._endpoint_failed(served.name, url, e.why)
                tried.append(url)
                if not (body.replayable and self.gateway.retry(served.name, tried, e.unsent)):
                    if e.unsent and self.gateway.state(served.name) == DOWN:  # it was the last one
                        return error(503, "model_unavailable", f"model {shown(served.name)} is down: "
                                     f"{self.gateway.reason(served.name)}", headers={"Retry-After": "1"})
                    return error(502, "upstream_error", f"{served.name}: endpoint {url} did not answer: {e.why}")
            finally:
                self.gateway.done(served.name, url)

    def _endpoint_failed(self, model: str, url: str, why: str) -> None:
        """A request could not reach ``url``: out until its probe passes."""
        pool = self._remote_pools.pop(url, None)
        if pool is not None:
            pool.close()
        log.warning("%s: endpoint %s taken out: %s", model, url, why, extra={"fields": {"model": model}})
        change = self.gateway.connect_failed(model, url, why)
        if change is not None:
            self._remote_changed(model, change)

    # -- endpoint models (the gateway)

    def _remote_engine(self, model: str) -> "RemoteEngine":
        eng = self._remote_engines.get(model)
        if eng is None:
            eng = self._remote_engines[model] = RemoteEngine(model, self.gateway)
        return eng

    def _remote_changed(self, model: str, state: str) -> None:
        """The pool says ``model`` went up or down: tell the policy (and the metrics)."""
        if state == UP:
            log.info("%s: endpoint model up", model, extra={"fields": {"model": model}})
            self.post(EngineReady(model, self._remote_engine(model)))
        elif state == DOWN:
            reason = self.gateway.reason(model)
            log.warning("%s: every endpoint is down: %s", model, reason, extra={"fields": {"model": model}})
            self.metrics.failures.labels(clip(model, 200), "endpoints_down").inc()
            if self.policy.phase(model) is Phase.READY:
                self.post(EngineExited(model, reason))
            else:
                self.post(EngineFailed(model, reason))

    def _sync_remote(self) -> None:
        """Declare every registered endpoint model to the pool (its endpoints and its
        recipe's probe interval); forget those no longer registered with endpoints."""
        seen = set()
        for m in self.catalog.models():
            if not m.remote:
                continue
            seen.add(m.name)
            probe = m.recipe.health_probe if m.recipe is not None else None
            interval = probe.poll_interval_ms / 1000 if probe is not None else 1.0
            self.gateway.set_model(m.name, m.endpoints, interval)
        for name in self.gateway.models():
            if name not in seen:
                self.gateway.drop_model(name)
                self._remote_engines.pop(name, None)
                self.post(Unload(name))

    async def _probe_loop(self) -> None:
        """Run every probe the pool says is due (off the event loop) and apply the results."""
        loop = asyncio.get_running_loop()
        synced = 0.0
        while True:
            try:
                if time.monotonic() - synced >= self.config.idle_check:
                    synced = time.monotonic()
                    self._sync_remote()
                for model, url in self.gateway.due():
                    asyncio.ensure_future(self._probe(loop, model, url))
            except Exception:  # noqa: BLE001 (a failure must not end endpoint probing)
                log.exception("endpoint probing failed")
            await asyncio.sleep(0.02)

    async def _probe(self, loop, model: str, url: str) -> None:
        served = next((m for m in self.catalog.models() if m.name == model), None)
        probe = served.recipe.health_probe if served is not None and served.recipe is not None else None
        u = urllib.parse.urlsplit(url)
        if probe is None:
            ok, what = False, "its recipe is not discovered"
        else:
            if probe.type == "process":  # nothing of ours to watch: a connection is the best sign
                probe = replace(probe, type="tcp")
            try:
                ok, what = await loop.run_in_executor(None, lambda: check_once(
                    probe, u.hostname or "", u.port or 80, self._probe_http(),
                    timeout=min(2.0, max(0.5, float(probe.timeout_seconds))), scheme=u.scheme))
            except Exception as e:  # noqa: BLE001 (a probe that breaks counts as failed)
                ok, what = False, f"probe failed: {type(e).__name__}"
        if ok is False:
            pool = self._remote_pools.pop(url, None)
            if pool is not None:
                pool.close()
        change = self.gateway.observe(model, url, ok, what)
        if change is not None:
            self._remote_changed(model, change)

    def _probe_http(self):
        """The probes' shared httpx client (made on first use, off the event loop: loading
        the CA bundle takes ~100 ms; it verifies certificates of https endpoints)."""
        with self._probe_lock:
            if self._probe_client is None:
                import httpx

                # the system trust store (SSL_CERT_FILE / SSL_CERT_DIR honoured), as the relay's
                self._probe_client = httpx.Client(trust_env=False, verify=ssl.create_default_context())
            return self._probe_client

    def _endpoint_rows(self) -> list[tuple[str, str, bool, int]]:
        """``(model, url, up, in flight)`` of every endpoint (for /metrics)."""
        return [(name, e.url, e.state == UP, e.in_flight) for name in self.gateway.models()
                for e in self.gateway.endpoints(name)]

    async def _engine_left(self, model: str, eng, limit: float = 5.0) -> None:
        """Until the policy no longer offers ``eng`` for ``model`` (at most ``limit`` s)."""
        deadline = time.monotonic() + limit
        while self.policy.engine(model) is eng and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def _relay(self, request, served, eng, route: str, body: Body, info: dict, t0: float):
        """Send the request to ``eng`` and stream its answer back (:mod:`.upstream`: a chunked
        answer passes with its framing, unparsed). A client that leaves cancels this handler
        (aiohttp's handler cancellation), whatever the phase: the upstream connection is then
        closed at once, and the engine sees it."""
        remap = served.recipe.endpoints.get(_cap_of(route)) if served.recipe.endpoints else None
        path = remap if remap else "/v1" + route
        target = path + (("?" + request.query_string) if request.query_string else "")
        headers = _strip(request.headers, drop=("host", "content-length", "accept-encoding"))
        headers["Accept-Encoding"] = "identity"
        pool = self._upstream(eng)
        try:
            up, lease = await pool.request(request.method, target, headers, body.payload(), body.length,
                                           lambda: body.replayable)
        except UpstreamError as e:
            if isinstance(eng, _Target):  # an endpoint: out until its probe passes
                raise _EndpointFailed(str(e), isinstance(e, ConnectFailed)) from None
            if eng.poll() is None:
                for _ in range(25):  # a refused/reset connection: is the engine exiting? (<= 0.5 s)
                    await asyncio.sleep(0.02)
                    if eng.poll() is not None:
                        break
            if eng.poll() is None:
                return error(502, "upstream_error", f"{served.name}: engine at {eng.url} did not answer: {e}")
            raise _EngineGone(str(e)) from None
        try:
            raw = up.chunked and request.version >= aiohttp.HttpVersion11
            out = _RawResponse(status=up.status, reason=up.reason) if raw else \
                web.StreamResponse(status=up.status, reason=up.reason)
            out.headers.extend(_strip(up.headers, drop=("content-length",)))
            if raw:
                out.headers["Transfer-Encoding"] = "chunked"
            if up.headers.get("Content-Type", "").startswith("text/event-stream"):
                out.headers["X-Accel-Buffering"] = "no"
                out.headers["Cache-Control"] = "no-cache"
            elif up.content_length is not None:
                out.content_length = up.content_length
            await out.prepare(request)

            def first() -> None:
                info["ttfb_ms"] = round((time.monotonic() - t0) * 1000, 2)

            async def write(data: bytes) -> None:
                info["bytes"] += len(data)
                await out.write(data)

            try:
                await up.relay(write, first)
            except UpstreamError as e:
                if _gone(request):
                    info["status"] = 499
                    return out
                log.warning("%s: engine stream ended early: %s", served.name, e)
                out.force_close()
                return out  # the client sees the answer end early (no clean end of a sized or chunked body)
            if _gone(request):
                info["status"] = 499
                return out
            await out.write_eof()
            return out
        finally:
            lease.release(up)

    # -- idle handling

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.idle_check)
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 (a sweep failure must not end idle handling)
                log.exception("idle sweep failed")

    def sweep(self) -> None:
        """Time passed (the policy's TTL, soft-idle and load timeouts); unload a model whose
        registration, recipe or model file went away (the discovery watcher)."""
        self.post(Tick())
        for name in list(self.known):
            if self.policy.phase(name) in (Phase.READY, Phase.STARTING) and not self.catalog.exists(name):
                log.info("%s: its model or recipe is gone; unloading", name, extra={"fields": {"model": name}})
                self.post(Unload(name))

    async def _downsize(self, name: str, eng) -> None:
        """POST the recipe's ``downsize_endpoint`` to ``eng`` (none declared: nothing)."""
        try:
            served = await self._get(name)
        except LemonpackError:
            return
        path = served.recipe.downsize_endpoint if served.recipe is not None else None
        if not path:
            return
        try:
            async with self._session(eng).post(eng.url + path, data=b"",
                                               timeout=aiohttp.ClientTimeout(total=30)) as r:
                await r.read()
                log.info("%s: downsize %s -> %s", name, path, r.status, extra={"fields": {"model": name}})
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            log.warning("%s: downsize %s failed: %s", name, path, e)

    # -- management

    def _state(self, name: str) -> tuple[str, str | None]:
        st = self.runner.state(name)
        err = self.runner.last_error(name)
        if st is State.READY:
            return "ready", None
        if st is State.STARTING:
            return "loading", None
        if st is State.STOPPING and not err:
            return "unloading", None
        return ("failed", err) if err else ("unloaded", None)

    async def models(self, request: web.Request) -> web.Response:
        """``GET /v1/models``: every registered model with recipe, capabilities, state; then
        every model file (named by path) whose engine is loading, ready or failed, by name."""
        data = []
        for m in self.catalog.models():
            state, reason = self._state(m.name)
            extra: dict = {"remote": m.remote}
            if m.remote:
                state, reason = self._remote_state(m.name)
                extra["endpoints"] = [{"url": e.url, "state": e.state, "reason": e.reason,
                                       "in_flight": e.in_flight} for e in self.gateway.endpoints(m.name)]
            if m.recipe is None:
                state, reason = "failed", m.problem
            data.append({"id": m.name, "object": "model", "owned_by": "lemonpack", "recipe": m.recipe_id,
                         "capabilities": list(m.capabilities), "state": state, "reason": reason, **extra})
        listed = {d["id"] for d in data}
        found = self.catalog.discovery()
        for name in sorted(set(self.runner.models()) - listed):
            if not os.path.isabs(os.path.expanduser(name)):
                continue  # a registered model removed from the registry: gone from the list at once
            state, reason = self._state(name)
            eng = self.runner.engine(name)
            if state == "unloaded" or eng is None:
                continue  # an unloaded model file is not listed (nothing names it any more)
            rec = found.get(eng.plan.recipe)
            data.append({"id": name, "object": "model", "owned_by": "lemonpack", "recipe": eng.plan.recipe,
                         "capabilities": list(rec.recipe.capabilities) if rec else [], "state": state,
                         "reason": reason, "remote": False})
        doc = {"object": "list", "data": data}
        if self.catalog.registry_problem:
            doc["warnings"] = [self.catalog.registry_problem + "; the last good model registry is served"]
        return web.json_response(doc)

    def _remote_state(self, name: str) -> tuple[str, str | None]:
        """``("ready"|"down"|"unknown", reason)`` of an endpoint model."""
        state = self.gateway.state(name)
        if state == UP:
            return "ready", None
        if state == DOWN:
            return "down", self.gateway.reason(name)
        return "unknown", "not probed yet"

    async def _body_model(self, request: web.Request) -> str | None:
        doc = parse_json(await read_bounded(request) or b"{}")
        if isinstance(doc, dict):
            for k in ("model_name", "model"):
                if isinstance(doc.get(k), str):
                    return doc[k]
        return request.query.get("model")

    async def _served_or_error(self, model: str):
        """The served model ``model``, or the error response saying why there is none (404
        ``model_not_found``, 400 ``backend_selection_error``)."""
        try:
            served = await self._get(model)
        except ModelNotFound as e:
            return error(404, "model_not_found", str(e))
        except BackendSelectionError as e:
            return selection_error(e)
        if served.recipe is None:
            return error(404, "model_not_found", f"model {shown(model)}: {served.problem}")
        return served

    async def load(self, request: web.Request) -> web.Response:
        """``POST /v1/load {"model_name": ..., options}``: start the engine and wait until
        ready. Options (``ctx_size`` ..., or an ``options``/``recipe_options`` object) that
        differ from the running engine's restart it with them once its requests in flight
        end; the answer says which options are in effect."""
        doc = parse_json(await read_bounded(request) or b"{}")
        model, options = load_request(doc, request.query.get("model"))
        served = await self._served_or_error(model)
        if isinstance(served, web.Response):
            return served
        info = await self._info(served)
        if served.remote:  # wait for a passing probe; nothing is started
            limit = self.config.load_timeout or served.recipe.health_probe.timeout_seconds
            try:
                req, eng = await asyncio.wait_for(self._acquire(model, info, load=True), limit)
            except Rejected as e:
                return e.response()
            except asyncio.TimeoutError:
                return error(503, "model_unavailable", f"model {shown(model)} is down after {limit:g}s: "
                             f"{self.gateway.reason(model)}", headers={"Retry-After": "1"})
            self._release(req)
            return web.json_response({"status": "success", "model": model, "state": "ready", "remote": True,
                                      "endpoints": [e.url for e in self.gateway.endpoints(model) if e.state == UP],
                                      "message": "served by its endpoints; lemonpack does not start them"})
        if options is not None:
            try:  # a bad value is the client's mistake, found before the running engine is touched
                check_load_options(options)
            except LemonpackError as e:
                return error(400, "invalid_request_error", one_line(str(e)))
            info = replace(info, options=options_key(options))
        try:
            req, eng = await self._acquire(model, info, load=True)
        except Rejected as e:
            return e.response()
        self._release(req)
        return web.json_response({"status": "success", "model": model, "state": "ready", "url": eng.url,
                                  "options": dict(info.options)})

    async def unload(self, request: web.Request) -> web.Response:
        """``POST /v1/unload {"model_name": ...}``: stop the model's engine and wait."""
        model = await self._body_model(request)
        if not model:
            return error(400, "invalid_request_error", "no model given")
        entry = self.catalog.entries().get(model)
        if entry is None and model not in self.known:
            return error(404, "model_not_found", f"model {shown(model)} is not registered (lemonpack models list)")
        if entry is not None and entry.endpoints:
            return web.json_response({"status": "success", "model": model, "state": "remote", "remote": True,
                                      "message": f"{model} is served by its endpoints "
                                                 f"({', '.join(entry.endpoints)}); lemonpack does not stop them"})
        self.post(Unload(model))
        await asyncio.get_running_loop().run_in_executor(None, self.runner.unload, model)
        return web.json_response({"status": "success", "model": model, "state": "unloaded"})

    async def health(self, request: web.Request) -> web.Response:
        """``GET /v1/health``: the server's own liveness and the loaded models."""
        loaded = [m.name for m in self.catalog.models() if self.runner.state(m.name) is State.READY
                  or (m.remote and self.gateway.state(m.name) == UP)]
        return web.json_response({"status": "ok", "loaded": loaded})

    async def metrics_route(self, request: web.Request) -> web.Response:
        """``GET /metrics``: Prometheus text (:mod:`lemonpack.server.metrics`); loopback
        clients only unless ``metrics_remote``."""
        if not self.config.metrics_remote and not is_loopback(request.remote):
            return error(403, "permission_error", "/metrics answers loopback clients only (serve --metrics-remote)")
        data, ctype = self.metrics.render()
        return web.Response(body=data, headers={"Content-Type": ctype})

    async def system_info(self, request: web.Request) -> web.Response:
        """``GET /v1/system-info``: discovered recipes and rejected descriptors (section 21)."""
        found = self.catalog.discovery()
        recipes = [{"recipe": r.id, "display_name": r.recipe.display_name, "kind": r.kind,
                    "capabilities": list(r.recipe.capabilities),
                    "platforms": {os_: list(blocks) for os_, blocks in r.recipe.platforms.items()},
                    "is_external": True, "file": str(r.file)} for r in found.recipes.values()]
        rejected = [{"file": str(r.file), "recipe": r.recipe, "kind": r.kind, "reason": r.reason}
                    for r in found.rejected]
        return web.json_response({"recipes": recipes, "rejected": rejected,
                                  "model_registry_problem": self.catalog.registry_problem})


@web.middleware
async def _errors(request: web.Request, handler):
    """Every failure of a handler answers in the OpenAI error shape, never aiohttp's plain
    text 500: a bad body 400 ``invalid_request_error``; a LemonpackError (a registry or
    recipe that cannot be read) 500 ``server_error`` with its message, logged on one line;
    anything else 500 ``server_error``, logged with its traceback (a bug of ours)."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except BadBody as e:
        return error(e.status, "invalid_request_error", str(e))
    except LemonpackError as e:
        log.warning("%s %s: %s", request.method, clip(request.path), clip(e, 2000))
        return error(500, "server_error", str(e)[:2000])
    except ConnectionError:
        return web.Response(status=499)  # the client left: nothing to answer, nothing to log
    except Exception as e:  # noqa: BLE001 (answered, and logged with its traceback)
        log.exception("%s %s failed", request.method, clip(request.path))
        return error(500, "server_error", f"internal error: {type(e).__name__}: {str(e)[:500]}")


class _RawResponse(web.StreamResponse):
    """A response whose body is written already framed (a chunked engine answer relayed as
    it arrived): aiohttp adds no framing of its own (its length check is off, as for
    websockets), the ``Transfer-Encoding: chunked`` header is the engine's."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self._length_check = False


class Rejected(Exception):
    """The policy answered a request without an engine (``status``, OpenAI error ``kind``)."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind

    def response(self) -> web.Response:
        headers = {"Retry-After": "1"} if self.status in (429, 503) else None
        return error(self.status, self.kind, str(self), headers=headers)


class RemoteEngine:
    """What the policy grants for an endpoint model: the model's endpoints as a whole (the
    endpoint of each request is picked when it is relayed). Never exits (``poll`` is None)."""

    remote = True

    def __init__(self, model: str, pool: EndpointPool) -> None:
        self.model, self._pool = model, pool

    @property
    def url(self) -> str:
        return ", ".join(e.url for e in self._pool.endpoints(self.model))

    def poll(self) -> None:
        return None


class _Target:
    """One endpoint URL a request is relayed to."""

    def __init__(self, url: str) -> None:
        self.url = url

    def poll(self) -> None:
        return None


class _EndpointFailed(Exception):
    def __init__(self, why: str, unsent: bool) -> None:
        super().__init__(why)
        self.why, self.unsent = why, unsent


class _EngineGone(Exception):
    def __init__(self, why: str = "the engine exited") -> None:
        super().__init__(why)
        self.why = why


#: Load options a ``POST /v1/load`` may set at its top level (section 4.2 option tokens).
LOAD_OPTIONS = frozenset({*OPTION_DEFAULTS, "custom_args"})


def load_request(doc: object, query_model: str | None) -> tuple[str, dict | None]:
    """``(model, options or None)`` of a ``POST /v1/load`` body: ``model_name`` (or ``model``,
    or ``?model=``), options from top-level option names (``ctx_size`` ...) and from an
    ``options`` or ``recipe_options`` object. Raises :class:`BadBody` naming the field."""
    if not isinstance(doc, dict):
        raise BadBody("load body must be a JSON object")
    model = next((doc[k] for k in ("model_name", "model") if isinstance(doc.get(k), str)), query_model)
    if not model:
        raise BadBody("no model given (model_name)")
    options: dict | None = None
    for k, v in doc.items():
        if k in ("model_name", "model"):
            continue
        if k in ("options", "recipe_options"):
            if not isinstance(v, dict):
                raise BadBody(f"load field {k!r} must be an object of option names to values")
            items = v.items()
        elif k in LOAD_OPTIONS:
            items = [(k, v)]
        else:
            raise BadBody(f"unknown load field {clip(k, 60)!r} (options: {', '.join(sorted(LOAD_OPTIONS))}, "
                          "or an 'options' object)")
        for name, value in items:
            if not isinstance(value, (str, int, float, bool)) or not isinstance(name, str):
                raise BadBody(f"load option {clip(name, 60)!r} must be a string, number or boolean")
            options = options or {}
            options[name] = value
    return model, options


def _gone(request: web.Request) -> bool:
    t = request.transport
    return t is None or t.is_closing()


def _cap_of(route: str) -> str:
    key = route if route in ROUTES else re.sub(r"^/slots/[^/]+$", "/slots/{id}", route)
    return ROUTES[key][1]


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``msg`` and the record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": round(record.created, 3), "level": record.levelname.lower(), "logger": record.name,
               "msg": record.getMessage()}
        doc.update(getattr(record, "fields", {}) or {})
        return json.dumps(doc)


class TextLogFormatter(logging.Formatter):
    """``msg key=value ...`` lines."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None) or {}
        return " ".join([record.getMessage(), *(f"{k}={v}" for k, v in fields.items())])


__all__ = ["Server", "ServerConfig", "ROUTES", "error", "multipart_field", "JsonLogFormatter", "TextLogFormatter"]
