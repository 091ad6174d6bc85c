"""Endpoint models: registered models served by engines lemonpack does not spawn.

Their health and the choice of endpoint per request are the runtime's pure
:class:`~lemonpack.runtime.serving.gateway.EndpointPool`; here a probe task runs the recipe's
``health_probe`` against each endpoint when the pool says it is due and reports the model up
(``EngineReady``) or down (``EngineFailed``/``EngineExited``) to the serving policy. A
request is granted like any other (same in-flight limits and metrics), then relayed by the
proxy to the endpoint the pool picks, through one :class:`~lemonpack.server.upstream.Upstream`
per endpoint URL (:meth:`EndpointModels.upstream`).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from lemonpack.runtime.serving.gateway import DOWN, UP, EndpointPool
from lemonpack.runtime.engines.probes import check_once, probe_client
from lemonpack.runtime.serving.policy import EngineExited, EngineFailed, EngineReady, Event, Phase, Unload
from lemonpack.server.body import clip
from lemonpack.server.catalog import Catalog
from lemonpack.server.metrics import Metrics
from lemonpack.server.upstream import Upstream

log = logging.getLogger("lemonpack.server")


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


class Target:
    """One endpoint URL a request is relayed to."""

    def __init__(self, url: str) -> None:
        self.url = url

    def poll(self) -> None:
        return None


class EndpointModels:
    """The endpoint models' probes and connections. ``post`` hands an event to the serving
    policy, ``phase`` reads a model's phase there; ``interval`` seconds between re-reads of
    the registry's endpoint models."""

    def __init__(self, catalog: Catalog, metrics: Metrics, post: Callable[[Event], None],
                 phase: Callable[[str], Phase], interval: float) -> None:
        self.catalog, self.metrics, self._post, self._phase, self._interval = catalog, metrics, post, phase, interval
        #: Endpoint models (served by engines lemonpack does not spawn): health and choice.
        self.pool = EndpointPool(time.monotonic)
        self._upstreams: dict[str, Upstream] = {}
        self._engines: dict[str, RemoteEngine] = {}
        self._task: asyncio.Task[None] | None = None
        self._client: Any = None
        self._ssl_ctx: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        #: called on the loop with ``(url, reason)`` when a probe takes an endpoint down (the
        #: proxy ends the requests in flight there)
        self.on_down: list[Callable[[str, str], Any]] = []
        #: ``serve --upstream-read-timeout`` (set by the server)
        self.read_timeout: float | None = None

    def engine(self, model: str) -> RemoteEngine:
        """The :class:`RemoteEngine` of ``model`` (one per model)."""
        eng = self._engines.get(model)
        if eng is None:
            eng = self._engines[model] = RemoteEngine(model, self.pool)
        return eng

    def upstream(self, url: str) -> Upstream:
        """The connection pool of endpoint ``url`` (dropped when the endpoint goes down)."""
        pool = self._upstreams.get(url)
        if pool is None:
            u = urllib.parse.urlsplit(url)
            ctx = None
            if u.scheme == "https":  # one context (the trust store is read once), shared
                ctx = self._ssl_ctx = self._ssl_ctx or ssl.create_default_context()
            pool = self._upstreams[url] = Upstream(u.hostname or "", u.port or 80, ssl=ctx,
                                                   read_timeout=self.read_timeout)
        return pool

    def _drop_upstream(self, url: str) -> None:
        pool = self._upstreams.pop(url, None)
        if pool is not None:
            pool.close()

    def connect_failed(self, model: str, url: str, why: str) -> None:
        """A request could not reach ``url``: out until its probe passes."""
        self._drop_upstream(url)
        log.warning("%s: endpoint %s taken out: %s", model, url, why, extra={"fields": {"model": model}})
        change = self.pool.connect_failed(model, url, why)
        if change is not None:
            self._changed(model, change)

    def _changed(self, model: str, state: str) -> None:
        """The pool says ``model`` went up or down: tell the policy (and the metrics)."""
        if state == UP:
            log.info("%s: endpoint model up", model, extra={"fields": {"model": model}})
            self._post(EngineReady(model, self.engine(model)))
        elif state == DOWN:
            reason = self.pool.reason(model)
            log.warning("%s: every endpoint is down: %s", model, reason, extra={"fields": {"model": model}})
            self.metrics.failures.labels(clip(model, 200), "endpoints_down").inc()
            if self._phase(model) is Phase.READY:
                self._post(EngineExited(model, reason))
            else:
                self._post(EngineFailed(model, reason))

    def sync(self) -> None:
        """Declare every registered endpoint model to the pool (its endpoints and its
        recipe's probe interval); forget those no longer registered with endpoints."""
        seen = set()
        for m in self.catalog.models():
            if not m.remote:
                continue
            seen.add(m.name)
            probe = m.recipe.health_probe if m.recipe is not None else None
            interval = probe.poll_interval_ms / 1000 if probe is not None else 1.0
            self.pool.set_model(m.name, m.endpoints, interval)
        for name in self.pool.models():
            if name not in seen:
                self.pool.drop_model(name)
                self._engines.pop(name, None)
                self._post(Unload(name))

    def state(self, name: str) -> tuple[str, str | None]:
        """``("ready"|"down"|"unknown", reason)`` of an endpoint model."""
        state = self.pool.state(name)
        if state == UP:
            return "ready", None
        if state == DOWN:
            return "down", self.pool.reason(name)
        return "unknown", "not probed yet"

    def rows(self) -> list[tuple[str, str, bool, int]]:
        """``(model, url, up, in flight)`` of every endpoint (for /metrics)."""
        return [(name, e.url, e.state == UP, e.in_flight) for name in self.pool.models()
                for e in self.pool.endpoints(name)]

    # -- probing

    def start(self) -> None:
        """On the event loop: start probing."""
        self._task = asyncio.ensure_future(self._probe_loop())

    def close(self) -> None:
        """Stop probing; close every connection."""
        if self._task is not None:
            self._task.cancel()
        for pool in self._upstreams.values():
            pool.close()
        self._upstreams.clear()
        if self._client is not None:
            self._client.close()

    async def _probe_loop(self) -> None:
        """Run every probe the pool says is due (off the event loop) and apply the results."""
        loop = asyncio.get_running_loop()
        synced = 0.0
        while True:
            try:
                if time.monotonic() - synced >= self._interval:
                    synced = time.monotonic()
                    self.sync()
                for model, url in self.pool.due():
                    asyncio.ensure_future(self._probe(loop, model, url))
            except Exception:  # noqa: BLE001 (a failure must not end endpoint probing)
                log.exception("endpoint probing failed")
            await asyncio.sleep(0.02)

    async def _probe(self, loop: asyncio.AbstractEventLoop, model: str, url: str) -> None:
        served = next((m for m in self.catalog.models() if m.name == model), None)
        probe = served.recipe.health_probe if served is not None and served.recipe is not None else None
        u = urllib.parse.urlsplit(url)
        ok: bool
        if probe is None:
            ok, what = False, "its recipe is not discovered"
        else:
            if probe.type == "process":  # nothing of ours to watch: a connection is the best sign
                probe = replace(probe, type="tcp")
            p = probe
            try:
                ok, what = await loop.run_in_executor(None, lambda: check_once(
                    p, u.hostname or "", u.port or 80, self._probe_http(),
                    timeout=min(2.0, max(0.5, float(p.timeout_seconds))), scheme=u.scheme))
            except Exception as e:  # noqa: BLE001 (a probe that breaks counts as failed)
                ok, what = False, f"probe failed: {type(e).__name__}"
        if ok is False:
            self._drop_upstream(url)
            for fn in self.on_down:  # a failed probe takes it down at once: so are its requests
                fn(url, what)
        change = self.pool.observe(model, url, bool(ok), what)
        if change is not None:
            self._changed(model, change)

    def _probe_http(self) -> Any:
        """The probes' shared httpx client (made on first use, off the event loop: loading
        the CA bundle takes ~100 ms; it verifies certificates of https endpoints)."""
        with self._lock:
            if self._client is None:
                # the system trust store (SSL_CERT_FILE / SSL_CERT_DIR honoured), as the relay's
                self._client = probe_client(verify=ssl.create_default_context())
            return self._client


__all__ = ["EndpointModels", "RemoteEngine", "Target"]
