"""The supervisor's decisions: a pure state machine, one owner per model (RFC section 9).

Events go in through :meth:`Supervisor.handle`; side effects go out as calls on one small
:class:`Effects` interface (the "syscall table", after llama-swap's router design). Nothing
here sleeps, spawns, locks or does I/O, so every decision is unit-tested synchronously
against a fake effects object. The thin layer that really spawns processes and containers
and feeds events back is :class:`lemonpack.runtime.lifecycle.runner.Runner`.

Per model the states are::

    stopped ──Request──▶ starting ──Started──▶ ready
       ▲                   │ StartFailed / Unload      │ Crashed / Unload
       │                   ▼                           ▼
       └───────Stopped─── stopping ◀───────────────────┘

- A ``Request`` on a stopped model starts exactly one engine (a new *generation*); every
  further ``Request`` while it is starting joins the same start (N concurrent first
  requests → one engine).
- ``StartFailed`` fails every waiter with the error, then cleans up (``stop``): there is no
  sticky failed state; the next ``Request`` after ``Stopped`` starts again.
- ``Crashed`` after ready (process exit or watchdog) cleans up and returns to stopped;
  requests that arrive while stopping are kept and restart the model once it is stopped.
- ``Unload`` stops a ready model; during a start it cancels the start (waiters fail).
- Events carry the generation they belong to; an event of an older generation is stale
  and ignored (a late ``Started`` of a cancelled start, a crash report of an engine that
  was already replaced).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Protocol

from lemonpack.errors import RuntimeFailure


class State(enum.Enum):
    """The lifecycle state of one model's engine."""

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"


Waiter = Hashable
"""An opaque token the caller uses to recognise its own request (a future, an id)."""


# ---------------------------------------------------------------- events (input)


@dataclass(frozen=True)
class Request:
    """A caller needs ``model`` ready; ``waiter`` is resolved by ``Effects.ready``/``failed``."""

    model: str
    waiter: Waiter


@dataclass(frozen=True)
class Started:
    """The engine of ``generation`` was spawned and passed its health probe."""

    model: str
    generation: int


@dataclass(frozen=True)
class StartFailed:
    """The engine of ``generation`` could not be started (spawn error, exit, probe timeout)."""

    model: str
    generation: int
    error: Exception


@dataclass(frozen=True)
class Crashed:
    """The engine of ``generation`` exited or failed its watchdog after it was ready."""

    model: str
    generation: int
    reason: str


@dataclass(frozen=True)
class Unload:
    """Stop ``model`` (an explicit unload, or part of a shutdown)."""

    model: str


@dataclass(frozen=True)
class Stopped:
    """The engine of ``generation`` and everything it started is gone."""

    model: str
    generation: int


@dataclass(frozen=True)
class Shutdown:
    """Stop every model; later requests fail."""


Event = Request | Started | StartFailed | Crashed | Unload | Stopped | Shutdown


# ---------------------------------------------------------------- effects (output)


class Effects(Protocol):
    """The only way decisions reach the world. Calls must not block the caller: the
    implementation schedules the work and reports back with events."""

    def start(self, model: str, generation: int) -> None:
        """Spawn and probe ``model``'s engine; report ``Started`` or ``StartFailed``."""

    def stop(self, model: str, generation: int) -> None:
        """Stop ``model``'s engine of ``generation`` (or cancel its start) and everything it
        started, whatever state it is in; report ``Stopped``. Must be idempotent."""

    def ready(self, model: str, generation: int, waiters: tuple[Waiter, ...]) -> None:
        """Tell ``waiters`` that ``model`` is ready (engine ``generation``)."""

    def failed(self, model: str, waiters: tuple[Waiter, ...], error: Exception) -> None:
        """Tell ``waiters`` that their request for ``model`` failed with ``error``."""

    def state_changed(self, model: str, old: State, new: State) -> None:
        """Observe a transition (logging, metrics); may be a no-op."""


# ---------------------------------------------------------------- the machine


@dataclass
class Slot:
    """What the supervisor knows about one model (read-only for callers)."""

    state: State = State.STOPPED
    generation: int = 0
    waiters: list[Waiter] = field(default_factory=list)
    last_error: str | None = None  # informational only: never blocks a restart


