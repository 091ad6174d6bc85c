"""The driver of the runtime's serving policy: events in from the event loop, effects out.

Serving policy (who is answered, who waits, who starts, who gives way, memory admission, TTL
and soft-idle, load timeouts, slot policies, load-option reloads) is the runtime's pure
:class:`~lemonpack.runtime.serving.policy.ServingPolicy`. This module only drives it: every event
(request arrived, finished or abandoned, time passed, engine ready/failed/exited/stopped) is
posted from the event loop (engine transitions arrive through the loop's queue) and its
effects are performed here (grant or reject a waiting handler, start or stop an engine
through the :class:`~lemonpack.runtime.lifecycle.runner.Runner`, POST a ``downsize_endpoint``). The idle
sweep posts ``Tick`` every :attr:`ServerConfig.idle_check` seconds and unloads a model whose
registration, recipe or model file went away (the discovery watcher).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from aiohttp import web

from lemonpack import httpclient
from lemonpack.contract.capabilities import CAPABILITIES
from lemonpack.errors import LemonpackError
from lemonpack.runtime.serving.gateway import DOWN, UP
from lemonpack.runtime.launch.options import launch_options, memory_options
from lemonpack.runtime.models.memory import engine_floor, estimate_model
from lemonpack.runtime.models.ref import OCI_SCHEME, oci_estimate
from lemonpack.runtime.lifecycle.runner import Runner
from lemonpack.runtime.selection.selector import BackendSelectionError
from lemonpack.runtime.serving.policy import (
    Arrive, EngineExited, EngineFailed, EngineReady, EngineStopped, Event, Finish, ModelInfo, Phase, Req,
    ServingPolicy, Tick, Unload, options_key,
)
from lemonpack.runtime.lifecycle.supervisor import State
from lemonpack.server.body import clip, shown
from lemonpack.server.catalog import Catalog, ModelNotFound, ServedModel
from lemonpack.server.events import REQUEST_SOURCE, EngineEvents
from lemonpack.server.metrics import Metrics
from lemonpack.server.responses import Rejected, error, selection_error
from lemonpack.server.upstream import Exchange

if TYPE_CHECKING:
    from lemonpack.server.endpoints import EndpointModels

log = logging.getLogger("lemonpack.server")

DEFAULT_MAX_IN_FLIGHT = 64
DOWNSIZE_TIMEOUT = 30.0
"""Seconds a ``downsize_endpoint`` call may take in all (connect, send, answer)."""


@dataclass
class ServerConfig:
    """Tunables: ``max_in_flight`` requests per model (over it: 429 with ``Retry-After``),
    ``load_timeout`` seconds a request waits for an engine to become ready (None: the
    recipe's probe timeout bounds it); ``ttl`` seconds idle before a model is unloaded and
    ``soft_idle`` seconds idle before its ``downsize_endpoint`` is called (None: never);
    ``idle_check`` seconds between idle sweeps; ``memory_budget`` bytes engines may hold
    together (None: no limit); ``metrics_remote``: ``/metrics`` answers non-loopback clients;
    ``clock``: the seconds (monotonic) the serving policy reads for idle times and load
    timeouts (a test passes a fake one and moves it; the sweeps still wake up every
    ``idle_check`` real seconds); ``drain_timeout`` seconds a model giving way (or the
    server shutting down) lets running requests finish before cutting them (None: no bound);
    ``upstream_read_timeout`` seconds an engine may stay silent during an exchange (None: no
    bound); ``queue_timeout`` seconds a request that does not fit in memory waits for it
    (None: 503 at once), ``queue_limit`` such requests at most; ``status_remote``: the status
    page answers non-loopback clients."""

    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    load_timeout: float | None = None
    ttl: float | None = None
    soft_idle: float | None = None
    idle_check: float = 0.25
    memory_budget: int | None = None
    metrics_remote: bool = False
    drain_timeout: float | None = 30.0
    upstream_read_timeout: float | None = None
    queue_timeout: float | None = None
    queue_limit: int = 64
    status_remote: bool = False
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)


class Driver:
    """One owner of the :class:`ServingPolicy`'s state, the event loop: :meth:`post` hands it
    events, the effect methods (``grant`` ... ``downsize``) perform what it decides.
    ``endpoints`` (the endpoint models' prober) is set by the server right after.
    ``sweeps`` counts the idle sweeps done (a test that moved ``config.clock`` waits for it to
    rise by 2: the first sweep it sees may have read the clock before the move)."""

    endpoints: EndpointModels

    def __init__(self, catalog: Catalog, runner: Runner, config: ServerConfig, metrics: Metrics) -> None:
        self.catalog, self.runner, self.config, self.metrics = catalog, runner, config, metrics
        self.known: set[str] = set()  # models this server asked for
        self.sweeps = 0
        self.policy = ServingPolicy(self, clock=config.clock, budget=config.memory_budget,
                                    max_in_flight=config.max_in_flight, ttl=config.ttl, soft_idle=config.soft_idle,
                                    load_timeout=config.load_timeout, drain_timeout=config.drain_timeout,
                                    queue_timeout=config.queue_timeout, queue_limit=config.queue_limit)
        self._events: deque[Event] = deque()
        self._handling = False
        self._waiters: dict[Req, asyncio.Future[Any]] = {}
        self._exchanges: dict[Req, Exchange] = {}  # how a granted request is cut (policy's ``cut``)
        self._ids = itertools.count(1)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._estimates: dict[tuple[Any, ...], int] = {}
        self._sessions: dict[int, tuple[Any, httpx.AsyncClient]] = {}  # downsize calls
        #: called on the loop when an engine has stopped (the proxy drops its connections)
        self.on_engine_stopped: list[Any] = []
        #: engine events: a log line each and ``GET /v1/events`` (:mod:`lemonpack.server.events`)
        self.events = EngineEvents(self.policy, ttl=config.ttl)
        runner.add_observer(self._engine_event)

    # -- events

    def post(self, event: Event) -> None:
        """Hand ``event`` to the :class:`ServingPolicy`. Call on the event loop only; an
        event posted by an effect while another is handled is queued, never nested."""
        self._events.append(event)
        if self._handling:
            return
        self._handling = True
        try:
            while self._events:
                ev = self._events.popleft()
                if isinstance(ev, (Arrive, Finish)):  # a request's event (most of them): no engine fact
                    self.events.observe(ev)
                else:
                    if isinstance(ev, EngineExited) and self.policy.phase(ev.model) is Phase.READY \
                            and not self.endpoints.pool.has(ev.model):  # an endpoint model counts endpoints_down
                        self.metrics.failures.labels(clip(ev.model, 200), "exited").inc()  # not asked to stop
                    self.events.observe(ev, remote=self.endpoints.pool.has(getattr(ev, "model", "")))
                try:
                    self.policy.handle(ev)
                    if isinstance(ev, Arrive) and self.policy.is_queued(ev.req):
                        self.events.queued(ev.model, sum(self.policy.queued().values()), self.policy.queue_timeout)
                except Exception:  # noqa: BLE001 (a bug of ours must not stop the loop)
                    log.exception("serving policy failed on %r", ev)
                finally:
                    self.events.handled(ev)
        finally:
            self._handling = False

    def _engine_event(self, model: str, old: State, new: State) -> None:
        """Runner observer (any thread, under the runner's lock): turn a transition into a
        policy event and queue it on the event loop."""
        ev: Event
        if new is State.READY:
            ev = EngineReady(model, self.runner.engine(model))
        elif new is State.STOPPING and old is State.STARTING:
            ev = EngineFailed(model, self._failure_text(model, self.runner.last_error(model) or "start failed"))
            self.metrics.failures.labels(clip(model, 200), "start_failed").inc()
        elif new is State.STOPPING:
            ev = EngineExited(model, self.runner.last_error(model) or "")
        elif new is State.STOPPED:
            ev = EngineStopped(model)
            self._call_soon(self._stopped)
        else:
            return
        self._call_soon(self.post, ev)

    def _call_soon(self, fn: Any, *args: Any) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed meanwhile (shutdown)
            pass

    def _stopped(self) -> None:
        self.drop_sessions()
        for fn in self.on_engine_stopped:
            fn()

    def _failure_text(self, model: str, msg: str) -> str:
        eng = self.runner.engine(model)
        if eng is not None and "last log lines" not in msg:
            tail = eng.logs.tail(20)
            if tail:
                msg += "\nlast log lines:\n  " + "\n  ".join(tail)
        return msg

    # -- effects (ServingEffects): called from post(), must not block

    def grant(self, req: Req, model: str, engine: Any) -> None:
        fut = self._waiters.get(req)
        if fut is not None and not fut.done():
            fut.set_result(engine)

    def reject(self, req: Req, status: int, kind: str, message: str) -> None:
        fut = self._waiters.get(req)
        if fut is not None and not fut.done():
            fut.set_exception(Rejected(status, kind, message))
        self.events.refused(req, status, kind, message)

    def cut(self, req: Req, reason: str) -> None:
        ex = self._exchanges.get(req)
        if ex is not None:
            ex.cut(reason)

    def start(self, model: str, info: ModelInfo) -> None:
        self.known.add(model)
        if info.remote:  # nothing to start: the endpoints' verdict, now or after their first probe
            pool = self.endpoints.pool
            self.endpoints.sync()
            state = pool.state(model)
            if state == UP:
                self.post(EngineReady(model, self.endpoints.engine(model)))
            elif state == DOWN:
                self.post(EngineFailed(model, pool.reason(model)))
            elif not pool.has(model):
                self.post(EngineFailed(model, "it has no endpoint any more"))
            return
        self.metrics.starts.labels(clip(model, 200)).inc()
        self.events.emit("starting", model, "starting its engine", memory=info.memory or None)
        self.catalog.load_options[model] = dict(info.options)
        fut = self.runner.request(model)
        fut.add_done_callback(lambda f: f.exception())  # the outcome arrives as a state event

    def stop(self, model: str) -> None:
        self.events.stopping(model)
        self.runner.unload(model, timeout=0)

    def downsize(self, model: str, engine: Any) -> None:
        asyncio.ensure_future(self._downsize(model, engine))

    # -- requests

    async def acquire(self, model: str, info: ModelInfo, load: bool = False) -> tuple[Req, Any]:
        """Wait until the policy grants a request for ``model``; ``(req, engine)``. Raises
        :class:`Rejected`. The caller must :meth:`release` ``req`` (also when cancelled:
        then the policy forgets a request still waiting)."""
        req = next(self._ids)
        fut = self._waiters[req] = asyncio.get_running_loop().create_future()
        self._exchanges[req] = Exchange()
        self.post(Arrive(req, model, info, load))
        try:
            return req, await fut
        except BaseException:
            self.release(req)
            raise

    def exchange(self, req: Req) -> Exchange:
        """The :class:`Exchange` of granted request ``req``: the policy's ``cut`` ends it."""
        return self._exchanges[req]

    def release(self, req: Req) -> None:
        """The request ``req`` ended (answered, failed or abandoned)."""
        self._waiters.pop(req, None)
        self._exchanges.pop(req, None)
        self.post(Finish(req))

    async def engine_left(self, model: str, eng: Any, limit: float = 5.0) -> None:
        """Until the policy no longer offers ``eng`` for ``model`` (at most ``limit`` s)."""
        deadline = time.monotonic() + limit
        while self.policy.engine(model) is eng and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    # -- models

    async def get(self, model: str) -> ServedModel:
        """``catalog.get(model)``, off the event loop when it may probe presence (I/O)."""
        hit = self.catalog.resolved(model)
        if hit is not None:
            return hit
        if self.catalog.may_probe(model):
            return await asyncio.get_running_loop().run_in_executor(None, self.catalog.get, model)
        return self.catalog.get(model)

    async def served_or_error(self, model: str) -> ServedModel | web.Response:
        """The served model ``model``, or the error response saying why there is none (404
        ``model_not_found``, 400 ``backend_selection_error``, 403 ``permission_error`` with code
        ``trust_policy_rejected`` when the trust policy rejects its engine image: the reason
        names the image, the policy file and the scope; nothing is started)."""
        try:
            served = await self.get(model)
        except ModelNotFound as e:
            return error(404, "model_not_found", str(e))
        except BackendSelectionError as e:
            return selection_error(e)
        if served.recipe is None:
            return error(404, "model_not_found", f"model {shown(model)}: {served.problem}")
        refusal = getattr(self.runner, "trust_refusal", None)
        if not served.remote and refusal is not None:
            why = (refusal(served.name) if self.runner.trust_checked(served.name)  # cached: no thread hop
                   else await asyncio.get_running_loop().run_in_executor(None, refusal, served.name))
            if why:
                return error(403, "permission_error", f"model {shown(model)}: {why}", code="trust_policy_rejected")
        return served

    async def info(self, served: ServedModel, options: dict[str, Any] | None = None) -> ModelInfo:
        """What admission needs of ``served`` (memory estimated before start, the engine's floor
        included: :func:`~lemonpack.runtime.models.memory.engine_floor`; an endpoint model is
        ``remote`` and holds nothing here). ``options``: the load options the engine
        is to start with (a ``POST /v1/load``'s, applied); None: the ones it was last loaded
        with (:attr:`Catalog.load_options`). For a model whose engine is ready (and ``options``
        None) it is the info that engine was admitted with."""
        if options is None and not served.remote and (running := self.policy.running_info(served.name)) is not None:
            return running  # a ready engine: what it was admitted with (the hot path: no option merge, no stat)
        rec = served.recipe
        modes = sorted({m for c in rec.capabilities if c in CAPABILITIES and (m := CAPABILITIES[c].mode)}) \
            if rec is not None else []
        if served.remote:
            return ModelInfo(kind=modes[0] if modes else "chat", remote=True)
        opts = self.catalog.load_options.get(served.name, {}) if options is None else options
        floor = engine_floor(rec)  # a recipe's bad field: 500 naming its file and key (the middleware)
        return ModelInfo(memory=await self._estimate(served, opts) + floor,
                         slot_policy=rec.slot_policy if rec else "standard",
                         kind=modes[0] if modes else "chat", options=options_key(opts))

    async def _estimate(self, served: ServedModel, options: Mapping[str, Any]) -> int:
        """:func:`lemonpack.runtime.models.memory.estimate_model` of the model's main file at the
        context size and KV cache types its launch would use: the options of
        :func:`lemonpack.runtime.launch.options.launch_options` (the launch plan's own merge)
        read by :func:`~lemonpack.runtime.launch.options.memory_options`. Cached per file,
        size, mtime and those figures; 0 when the model is not a local file or an option
        value is one the launch would refuse (the start then says why)."""
        path = (served.spec.checkpoints or {}).get("main")
        if path and str(path).startswith(OCI_SCHEME):
            return await self._oci_estimate(served, str(path), options)
        if not path or not os.path.isabs(os.path.expanduser(str(path))):
            return 0
        path = os.path.expanduser(str(path))
        try:
            mem = memory_options(launch_options(served.recipe, served.spec.recipe_options, options))
            st = os.stat(path)
        except (OSError, LemonpackError):
            return 0
        key = (path, st.st_size, st.st_mtime_ns, mem.ctx_size, mem.cache_type_k, mem.cache_type_v)
        got = self._estimates.get(key)
        if got is None:
            try:
                est = await asyncio.get_running_loop().run_in_executor(
                    None, estimate_model, path, mem.ctx_size, mem.cache_type_k, mem.cache_type_v)
            except LemonpackError:
                return 0
            got = self._estimates[key] = est.total
            if len(self._estimates) > 1024:
                self._estimates.pop(next(iter(self._estimates)))
        return got

    async def _oci_estimate(self, served: ServedModel, reference: str, options: Mapping[str, Any]) -> int:
        """The estimate of an ``oci://`` main checkpoint from the artifact's GGUF header, read
        before any weight is fetched (:func:`lemonpack.runtime.models.ref.oci_estimate`; nothing
        fetched with ``--offline``). Cached per reference (a digest names the bytes) and
        figures; 0 when it cannot be known (the start then pulls, or says why) and for a
        ``self_managed`` recipe (its engine fetches its own weights: nothing is fetched for it)."""
        if served.recipe is not None and served.recipe.model_management == "self_managed":
            return 0
        try:
            mem = memory_options(launch_options(served.recipe, served.spec.recipe_options, options))
        except LemonpackError:
            return 0
        key = (reference, mem.ctx_size, mem.cache_type_k, mem.cache_type_v)
        got = self._estimates.get(key)
        if got is None:
            try:
                est = await asyncio.get_running_loop().run_in_executor(None, functools.partial(
                    oci_estimate, reference, mem.ctx_size, mem.cache_type_k, mem.cache_type_v,
                    offline=self.catalog.offline))
            except LemonpackError:
                return 0
            if est is None:
                return 0
            got = self._estimates[key] = est.total
        return got

    # -- life

    def start_loops(self) -> None:
        """On the event loop: remember it and start the idle sweep."""
        self.loop = asyncio.get_running_loop()
        self._sweeper = asyncio.ensure_future(self._sweep_loop())

    async def close(self) -> None:
        """Stop the sweep and close the downsize sessions."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        for _eng, s in list(self._sessions.values()):
            await s.aclose()
        self._sessions.clear()

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
            if self.policy.phase(name) in (Phase.READY, Phase.STARTING) and not self.policy.giving_way(name) \
                    and not self.catalog.exists(name):
                log.info("%s: its model or recipe is gone; unloading", name, extra={"fields": {"model": name}})
                token = REQUEST_SOURCE.set("the discovery watcher (its model or recipe is gone)")
                try:
                    self.post(Unload(name))
                finally:
                    REQUEST_SOURCE.reset(token)
        self.sweeps += 1

    # -- downsize

    def drop_sessions(self) -> None:
        """Close the downsize sessions of engines that have exited."""
        for k, (eng, sess) in list(self._sessions.items()):
            if eng.poll() is not None:
                asyncio.ensure_future(sess.aclose())
                del self._sessions[k]

    def _session(self, eng: Any) -> httpx.AsyncClient:
        """The downsize client of engine ``eng``: one per engine, kept for the engine's life
        (never shared with another engine). Clients of engines that have exited are closed
        here, never one in use. Made by :func:`lemonpack.httpclient.async_client`: no proxy
        (``trust_env=False``), no ``User-Agent``, no pool bound; the time bound is
        :data:`DOWNSIZE_TIMEOUT` on the whole call (:meth:`_downsize`)."""
        key = id(eng)
        got = self._sessions.get(key)
        if got is not None and got[0] is eng:
            return got[1]
        for k, (old_eng, old) in list(self._sessions.items()):
            if old_eng.poll() is not None or k == key:  # an engine gone (or an id reused)
                asyncio.ensure_future(old.aclose())
                del self._sessions[k]
        s = httpclient.async_client(timeout=None, trust_env=False, user_agent=None, max_connections=None)
        self._sessions[key] = (eng, s)
        return s

    async def _downsize(self, name: str, eng: Any) -> None:
        """POST the recipe's ``downsize_endpoint`` to ``eng`` (none declared: nothing)."""
        try:
            served = await self.get(name)
        except LemonpackError:
            return
        path = served.recipe.downsize_endpoint if served.recipe is not None else None
        if not path:
            return
        client = self._session(eng)

        async def post() -> int:
            async with client.stream("POST", eng.url + path, content=b"") as r:
                async for _ in r.aiter_raw():  # read whole (keep-alive), never decoded
                    pass
                return r.status_code

        try:
            status = await asyncio.wait_for(post(), DOWNSIZE_TIMEOUT)
            log.info("%s: downsize %s -> %s", name, path, status, extra={"fields": {"model": name}})
        except (httpx.HTTPError, httpx.InvalidURL, asyncio.TimeoutError) as e:
            log.warning("%s: downsize %s failed: %s", name, path, e)


__all__ = ["Driver", "ServerConfig", "DEFAULT_MAX_IN_FLIGHT"]
