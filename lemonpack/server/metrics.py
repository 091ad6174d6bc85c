"""``GET /metrics``: Prometheus text format (``prometheus_client``, one registry per server).

Series: ``lemonpack_requests_total{model,route,status}``,
``lemonpack_request_duration_seconds`` and ``lemonpack_time_to_first_byte_seconds``
histograms (``model``, ``route``), ``lemonpack_inflight_requests{model}``,
``lemonpack_engine_starts_total{model}``, ``lemonpack_engine_failures_total{model,reason}``
(``reason``: ``start_failed``, ``exited``), ``lemonpack_model_memory_bytes{model}`` (the
estimate of each engine not stopped) and ``lemonpack_memory_budget_bytes``. Endpoint models
(served by engines lemonpack does not spawn) have the same request series, plus
``lemonpack_endpoint_up{model,endpoint}`` (1 up, 0 down or not probed yet) and
``lemonpack_endpoint_inflight_requests{model,endpoint}``; ``reason="endpoints_down"`` counts
the times every endpoint of a model went down. A request whose answer was cut after its head
was sent (the engine died or stalled, a drain timed out, a forced unload) counts as
``status="502"``. Model names are
clipped to 200 characters in labels.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from lemonpack.server.body import clip

#: Requests counted before they are applied to the collectors (:meth:`Metrics.request`).
BATCH = 256
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    """The server's collectors in their own :class:`CollectorRegistry`; ``snapshot`` is a
    callable returning ``(in_flight by model, memory by model, budget or None)`` read at
    each scrape. Read the collectors through :meth:`render` (or after :meth:`flush`):
    request counts are applied in batches."""

    def __init__(self, snapshot, endpoints=None) -> None:
        """``endpoints``: a callable returning ``(model, url, up, in flight)`` rows."""
        self.registry = r = CollectorRegistry(auto_describe=True)
        self._snapshot = snapshot
        self.requests = Counter("lemonpack_requests", "Requests answered", ("model", "route", "status"), registry=r)
        self.duration = Histogram("lemonpack_request_duration_seconds", "Request duration", ("model", "route"),
                                  buckets=BUCKETS, registry=r)
        self.ttfb = Histogram("lemonpack_time_to_first_byte_seconds", "Time to the first response byte",
                              ("model", "route"), buckets=BUCKETS, registry=r)
        self.inflight = Gauge("lemonpack_inflight_requests", "Requests busy or waiting", ("model",), registry=r)
        self.starts = Counter("lemonpack_engine_starts", "Engines started", ("model",), registry=r)
        self.failures = Counter("lemonpack_engine_failures", "Engine start failures and exits", ("model", "reason"),
                                registry=r)
        self.memory = Gauge("lemonpack_model_memory_bytes", "Estimated memory of each engine", ("model",), registry=r)
        self.budget = Gauge("lemonpack_memory_budget_bytes", "Memory budget (0: none)", registry=r)
        self._seen: set[str] = set()
        self._children: dict[tuple, tuple] = {}  # (model, route, status) -> the three series' children
        self._pending: list[tuple] = []  # requests counted, not applied yet (flush)
        self._endpoints = endpoints
        self.endpoint_up = Gauge("lemonpack_endpoint_up", "Endpoint of an endpoint model up (1) or not (0)",
                                 ("model", "endpoint"), registry=r)
        self.endpoint_inflight = Gauge("lemonpack_endpoint_inflight_requests", "Requests in flight per endpoint",
                                       ("model", "endpoint"), registry=r)

    def request(self, model: str | None, route: str, status: int, seconds: float, ttfb: float | None) -> None:
        """Count one answered request. The series' children are kept by their labels (no
        ``labels()`` look-up per request; the labels are bounded by the caller: resolved
        model names, route patterns, statuses). The counts are applied in batches
        (:data:`BATCH` requests, and always before :meth:`render` reads them): a scrape
        sees every request answered before it, and the request's hot path pays one append
        (``bench/proxy.py``; the collectors' locks and bucket walks run back to back)."""
        key = (model, route, status)
        kids = self._children.get(key)
        if kids is None:  # a new series: made now (its _created is this request's time)
            if len(self._children) >= 4096:
                self._children.clear()
            m = clip(model or "", 200)
            kids = self._children[key] = (self.requests.labels(m, route, str(status)),
                                          self.duration.labels(m, route), self.ttfb.labels(m, route))
        pending = self._pending
        pending.append((kids, seconds, ttfb))
        if len(pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        """Apply the requests counted since the last flush to the collectors."""
        pending, self._pending = self._pending, []
        for kids, seconds, ttfb in pending:
            kids[0].inc()
            kids[1].observe(seconds)
            if ttfb is not None:
                kids[2].observe(ttfb)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        self.flush()
        inflight, memory, budget = self._snapshot()
        for name in self._seen | set(inflight):
            self.inflight.labels(clip(name, 200)).set(inflight.get(name, 0))
        for name in self._seen | set(memory):
            self.memory.labels(clip(name, 200)).set(memory.get(name, 0))
        self._seen |= set(inflight) | set(memory)
        self.budget.set(budget or 0)
        if self._endpoints is not None:
            self.endpoint_up.clear()
            self.endpoint_inflight.clear()
            for model, url, up, n in self._endpoints():
                self.endpoint_up.labels(clip(model, 200), url).set(1 if up else 0)
                self.endpoint_inflight.labels(clip(model, 200), url).set(n)
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


__all__ = ["Metrics"]
