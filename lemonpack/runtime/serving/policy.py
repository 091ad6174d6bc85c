"""Serving policy: who is answered, who waits, who starts, who gives way (pure, no I/O).

The server's decisions about requests and engines, after llama-swap's router: events in
through :meth:`ServingPolicy.handle`, effects out through one small :class:`ServingEffects`
interface, time read from an injected ``clock``. Nothing here sleeps, spawns, locks or does
I/O, so every decision is tested synchronously (``tests/runtime/serving/test_policy.py``). The
driver is :class:`lemonpack.server.driver.Driver`: it calls :meth:`handle` from its event loop
only (one owner of the state; events from engine threads reach it through the loop's queue)
and performs the effects through the engine :class:`~lemonpack.runtime.lifecycle.runner.Runner`.

Events
  ``Arrive(req, model, info)`` a request needs ``model`` (``load=True``: ``POST /v1/load``,
  whose ``info.options`` are the load options wanted); ``Finish(req)`` it ended (answered,
  failed, or the client left: granted or still waiting); ``Tick()`` time passed;
  ``EngineReady/EngineFailed/EngineExited/EngineStopped(model)`` what the engine did;
  ``Unload(model)`` (give way gracefully); ``Cut(model)`` (a forced unload); ``Drain()`` (a
  graceful shutdown begins); ``Shutdown()`` (stop everything now).

Effects
  ``grant(req, model, engine)``, ``reject(req, status, kind, message)``, ``start(model,
  info)``, ``stop(model)``, ``downsize(model, engine)``, ``cut(req, reason)`` (end a granted
  request now, as an error the client sees).

Decisions
  - A request on a ready model is granted at once and counted *busy* until it finishes; on
    a starting or stopping model it waits (one start for N cold requests); on a stopped model
    it goes through admission. More than ``max_in_flight`` busy or waiting requests for one
    model: 429.
  - **Admission** (memory): a model's ``info.memory`` (bytes, estimated before start:
    :mod:`lemonpack.runtime.models.memory`) must fit in ``budget`` minus what every started,
    starting or stopping engine holds (``unmetered`` recipes count 0). Fits: start. Fits once
    idle models leave: the least recently used idle ones are stopped (never a busy one) and
    the request waits for them. Cannot fit while others are busy: 503 ``insufficient_memory``
    (``needs X, Y free of Z (busy: ...)``), busy streams go on; with ``queue_timeout`` it
    *queues* instead: it waits (first come, first started: a later request that needs a start
    queues behind it even if it would fit) until memory frees (an engine stops, a busy model
    goes idle and can be evicted), up to ``queue_timeout`` seconds, then 503
    ``insufficient_memory``; at most ``queue_limit`` requests queue (past it: 503 at once).
    Larger than the whole budget: 503 at once, no engine started.
  - **Slot policy** (recipe ``slot_policy``, seed 000 section 4.4): ``standard`` models
    coexist within the budget; two ``exclusive_npu`` models never run together; two
    ``coexist_by_type`` models of the same kind (deployment mode: chat, embeddings, ...)
    never run together; ``unmetered`` is not counted against the budget. When a model must
    give way it *drains*: no new request is granted to it, running ones finish, then it stops
    and the model that asked starts.
  - **Load options**: a ``load`` request whose options differ from the running engine's
    drains and restarts it with the new options (after its in-flight requests end).
  - ``load_timeout``: a request waiting longer gets 503 ``model_load_timeout``; the others go on.
  - **Giving way** (``Unload``: ``/v1/unload``, a model or recipe removed): requests still
    waiting for it get 503 ``model_unloaded``; no new request is granted to it; the running
    ones finish, then it stops. ``drain_timeout`` seconds after the ``Unload`` the ones still
    running are ``cut`` and it stops (None: no bound). ``Cut`` is the forced unload: its
    running requests are cut and it stops at once.
  - **Shutdown**: ``Drain`` rejects every waiting and later request (503
    ``server_shutting_down``), stops idle engines and lets busy ones finish within
    ``drain_timeout`` (then cuts, as above); ``Shutdown`` cuts whatever still runs and stops
    every engine. :attr:`ServingPolicy.cuts` counts the requests cut.
  - ``ttl``: a ready model idle that long (no request busy since) is stopped; ``soft_idle``:
    ``downsize`` once per idle period. A model starting, stopping or busy is never touched.
  - A start failure answers every request waiting for it (500 ``model_load_error``); an
    engine exit or stop lets waiting requests start it again.
  - **Remote models** (``info.remote``: served by endpoints lemonpack does not spawn,
    :mod:`lemonpack.runtime.serving.gateway`): admission, slot policies, TTL, soft-idle and reload
    never apply and nothing is ever stopped. ``start`` asks the driver for the endpoints'
    verdict: ``EngineReady`` (one endpoint up) grants, ``EngineFailed`` (all down) answers
    the waiting requests 503 ``model_unavailable`` with the reason (a ``load`` keeps waiting
    for a passing probe, up to ``load_timeout``), and ``EngineExited`` (all went down) makes
    the model *down*: a request then gets 503 at once, until ``EngineReady`` (a probe passed
    again) makes it ready, asked or not. ``Unload`` forgets the verdict, stops nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lemonpack.runtime.lifecycle.supervisor import Shutdown, State, Unload

Req = Hashable

POLICIES = ("standard", "exclusive_npu", "coexist_by_type", "unmetered")


#: A model's engine as the policy sees it: the supervisor's lifecycle states (one enum for
#: both machines; the policy's copy of a model's state lags the runner's by one event).
Phase = State


@dataclass(frozen=True)
class ModelInfo:
    """What admission needs to know of a model before it starts: ``memory`` bytes it will
    hold (0: unknown, counted as nothing), its recipe's ``slot_policy``, its ``kind`` (the
    deployment mode for ``coexist_by_type``) and the load ``options`` (sorted items)."""

    memory: int = 0
    slot_policy: str = "standard"
    kind: str = "chat"
    options: tuple[tuple[str, Any], ...] = ()
    remote: bool = False

    @property
    def metered(self) -> int:
        """Bytes counted against the budget (a remote model holds none here)."""
        return 0 if self.slot_policy == "unmetered" or self.remote else self.memory


# ---------------------------------------------------------------- events


@dataclass(frozen=True)
class Arrive:
    req: Req
    model: str
    info: ModelInfo = ModelInfo()
    load: bool = False


@dataclass(frozen=True)
class Finish:
    req: Req


@dataclass(frozen=True)
class Tick:
    pass


@dataclass(frozen=True)
class EngineReady:
    model: str
    engine: Any


@dataclass(frozen=True)
class EngineFailed:
    model: str
    error: str


@dataclass(frozen=True)
class EngineExited:
    model: str
    reason: str = ""


@dataclass(frozen=True)
class EngineStopped:
    model: str


# ``Unload(model)`` and ``Shutdown()`` are the supervisor's own events (one meaning for both
# machines: stop this model / stop everything), imported above.

#: Every event :meth:`ServingPolicy.handle` takes.
@dataclass(frozen=True)
class Cut:
    """A forced unload of ``model``: its running requests are cut (``reason``), it stops."""

    model: str
    reason: str = "unloaded (force)"


@dataclass(frozen=True)
class Drain:
    """A graceful shutdown begins (the first SIGTERM/SIGINT)."""


Event = (Arrive | Finish | Tick | EngineReady | EngineFailed | EngineExited | EngineStopped | Unload | Cut | Drain
         | Shutdown)


class ServingEffects(Protocol):
    """How decisions reach the world; no call may block."""

    def grant(self, req: Req, model: str, engine: Any) -> None: ...
    def reject(self, req: Req, status: int, kind: str, message: str) -> None: ...
    def start(self, model: str, info: ModelInfo) -> None: ...
    def stop(self, model: str) -> None: ...
    def downsize(self, model: str, engine: Any) -> None: ...
    def cut(self, req: Req, reason: str) -> None: ...


@dataclass
class _Model:
    phase: Phase = Phase.STOPPED
    info: ModelInfo | None = None  # of the engine started (starting, ready, stopping)
    want: ModelInfo | None = None  # what the next start uses
    engine: Any = None
    busy: set = field(default_factory=set)
    since: float = 0.0  # ready, or the end of its last request
    draining: str | None = None
    draining_for: str | None = None  # the model it gives way to (evict, swap)
    deadline: float | None = None  # a giving-way drain cuts what still runs then (clock seconds)
    cuts: int = 0  # its requests cut so far
    downsized: bool = False
    remote: bool = False
    down: str | None = None  # a remote model's reason while every endpoint is down


@dataclass
class _Pending:
    model: str
    info: ModelInfo
    load: bool
    arrived: float
    seq: int = 0
    queued: float | None = None  # since when it waits for memory (``queue_timeout``)


def size(b: int) -> str:
    """``b`` bytes as text (``1.5 GiB``)."""
    n = float(b)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


class ServingPolicy:
    """See the module docstring. ``budget`` bytes (None: no memory limit), ``clock`` seconds
    (monotonic), ``ttl``/``soft_idle``/``load_timeout``/``drain_timeout``/``queue_timeout``
    seconds (None: never; ``queue_timeout`` None: no queue, a request that does not fit is
    answered 503 at once), ``queue_limit`` requests waiting for memory at most."""

    def __init__(self, effects: ServingEffects, *, clock: Callable[[], float], budget: int | None = None,
                 max_in_flight: int = 64, ttl: float | None = None, soft_idle: float | None = None,
                 load_timeout: float | None = None, drain_timeout: float | None = 30.0,
                 queue_timeout: float | None = None, queue_limit: int = 64) -> None:
        self._fx = effects
        self.clock = clock
        self.budget = budget
        self.max_in_flight = max_in_flight
        self.ttl, self.soft_idle, self.load_timeout = ttl, soft_idle, load_timeout
        self.drain_timeout = drain_timeout
        self.queue_timeout, self.queue_limit = queue_timeout, queue_limit
        #: requests cut so far (a drain that timed out, a forced unload, a shutdown)
        self.cuts = 0
        self._models: dict[str, _Model] = {}
        self._waiting: dict[Req, _Pending] = {}
        self._granted: dict[Req, str] = {}
        self._closing = False
        self._seq = 0

    # -- queries

    def phase(self, model: str) -> Phase:
        m = self._models.get(model)
        return m.phase if m else Phase.STOPPED

    def engine(self, model: str) -> Any:
        m = self._models.get(model)
        return m.engine if m else None

    def _in_flight_of(self, name: str) -> int:
        """``in_flight().get(name, 0)`` without the whole table."""
        return sum(1 for n in self._granted.values() if n == name) + \
            sum(1 for p in self._waiting.values() if p.model == name)

    def in_flight(self) -> dict[str, int]:
        """Requests busy or waiting, by model."""
        out: dict[str, int] = {}
        for name in self._granted.values():
            out[name] = out.get(name, 0) + 1
        for p in self._waiting.values():
            out[p.model] = out.get(p.model, 0) + 1
        return out

    def used(self) -> int:
        """Bytes held (counted against the budget) by every engine not stopped."""
        return sum(m.info.metered for m in self._models.values() if m.phase is not Phase.STOPPED and m.info)

    def memory(self) -> dict[str, int]:
        """Estimated bytes of each model whose engine is not stopped."""
        return {n: m.info.memory for n, m in self._models.items()
                if m.phase is not Phase.STOPPED and m.info and not m.remote}

    def running_info(self, model: str) -> ModelInfo | None:
        """The :class:`ModelInfo` ``model``'s ready engine was admitted with (None: not ready)."""
        m = self._models.get(model)
        return m.info if m is not None and m.phase is Phase.READY else None

    def giving_way(self, model: str) -> bool:
        """Whether ``model`` drains to stop (an ``Unload`` or a ``Drain`` waits for its requests)."""
        m = self._models.get(model)
        return bool(m and m.draining in ("unload", "shutdown"))

    def cuts_of(self, model: str) -> int:
        """Requests of ``model`` cut so far."""
        m = self._models.get(model)
        return m.cuts if m else 0

    def is_queued(self, req: Req) -> bool:
        """Whether request ``req`` waits for memory (``queue_timeout``)."""
        p = self._waiting.get(req)
        return p is not None and p.queued is not None

    def queued(self) -> dict[str, int]:
        """Requests waiting for memory (``queue_timeout``), by model."""
        out: dict[str, int] = {}
        for p in self._waiting.values():
            if p.queued is not None:
                out[p.model] = out.get(p.model, 0) + 1
        return out

    def busy(self) -> int:
        """Requests granted and not finished, over every model."""
        return len(self._granted)

    def gives_way_to(self, model: str) -> tuple[str, str | None] | None:
        """Why ``model`` drains or stops for something else: ``("evict", OTHER)`` (memory for
        model ``OTHER``), ``("swap", OTHER)`` (a slot policy: ``OTHER`` may not run beside it),
        ``("reload", None)`` (new load options); None when it does not (an unload, the TTL,
        a shutdown: the caller knows which; :meth:`giving_way` says whether an unload or a
        drain waits for its requests)."""
        m = self._models.get(model)
        if m is None or m.draining is None:
            return None
        return m.draining, m.draining_for if m.draining in ("evict", "swap") else None

    @property
    def idle(self) -> bool:
        """Nothing waits, nothing is busy, every engine is stopped."""
        return not self._waiting and not self._granted and all(
            m.phase is Phase.STOPPED or m.remote for m in self._models.values())

    # -- the one entry point

    def handle(self, ev: object) -> None:
        """Apply one event (module docstring); never raises for a well-formed event."""
        now = self.clock()
        match ev:
            case Arrive():
                self._arrive(ev, now)
            case Finish():
                self._finish(ev.req, now)
            case Tick():
                self._tick(now)
            case EngineReady():
                m = self._model(ev.model)
                if m.remote:
                    if m.phase in (Phase.STOPPED, Phase.STARTING) and not self._closing:
                        m.phase, m.engine, m.since, m.down = Phase.READY, ev.engine, now, None
                        m.info = m.info or m.want or ModelInfo(remote=True)
                elif m.phase is Phase.STARTING:
                    m.phase, m.engine, m.since, m.downsized = Phase.READY, ev.engine, now, False
                    if m.draining and not m.busy and not self._wants(ev.model):
                        self._stop(ev.model, m)
            case EngineFailed():
                m = self._model(ev.model)
                if m.remote:
                    if m.phase is Phase.STARTING:
                        self._remote_down(ev.model, m, ev.error)
                elif m.phase is Phase.STARTING:
                    m.phase, m.engine = Phase.STOPPING, None
                    self._reject_model(ev.model, 500, "model_load_error", ev.error)
            case EngineExited():
                m = self._model(ev.model)
                if m.remote:
                    if m.phase is Phase.READY:
                        self._remote_down(ev.model, m, ev.reason or "every endpoint is down")
                elif m.phase is Phase.READY:
                    m.phase, m.engine = Phase.STOPPING, None
            case EngineStopped():
                m = self._model(ev.model)
                if m.phase is not Phase.STOPPED:
                    m.phase, m.engine, m.info, m.draining, m.deadline = Phase.STOPPED, None, None, None, None
            case Unload():
                m = self._model(ev.model)
                self._reject_model(ev.model, 503, "model_unloaded", f"{ev.model}: unloaded")
                if m.remote:  # nothing of ours runs: forget the verdict (and that it was remote)
                    m.phase, m.engine, m.info, m.down, m.remote = Phase.STOPPED, None, None, None, False
                elif m.phase in (Phase.STARTING, Phase.READY):
                    self._give_way(ev.model, m, "unload", now)
            case Cut():
                m = self._model(ev.model)
                self._reject_model(ev.model, 503, "model_unloaded", f"{ev.model}: unloaded")
                self._cut(m, f"{ev.model}: {ev.reason}")
                if not m.remote and m.phase in (Phase.STARTING, Phase.READY):
                    self._stop(ev.model, m)
            case Drain():
                self._closing = True
                for req in list(self._waiting):
                    self._reject(req, 503, "server_shutting_down", "the server is shutting down")
                for name, m in self._models.items():
                    if m.busy or (not m.remote and m.phase in (Phase.STARTING, Phase.READY)):
                        self._give_way(name, m, "shutdown", now)
            case Shutdown():
                self._closing = True
                for req in list(self._waiting):
                    self._reject(req, 503, "server_shutting_down", "the server is shutting down")
                for name, m in self._models.items():
                    self._cut(m, "the server is shutting down")
                    if m.remote:
                        m.phase, m.engine = Phase.STOPPED, None
                    elif m.phase in (Phase.STARTING, Phase.READY):
                        self._stop(name, m)
            case _:
                raise TypeError(f"not a serving event: {ev!r}")
        self._pump(now)

    # -- transitions

    def _model(self, name: str) -> _Model:
        m = self._models.get(name)
        if m is None:  # (not setdefault: that builds a _Model on every call)
            m = self._models[name] = _Model()
        return m

    def _arrive(self, ev: Arrive, now: float) -> None:
        if self._closing:
            self._fx.reject(ev.req, 503, "server_shutting_down", "the server is shutting down")
            return
        m = self._model(ev.model)
        if ev.info.remote or m.phase is Phase.STOPPED:  # a model re-registered local or remote
            m.remote = ev.info.remote
        if m.remote and m.down is not None and not ev.load:
            self._fx.reject(ev.req, 503, "model_unavailable", f"model {ev.model!r} is down: {m.down}")
            return
        n = self._in_flight_of(ev.model)
        if not ev.load and n >= self.max_in_flight:
            self._fx.reject(ev.req, 429, "rate_limit_error", f"model {ev.model!r} has {n} requests in flight "
                            f"(limit {self.max_in_flight}); retry later")
            return
        if ev.load:
            running = m.info if m.phase in (Phase.STARTING, Phase.READY) else None
            if running is not None and running.options != ev.info.options and not m.remote:
                m.draining = "reload"  # new options: restart after the requests in flight
            m.want = ev.info
        elif m.want is None:
            m.want = ev.info
        self._seq += 1
        self._waiting[ev.req] = _Pending(ev.model, ev.info, ev.load, now, self._seq)

    def _finish(self, req: Req, now: float) -> None:
        if self._waiting.pop(req, None) is not None:
            return
        name = self._granted.pop(req, None)
        if name is None:
            return
        m = self._model(name)
        m.busy.discard(req)
        m.since = now
        if m.draining and not m.busy and m.phase is Phase.READY:
            self._stop(name, m)

    def _tick(self, now: float) -> None:
        for name, m in self._models.items():
            if m.deadline is not None and now >= m.deadline:
                m.deadline = None
                self._cut(m, f"{name}: not finished within the drain timeout ({self.drain_timeout:g}s)")
                if not m.remote and m.phase is Phase.READY:
                    self._stop(name, m)
        if self.load_timeout is not None:
            for req, p in list(self._waiting.items()):
                if now - p.arrived >= self.load_timeout:
                    phase = self.phase(p.model).value
                    self._reject(req, 503, "model_load_timeout",
                                 f"model {p.model!r} was not ready within {self.load_timeout:g}s (it is {phase})")
        if self.queue_timeout is not None:
            for req, p in list(self._waiting.items()):
                if p.queued is not None and now - p.queued >= self.queue_timeout:
                    self._reject(req, 503, "insufficient_memory", f"waited {self.queue_timeout:g}s for memory: "
                                 f"{self._shortfall(p.model, p.info.metered)}")
        for name, m in self._models.items():
            if m.phase is not Phase.READY or m.busy or m.draining or m.remote or self._wants(name):
                continue
            idle = now - m.since
            if self.ttl is not None and idle >= self.ttl:
                self._stop(name, m)
            elif self.soft_idle is not None and idle >= self.soft_idle and not m.downsized:
                m.downsized = True
                self._fx.downsize(name, m.engine)

    def _wants(self, name: str) -> bool:
        return any(p.model == name for p in self._waiting.values())

    def _pump(self, now: float) -> None:
        for req, p in list(self._waiting.items()):
            if req not in self._waiting:
                continue  # answered earlier in this pass
            m = self._model(p.model)
            if m.phase is Phase.READY and not m.draining:
                del self._waiting[req]
                if p.load:  # a load is answered; it holds nothing
                    self._fx.grant(req, p.model, m.engine)
                    continue
                self._granted[req] = p.model
                m.busy.add(req)
                m.downsized = False
                self._fx.grant(req, p.model, m.engine)
            elif m.phase is Phase.READY and m.draining and not m.busy:
                self._stop(p.model, m)
            elif m.phase is Phase.STOPPED and not self._closing:
                self._admit(p.model, m, p.seq)

    def _admit(self, name: str, m: _Model, seq: int) -> None:
        info = m.want or ModelInfo()
        if m.remote:  # nothing to admit: ask the driver for the endpoints' verdict
            m.phase, m.info, m.engine, m.draining = Phase.STARTING, info, None, None
            self._fx.start(name, info)
            return
        need = info.metered
        if self.queue_timeout is not None and any(
                p.queued is not None and p.seq < seq and p.model != name for p in self._waiting.values()):
            self._queue(name, need)  # first come, first started
            return
        if self.budget is not None and need > self.budget:
            self._reject_model(name, 503, "insufficient_memory",
                               f"model {name!r} needs {size(need)}, more than the whole memory budget "
                               f"of {size(self.budget)}")
            return
        others = [(n, o) for n, o in self._models.items()
                  if o is not m and o.phase is not Phase.STOPPED and not o.remote]
        conflicts = [(n, o) for n, o in others if o.info is not None and _conflict(info, o.info)]
        if conflicts:
            if any(p.model == n and p.seq < seq for n, _ in conflicts for p in self._waiting.values()):
                return  # an older request waits for that model: it goes first (no ping-pong)
            for n, o in conflicts:
                if o.draining is None:
                    o.draining, o.draining_for = "swap", name
                if o.phase is Phase.READY and not o.busy:
                    self._stop(n, o)
            return  # waits for them to stop
        if self.budget is None or need <= self.budget - self.used():
            m.phase, m.info, m.engine, m.draining = Phase.STARTING, info, None, None
            for p in self._waiting.values():
                p.queued = None if p.model == name else p.queued  # it waits for its engine now
            self._fx.start(name, info)
            return
        free = self.budget - self.used()
        releasing = sum(o.info.metered for _, o in others if o.phase is Phase.STOPPING and o.info)
        idle = sorted(((n, o) for n, o in others if o.phase is Phase.READY and not o.busy and o.info is not None
                       and o.info.metered > 0 and not self._wants(n)), key=lambda x: x[1].since)
        if free + releasing + sum(o.info.metered for _, o in idle if o.info is not None) < need:
            if self.queue_timeout is not None:
                self._queue(name, need)
            else:
                self._reject_model(name, 503, "insufficient_memory", self._shortfall(name, need))
            return
        for n, o in idle:  # least recently used first
            if free + releasing >= need:
                break
            o.draining, o.draining_for = "evict", name
            releasing += o.info.metered if o.info is not None else 0
            self._stop(n, o)

    def _shortfall(self, name: str, need: int) -> str:
        """``model 'b' needs 4.0 GiB, 2.0 GiB free of 10.0 GiB (busy: a 8.0 GiB)``."""
        budget = self.budget or 0
        busy = [f"{n} {size(o.info.metered)}" for n, o in self._models.items() if n != name and o.info
                and o.info.metered and o.phase not in (Phase.STOPPING, Phase.STOPPED) and not o.remote]
        return (f"model {name!r} needs {size(need)}, {size(max(budget - self.used(), 0))} free of {size(budget)} "
                f"(busy: {', '.join(busy) or 'none'})")

    def _queue(self, name: str, need: int) -> None:
        """The requests for ``name`` wait for memory (``queue_timeout``); past ``queue_limit``
        queued requests, the newer ones get 503 at once."""
        now, n = self.clock(), sum(1 for p in self._waiting.values() if p.queued is not None)
        for req, p in list(self._waiting.items()):
            if p.model != name or p.queued is not None:
                continue
            if n >= self.queue_limit:
                self._reject(req, 503, "insufficient_memory", f"{self._shortfall(name, need)}; "
                             f"{n} requests already wait for memory (limit {self.queue_limit})")
            else:
                p.queued, n = now, n + 1

    def _remote_down(self, name: str, m: _Model, reason: str) -> None:
        """Every endpoint of remote ``name`` is down: answer who waits (a ``load`` keeps
        waiting for a passing probe), then the model is down until ``EngineReady``."""
        m.down = reason
        for req, p in list(self._waiting.items()):
            if p.model == name and not p.load:
                self._reject(req, 503, "model_unavailable", f"model {name!r} is down: {reason}")
        if m.phase is Phase.STARTING and self._wants(name):
            return  # a load waits for a passing probe (or its timeout)
        m.phase, m.engine, m.info = Phase.STOPPED, None, None

    def _give_way(self, name: str, m: _Model, why: str, now: float) -> None:
        """``name`` takes no new request; it stops once its running ones finished, or at
        its drain deadline (then they are cut)."""
        if not m.busy:
            if not m.remote:
                self._stop(name, m)
            return
        m.draining = why
        if m.deadline is None and self.drain_timeout is not None:
            m.deadline = now + self.drain_timeout

    def _cut(self, m: _Model, reason: str) -> None:
        for req in sorted(m.busy, key=str):
            self.cuts += 1
            m.cuts += 1
            self._fx.cut(req, reason)
        m.deadline = None

    def _stop(self, name: str, m: _Model) -> None:
        m.phase = Phase.STOPPING
        self._fx.stop(name)

    def _reject(self, req: Req, status: int, kind: str, message: str) -> None:
        if self._waiting.pop(req, None) is not None:
            self._fx.reject(req, status, kind, message)

    def _reject_model(self, name: str, status: int, kind: str, message: str) -> None:
        for req, p in list(self._waiting.items()):
            if p.model == name:
                self._reject(req, status, kind, message)
        m = self._models.get(name)
        if m is not None and m.phase is Phase.STOPPED:
            m.want = None


def _conflict(a: ModelInfo, b: ModelInfo) -> bool:
    """Whether models with these infos may not run together (slot policies)."""
    if a.slot_policy == b.slot_policy == "exclusive_npu":
        return True
    return a.slot_policy == b.slot_policy == "coexist_by_type" and a.kind == b.kind


def options_key(options: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """Load options as :attr:`ModelInfo.options` (sorted items; values as text)."""
    return tuple(sorted((str(k), str(v)) for k, v in (options or {}).items()))


__all__ = ["Arrive", "Cut", "Drain", "EngineExited", "EngineFailed", "EngineReady", "EngineStopped", "Event", "Finish", "ModelInfo",
           "POLICIES", "Phase", "ServingEffects", "ServingPolicy", "Shutdown", "Tick", "Unload", "options_key",
           "size"]
