"""The HTTP front of ``lemonpack serve``: the aiohttp application and the parts it wires.

Built on one asyncio loop: aiohttp's server, the proxy's own relay client
(:mod:`lemonpack.server.upstream`) and httpx clients from :mod:`lemonpack.httpclient` (the
endpoint probes, ``downsize_endpoint`` calls). :class:`Server` holds
one of each part and routes to them:

- :mod:`lemonpack.server.proxy`: the inference routes (RFC section 5 under ``/v1/`` and
  ``/api/v1/``), capability-gated, streamed to the engine and back;
- :mod:`lemonpack.server.management`: ``GET /v1/models``, ``POST /v1/load``,
  ``POST /v1/unload``, ``GET /v1/health``, ``GET /v1/system-info``, ``GET /metrics``;
- :mod:`lemonpack.server.driver`: the loop driving the runtime's pure
  :class:`~lemonpack.runtime.serving.policy.ServingPolicy` (engines through the
  :class:`~lemonpack.runtime.lifecycle.runner.Runner`, one start for N concurrent cold requests);
- :mod:`lemonpack.server.endpoints`: endpoint models (engines lemonpack does not spawn);
- :mod:`lemonpack.server.events`: engine events, a log line each and ``GET /v1/events``;
- :mod:`lemonpack.server.status`: the status page (``GET /``, its files, ``GET /v1/status``);
- :mod:`lemonpack.server.responses` (the error envelope), :mod:`lemonpack.server.logs`
  (access lines, engine output), :mod:`lemonpack.server.metrics`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from lemonpack.runtime.lifecycle.runner import Runner
from lemonpack.runtime.serving.policy import Drain, ServingPolicy, Shutdown
from lemonpack.server.body import LIMITS, MAX_JSON_BYTES, BodyLimits, clip, multipart_field, release_body
from lemonpack.server.catalog import Catalog
from lemonpack.server.driver import DEFAULT_MAX_IN_FLIGHT, Driver, ServerConfig
from lemonpack.server.connections import Limits
from lemonpack.server.endpoints import EndpointModels
from lemonpack.server.events import REQUEST_SOURCE
from lemonpack.server.logs import JsonLogFormatter, TextLogFormatter, engine_output
from lemonpack.server.management import Management
from lemonpack.server.metrics import Metrics
from lemonpack.server.proxy import HOP_BY_HOP, ROUTES, Proxy
from lemonpack.server.responses import error, errors_middleware
from lemonpack.server.status import StatusPage

log = logging.getLogger("lemonpack.server")


class Server:
    """The application state: the :class:`Catalog`, the :class:`Runner` (default: one over
    ``catalog.plan`` whose engines' output goes to the ``lemonpack.server.engine`` logger),
    and the parts (``driver``, ``endpoints``, ``proxy``, ``management``, ``metrics``).
    :meth:`app` builds the aiohttp application."""

    driver: Driver
    policy: ServingPolicy
    endpoints: EndpointModels
    #: connection bounds (:mod:`lemonpack.server.connections`; None: their defaults) and the
    #: site serving it (its ``guard`` counts connections), set by :func:`lemonpack.server.main.serve`
    limits: Limits | None = None
    site: Any = None

    def __init__(self, catalog: Catalog, runner: Runner | None = None, config: ServerConfig | None = None,
                 body_limits: BodyLimits | None = None):
        self.catalog = catalog
        self.body_limits = body_limits or BodyLimits()
        self.runner = runner or Runner(catalog.plan, on_spawn=engine_output, judged_references=catalog.judged_references)
        self.config = cfg = config or ServerConfig()
        self.metrics = Metrics(lambda: ({**dict.fromkeys(self.driver.known, 0), **self.policy.in_flight()},
                                       self.policy.memory(), self.policy.budget),
                               endpoints=lambda: self.endpoints.rows())
        self.driver = Driver(catalog, self.runner, cfg, self.metrics)
        self.policy = self.driver.policy
        self.endpoints = self.driver.endpoints = EndpointModels(
            catalog, self.metrics, self.driver.post, self.policy.phase, cfg.idle_check)
        self.endpoints.read_timeout = cfg.upstream_read_timeout
        self.proxy = Proxy(self.driver, self.endpoints, self.metrics)
        self.management = Management(self.driver, self.endpoints)
        self.status = StatusPage(self, remote=cfg.status_remote)

    @property
    def in_flight(self) -> dict[str, int]:
        """Requests busy or waiting for an engine, by model (the policy's count)."""
        return self.policy.in_flight()

    @property
    def known(self) -> set[str]:
        """Models this server asked for."""
        return self.driver.known

    def post(self, event: Any) -> None:
        """Hand ``event`` to the serving policy (:meth:`Driver.post`)."""
        self.driver.post(event)

    def sweep(self) -> None:
        """One idle sweep (:meth:`Driver.sweep`)."""
        self.driver.sweep()

    def app(self) -> web.Application:
        """The aiohttp application with every route under ``/v1`` and ``/api/v1``, ``/metrics``
        and the status page (``/``, ``/status/NAME``, ``/v1/status``)."""
        app = web.Application(client_max_size=MAX_JSON_BYTES, middlewares=[errors_middleware, _bodies_released])
        app[LIMITS] = self.body_limits
        m = self.management
        for prefix in ("/v1", "/api/v1"):
            app.router.add_get(prefix + "/models", m.models)
            app.router.add_post(prefix + "/load", _sourced(m.load))
            app.router.add_post(prefix + "/unload", _sourced(m.unload))
            app.router.add_get(prefix + "/events", self.driver.events.stream)
            app.router.add_get(prefix + "/health", m.health)
            app.router.add_get(prefix + "/system-info", m.system_info)
            for path, (method, _cap) in ROUTES.items():
                app.router.add_route(method, prefix + path.replace("{id}", "{id:[^/]+}"), self.proxy.handle)
        app.router.add_get("/metrics", m.metrics)
        app.router.add_get("/", self.status.page)
        app.router.add_get("/status/{name}", self.status.asset)
        app.router.add_get("/v1/status", self.status.status)
        app.on_startup.append(self._startup)
        app.on_shutdown.append(self._shutdown)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _shutdown(self, _app: web.Application) -> None:
        self.driver.events.close()  # event streams end first: they never hold the shutdown

    async def drain(self, again: Callable[[], bool], grace: float = 3.0) -> int:
        """A graceful shutdown, on the loop (the server no longer listens): the policy's
        ``Drain`` (waiting and new requests get 503, idle engines stop, running requests
        finish within ``drain_timeout``, then are cut), until nothing runs or ``again()``
        says a second stop signal came (then everything left is cut at once: ``Shutdown``).
        Waits up to ``grace`` seconds more for cut requests to write their error ends.
        Returns how many requests the shutdown cut."""
        policy = self.policy
        before = policy.cuts
        busy = policy.busy()
        if busy:
            t = self.config.drain_timeout
            log.info("stopping: %d request(s) in flight may finish%s; a second SIGTERM/SIGINT cuts them", busy,
                     f" within {t:g}s" if t is not None else "")
        self.driver.post(Drain())
        while policy.busy() and not again():
            await asyncio.sleep(0.05)
        if policy.busy():
            log.warning("stopping now: cutting %d request(s) in flight", policy.busy())
        self.driver.post(Shutdown())
        end = time.monotonic() + grace
        while policy.busy() and time.monotonic() < end:
            await asyncio.sleep(0.02)
        return policy.cuts - before

    async def _startup(self, _app: web.Application) -> None:
        self.driver.start_loops()
        self.endpoints.start()

    async def _cleanup(self, _app: web.Application) -> None:
        self.endpoints.close()
        self.driver.post(Shutdown())
        await self.driver.close()
        self.proxy.close()


@web.middleware
async def _bodies_released(request: web.Request, handler: Any) -> web.StreamResponse:
    """The request's share of the body budget is given back when its handler ends."""
    try:
        return await handler(request)
    finally:
        release_body(request)


def _sourced(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
             ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``handler`` with :data:`~lemonpack.server.events.REQUEST_SOURCE` set to the request
    (``POST /v1/unload from 127.0.0.1``): the ``by`` of the engine events it causes."""
    async def sourced(request: web.Request) -> web.StreamResponse:
        token = REQUEST_SOURCE.set(f"{request.method} {clip(request.path, 100)} from {request.remote}")
        try:
            return await handler(request)
        finally:
            REQUEST_SOURCE.reset(token)
    return sourced


__all__ = ["Server", "ServerConfig", "ROUTES", "HOP_BY_HOP", "DEFAULT_MAX_IN_FLIGHT", "error", "multipart_field",
           "JsonLogFormatter", "TextLogFormatter"]
