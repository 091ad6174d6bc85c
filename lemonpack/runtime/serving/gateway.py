"""Endpoint models: health and selection of engines lemonpack does not spawn (pure, no I/O).

A registered model with ``endpoints`` (:mod:`lemonpack.runtime.models.registry`) is served by engines
running elsewhere (a Kubernetes Service, another host): ``lemonpack serve`` is their gateway.
This module holds every decision about them, in the style of :mod:`.policy`: facts in (a
probe result, a connection that failed, a request that began or ended), answers out, time
read from an injected ``clock``. The driver (:mod:`lemonpack.server.endpoints`) runs the
probes (the recipe's ``health_probe``, :func:`lemonpack.runtime.engines.probes.check_once` against
the endpoint's host and port) and does the HTTP; it calls this object from its event loop
only.

Rules
  - An endpoint is *unknown* until its first probe, then *up* or *down*. A failed probe takes
    it down at once; so does a request whose connection was refused or reset before the
    first byte was sent (:meth:`EndpointPool.connect_failed`). Only a passing probe brings it
    back up: a down endpoint gets no request, whatever happens meanwhile.
  - Probes run every ``interval`` seconds per endpoint (the recipe's ``poll_interval_ms``,
    at least :data:`MIN_INTERVAL`); a down endpoint is probed at the same pace, so it is back
    within one interval of answering again. :meth:`due` says which probes to run now.
  - :meth:`EndpointPool.pick`: among the live (up) endpoints not excluded, the one with the
    fewest requests in flight through this gateway; ties go to the one picked least recently,
    then to the earlier one in the registry's order (deterministic, and an idle model's
    requests go round the endpoints).
  - A model is *up* while one endpoint is up, *down* once every endpoint is down (the reason:
    each one's last observation), *unknown* while none is up and one was never probed.
    :meth:`observe` and :meth:`connect_failed` return the model's new state when it changed,
    so the driver tells the serving policy (``EngineReady`` / ``EngineExited``).
  - :meth:`EndpointPool.retry`: a request that could not connect (not one byte sent) goes
    once to another live endpoint; nothing else is retried (a stream that started, a request
    the engine may have received).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

MIN_INTERVAL = 0.05  # seconds between two probes of one endpoint, at least

UP, DOWN, UNKNOWN = "up", "down", "unknown"


@dataclass
class Endpoint:
    """One engine URL of a model: ``state`` (up, down, unknown), ``reason`` (the last
    observation: ``HTTP 200``, ``connection refused`` ...), ``in_flight`` requests through
    this gateway, ``last_pick`` (a sequence number), ``next_probe`` (clock seconds)."""

    url: str
    state: str = UNKNOWN
    reason: str = "not probed yet"
    in_flight: int = 0
    last_pick: int = 0
    next_probe: float = 0.0
    probing: bool = False


@dataclass
class _Group:
    endpoints: list[Endpoint]
    interval: float
    state: str = UNKNOWN
    by_url: dict[str, Endpoint] = field(default_factory=dict)


class EndpointPool:
    """See the module docstring. ``clock``: monotonic seconds."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._models: dict[str, _Group] = {}
        self._seq = 0

    # -- registration

    def set_model(self, model: str, urls: Iterable[str], interval: float) -> None:
        """Declare (or update) ``model``'s endpoints and probe ``interval`` (seconds). An
        endpoint kept across an update keeps its state and counters; a new one is unknown
        and probed at once."""
        urls = list(dict.fromkeys(urls))
        old = self._models.get(model)
        if old is not None and [e.url for e in old.endpoints] == urls:
            old.interval = max(interval, MIN_INTERVAL)
            return
        eps = [old.by_url[u] if old is not None and u in old.by_url else Endpoint(u) for u in urls]
        g = _Group(eps, max(interval, MIN_INTERVAL), by_url={e.url: e for e in eps})
        g.state = self._state_of(g)
        self._models[model] = g

    def drop_model(self, model: str) -> None:
        """Forget ``model`` (no longer registered with endpoints)."""
        self._models.pop(model, None)

    def models(self) -> list[str]:
        return list(self._models)

    def has(self, model: str) -> bool:
        return model in self._models

    # -- queries

    def state(self, model: str) -> str:
        """``up``, ``down`` or ``unknown`` (module docstring)."""
        g = self._models.get(model)
        return g.state if g is not None else UNKNOWN

    def reason(self, model: str) -> str:
        """Why ``model`` is down: each endpoint and its last observation, ``; ``-separated."""
        g = self._models.get(model)
        if g is None:
            return "no endpoint"
        return "; ".join(f"{e.url}: {e.reason}" for e in g.endpoints if e.state != UP)

    def endpoints(self, model: str) -> list[Endpoint]:
        """The model's endpoints in registry order (live objects: read only)."""
        g = self._models.get(model)
        return list(g.endpoints) if g is not None else []

    def due(self) -> list[tuple[str, str]]:
        """``(model, url)`` of every endpoint whose probe should run now (and is not running);
        each is marked running until :meth:`observe`."""
        now = self.clock()
        out = []
        for name, g in self._models.items():
            for e in g.endpoints:
                if not e.probing and now >= e.next_probe:
                    e.probing = True
                    out.append((name, e.url))
        return out

    # -- facts

    def observe(self, model: str, url: str, ok: bool, what: str) -> str | None:
        """A probe of ``url`` passed (``ok``) or failed, having seen ``what``. Returns the
        model's new state when it changed, else None."""
        g = self._models.get(model)
        e = g.by_url.get(url) if g is not None else None
        if g is None or e is None:
            return None
        e.probing = False
        e.next_probe = self.clock() + g.interval
        e.state, e.reason = (UP, what) if ok else (DOWN, what)
        return self._update(g)

    def connect_failed(self, model: str, url: str, why: str) -> str | None:
        """A request could not reach ``url`` (refused or reset before its first byte was
        sent): the endpoint is down until a probe passes. Returns the model's new state when
        it changed."""
        g = self._models.get(model)
        e = g.by_url.get(url) if g is not None else None
        if g is None or e is None:
            return None
        e.state, e.reason = DOWN, why
        return self._update(g)

    def pick(self, model: str, exclude: Iterable[str] = ()) -> str | None:
        """The endpoint for the next request (module docstring), counted in flight until
        :meth:`done`; None when no live endpoint is left."""
        g = self._models.get(model)
        if g is None:
            return None
        skip = set(exclude)
        live = [(e.in_flight, e.last_pick, i, e) for i, e in enumerate(g.endpoints)
                if e.state == UP and e.url not in skip]
        if not live:
            return None
        e = min(live, key=lambda t: t[:3])[3]
        self._seq += 1
        e.last_pick = self._seq
        e.in_flight += 1
        return e.url

    def retry(self, model: str, tried: Iterable[str], unsent: bool) -> bool:
        """Whether a request whose attempts on ``tried`` endpoints failed goes once more:
        only when nothing reached the engine (``unsent``: the connection could not be made),
        after a single attempt, and while another live endpoint is left. An answer that
        started, or a connection lost after the request was sent, is never retried."""
        tried = list(tried)
        return unsent and len(tried) == 1 and any(
            e.state == UP and e.url not in tried for e in self.endpoints(model))

    def done(self, model: str, url: str) -> None:
        """A request picked on ``url`` ended (however it ended)."""
        g = self._models.get(model)
        e = g.by_url.get(url) if g is not None else None
        if e is not None and e.in_flight > 0:
            e.in_flight -= 1

    # -- internals

    @staticmethod
    def _state_of(g: _Group) -> str:
        if any(e.state == UP for e in g.endpoints):
            return UP
        if g.endpoints and all(e.state == DOWN for e in g.endpoints):
            return DOWN
        return UNKNOWN

    def _update(self, g: _Group) -> str | None:
        new = self._state_of(g)
        if new == g.state:
            return None
        g.state = new
        return new


__all__ = ["DOWN", "Endpoint", "EndpointPool", "MIN_INTERVAL", "UNKNOWN", "UP"]