class Supervisor:
    """Pure decisions for every model the runtime hosts.

    Thread-unsafe by design: the driver serialises calls to :meth:`handle` (one lock or one
    run loop). ``generation`` numbers are per model, start at 1 and only grow.
    """

    def __init__(self, effects: Effects) -> None:
        self._fx = effects
        self._slots: dict[str, Slot] = {}
        self._shutting_down = False

    # -- queries

    def state(self, model: str) -> State:
        """The current state of ``model`` (``STOPPED`` for a model never seen)."""
        slot = self._slots.get(model)
        return slot.state if slot else State.STOPPED

    def slot(self, model: str) -> Slot:
        """The slot of ``model`` (a fresh stopped one for a model never seen)."""
        return self._slots.setdefault(model, Slot())

    def models(self) -> dict[str, State]:
        """Every model seen so far and its state."""
        return {m: s.state for m, s in self._slots.items()}

    @property
    def idle(self) -> bool:
        """True when every model is stopped (what a shutdown waits for)."""
        return all(s.state is State.STOPPED for s in self._slots.values())

    # -- the one entry point

    def handle(self, event: Event) -> None:
        """Apply ``event``; issue effect commands. Never raises for a well-formed event."""
        if isinstance(event, Shutdown):
            self._shutdown()
            return
        slot = self.slot(event.model)
        match event:
            case Request():
                self._on_request(event.model, slot, event.waiter)
            case Started():
                if slot.state is State.STARTING and event.generation == slot.generation:
                    waiters = tuple(slot.waiters)
                    slot.waiters.clear()
                    slot.last_error = None
                    self._set(event.model, slot, State.READY)
                    if waiters:
                        self._fx.ready(event.model, slot.generation, waiters)
            case StartFailed():
                if slot.state is State.STARTING and event.generation == slot.generation:
                    waiters = tuple(slot.waiters)
                    slot.waiters.clear()
                    slot.last_error = str(event.error)
                    self._stop(event.model, slot)
                    if waiters:
                        self._fx.failed(event.model, waiters, event.error)
            case Crashed():
                if slot.state is State.READY and event.generation == slot.generation:
                    slot.last_error = event.reason
                    self._stop(event.model, slot)
            case Unload():
                if slot.state in (State.STARTING, State.READY):
                    waiters = tuple(slot.waiters)
                    slot.waiters.clear()
                    self._stop(event.model, slot)
                    if waiters:
                        self._fx.failed(event.model, waiters,
                                        RuntimeFailure(f"{event.model}: unloaded while starting"))
                elif slot.state is State.STOPPING and slot.waiters:
                    waiters = tuple(slot.waiters)  # an unload cancels the pending restart
                    slot.waiters.clear()
                    self._fx.failed(event.model, waiters, RuntimeFailure(f"{event.model}: unloaded"))
            case Stopped():
                if slot.state is State.STOPPING and event.generation == slot.generation:
                    self._set(event.model, slot, State.STOPPED)
                    if slot.waiters and not self._shutting_down:
                        self._start(event.model, slot)  # requests that came while stopping
            case _:  # pragma: no cover
                raise TypeError(f"not a supervisor event: {event!r}")

    # -- transitions

    def _on_request(self, model: str, slot: Slot, waiter: Waiter) -> None:
        if self._shutting_down:
            self._fx.failed(model, (waiter,), RuntimeFailure("the runtime is shutting down"))
        elif slot.state is State.READY:
            self._fx.ready(model, slot.generation, (waiter,))
        elif slot.state is State.STOPPED:
            slot.waiters.append(waiter)
            self._start(model, slot)
        else:  # starting: join it; stopping: wait, then restart
            slot.waiters.append(waiter)

    def _start(self, model: str, slot: Slot) -> None:
        slot.generation += 1
        self._set(model, slot, State.STARTING)
        self._fx.start(model, slot.generation)

    def _stop(self, model: str, slot: Slot) -> None:
        self._set(model, slot, State.STOPPING)
        self._fx.stop(model, slot.generation)

    def _set(self, model: str, slot: Slot, new: State) -> None:
        old, slot.state = slot.state, new
        if old is not new:
            self._fx.state_changed(model, old, new)

    def _shutdown(self) -> None:
        self._shutting_down = True
        for model, slot in self._slots.items():
            waiters = tuple(slot.waiters)
            slot.waiters.clear()
            if slot.state in (State.STARTING, State.READY):
                self._stop(model, slot)
            if waiters:
                self._fx.failed(model, waiters, RuntimeFailure("the runtime is shutting down"))


__all__ = [
    "Crashed", "Effects", "Event", "Request", "Shutdown", "Slot", "StartFailed", "Started", "State",
    "Stopped", "Supervisor", "Unload", "Waiter",
]
