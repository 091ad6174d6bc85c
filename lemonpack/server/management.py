"""The management routes (RFC sections 10, 21): ``GET /v1/models``, ``POST /v1/load``,
``POST /v1/unload``, ``GET /v1/health``, ``GET /v1/system-info`` and ``GET /metrics``.

``POST /v1/load`` of an endpoint model waits for a passing probe; ``POST /v1/unload`` of one
stops nothing (lemonpack does not run its engines). Load options: :mod:`.loadopts`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from aiohttp import web

from lemonpack.errors import LemonpackError, one_line
from lemonpack.hosts import is_loopback
from lemonpack.runtime.serving.gateway import UP
from lemonpack.runtime.launch.options import launch_options
from lemonpack.runtime.launch.tokens import check_load_options
from lemonpack.runtime.serving.policy import Cut, Phase, Unload
from lemonpack.runtime.lifecycle.supervisor import State
from lemonpack.server.body import BadBody, parse_json, read_bounded, shown
from lemonpack.server.driver import Driver
from lemonpack.server.endpoints import EndpointModels
from lemonpack.server.loadopts import load_request, options_used, split_options
from lemonpack.server.responses import Rejected, error

log = logging.getLogger("lemonpack.server")


class Management:
    """The management handlers over the server's ``driver`` and ``endpoints``."""

    def __init__(self, driver: Driver, endpoints: EndpointModels) -> None:
        self.driver, self.endpoints = driver, endpoints
        self.catalog, self.runner, self.config = driver.catalog, driver.runner, driver.config

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
        doc: dict[str, Any] = {"object": "list", "data": self.model_rows()}
        if self.catalog.registry_problem:
            doc["warnings"] = [self.catalog.registry_problem + "; the last good model registry is served"]
        return web.json_response(doc)

    def model_rows(self) -> list[dict[str, Any]]:
        """The ``data`` of ``GET /v1/models`` (the status page lists the same rows)."""
        data = []
        for m in self.catalog.models():
            state, reason = self._state(m.name)
            extra: dict[str, Any] = {"remote": m.remote}
            if m.remote:
                state, reason = self.endpoints.state(m.name)
                extra["endpoints"] = [{"url": e.url, "state": e.state, "reason": e.reason,
                                       "in_flight": e.in_flight} for e in self.endpoints.pool.endpoints(m.name)]
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
        return data

    async def _body_model(self, request: web.Request) -> tuple[str | None, bool]:
        """The model an unload names (``model_name``, ``model`` or ``?model=``) and whether
        it is forced (``"force": true`` or ``?force=true``); a field of the wrong type is
        :class:`BadBody` (400 naming it)."""
        doc = parse_json(await read_bounded(request) or b"{}")
        force = request.query.get("force", "").lower() in ("1", "true", "yes")
        name = None
        if isinstance(doc, dict):
            if "force" in doc:
                if not isinstance(doc["force"], bool):
                    raise BadBody(f"field 'force' must be true or false, not {type(doc['force']).__name__}")
                force = force or doc["force"]
            for k in ("model_name", "model"):
                if k in doc and not isinstance(doc[k], str):
                    raise BadBody(f"field {k!r} must be a string (the model's name), not {type(doc[k]).__name__}")
                if doc.get(k) and name is None:
                    name = str(doc[k])
        return name or request.query.get("model"), force

    async def load(self, request: web.Request) -> web.Response:
        """``POST /v1/load {"model_name": ..., options}``: start the engine and wait until
        ready. Options the recipe takes (:mod:`.loadopts`) that differ from the running
        engine's restart it with them once its requests in flight end; the answer says which
        options are in effect and which were ignored, and why."""
        doc = parse_json(await read_bounded(request) or b"{}")
        model, options, unknown = load_request(doc, request.query.get("model"))
        if unknown:
            log.warning("POST /v1/load: ignoring unknown field(s) %s", ", ".join(repr(k) for k in unknown),
                        extra={"fields": {"model": shown(model)}})
        served = await self.driver.served_or_error(model)
        if isinstance(served, web.Response):
            return served
        assert served.recipe is not None
        info = await self.driver.info(served)
        extra: dict[str, Any] = {"ignored_fields": unknown} if unknown else {}
        if served.remote:  # wait for a passing probe; nothing is started
            limit = self.config.load_timeout or served.recipe.health_probe.timeout_seconds
            try:
                req, eng = await asyncio.wait_for(self.driver.acquire(model, info, load=True), limit)
            except Rejected as e:
                return e.response()
            except asyncio.TimeoutError:
                return error(503, "model_unavailable", f"model {shown(model)} is down after {limit:g}s: "
                             f"{self.endpoints.pool.reason(model)}", headers={"Retry-After": "1"})
            self.driver.release(req)
            return web.json_response({"status": "success", "model": model, "state": "ready", "remote": True,
                                      "endpoints": [e.url for e in self.endpoints.pool.endpoints(model)
                                                    if e.state == UP],
                                      "message": "served by its endpoints; lemonpack does not start them", **extra})
        if options is not None:
            try:  # a bad value is the client's mistake, found before the running engine is touched
                check_load_options(options)
            except LemonpackError as e:
                return error(400, "invalid_request_error", one_line(str(e)))
            device = launch_options(served.recipe, served.spec.recipe_options, options).get("device")
            used = options_used(served.recipe, self.catalog.facts, str(device or "") or None)  # the launch's block
            applied, ignored = split_options(options, used, served.recipe_id)
            if ignored:
                log.warning("%s: load options not applied: %s", model,
                            "; ".join(f"{k}: {why}" for k, why in ignored.items()), extra={"fields": {"model": model}})
                extra["ignored_options"] = ignored
            info = await self.driver.info(served, applied)  # admitted at the options it starts with
        try:
            req, eng = await self.driver.acquire(model, info, load=True)
        except Rejected as e:
            return e.response()
        self.driver.release(req)
        return web.json_response({"status": "success", "model": model, "state": "ready", "url": eng.url,
                                  "options": dict(info.options), **extra})

    async def unload(self, request: web.Request) -> web.Response:
        """``POST /v1/unload {"model_name": ...}``: the model gives way (no new request is
        granted, running ones finish within ``drain_timeout``, then it stops) and the answer
        comes once it stopped; ``"force": true`` (or ``?force=true``) cuts its running
        requests and stops it at once. The answer says how many requests were cut."""
        model, force = await self._body_model(request)
        if not model:
            return error(400, "invalid_request_error", "no model given")
        entry = self.catalog.entries().get(model)
        if entry is None and model not in self.driver.known:
            try:  # a model file spelled another way: the name it is served under (its real path)
                model = (await self.driver.get(model)).name
            except LemonpackError:
                pass
        if entry is None and model not in self.driver.known:
            return error(404, "model_not_found", f"model {shown(model)} is not registered (lemonpack models list)")
        if entry is not None and entry.endpoints:
            return web.json_response({"status": "success", "model": model, "state": "remote", "remote": True,
                                      "message": f"{model} is served by its endpoints "
                                                 f"({', '.join(entry.endpoints)}); lemonpack does not stop them"})
        policy = self.driver.policy
        before = policy.cuts_of(model)
        running = policy.in_flight().get(model, 0)
        log.info("%s: unload%s requested (%d request(s) in flight)", model, " (force)" if force else "", running,
                 extra={"fields": {"model": model}})
        self.driver.post(Cut(model) if force else Unload(model))
        while policy.phase(model) is not Phase.STOPPED:  # drained (bounded by drain_timeout), then stopped
            await asyncio.sleep(0.05)
        await asyncio.get_running_loop().run_in_executor(None, self.runner.unload, model)
        cut = policy.cuts_of(model) - before
        return web.json_response({"status": "success", "model": model, "state": "unloaded", "force": force,
                                  "cut": cut, "message": f"{model}: unloaded" + (
                                      f"; {cut} request(s) in flight were cut" if cut else
                                      "; no request was cut" if running else "")})

    async def health(self, request: web.Request) -> web.Response:
        """``GET /v1/health``: the server's own liveness and the loaded models."""
        loaded = [m.name for m in self.catalog.models() if self.runner.state(m.name) is State.READY
                  or (m.remote and self.endpoints.pool.state(m.name) == UP)]
        return web.json_response({"status": "ok", "loaded": loaded})

    async def metrics(self, request: web.Request) -> web.Response:
        """``GET /metrics``: Prometheus text (:mod:`lemonpack.server.metrics`); loopback
        clients only unless ``metrics_remote``."""
        if not self.config.metrics_remote and not is_loopback(request.remote):
            return error(403, "permission_error", "/metrics answers loopback clients only (serve --metrics-remote)")
        data, ctype = self.driver.metrics.render()
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


__all__ = ["Management"]
