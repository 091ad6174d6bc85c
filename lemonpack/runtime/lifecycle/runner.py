"""The runner: the pure supervisor bound to real engines, the one driver of engines.

Design notes: ``SUPERVISOR.md`` next to this file. :class:`Runner` feeds events to the
:class:`~lemonpack.runtime.lifecycle.supervisor.Supervisor` (decisions, no I/O) under one lock and
performs the commands it issues (the ``Effects`` protocol) through
:class:`~lemonpack.runtime.engines.handles.Engines`, each on a worker thread that reports back with an
event, so no effect blocks the machine. Thread-safe ``request`` / ``ensure_ready`` /
``unload`` / ``close``; used by ``lemonpack run`` (one model) and the server (many).
Failures of observers are logged to ``lemonpack.runtime.lifecycle.runner``.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lemonpack.errors import LemonpackError, RuntimeFailure, TrustError
from lemonpack.runtime.engines import probes
from lemonpack.runtime.engines.handles import EngineProcess, Engines
from lemonpack.runtime.launch.plan import LaunchPlan
from lemonpack.runtime.lifecycle.supervisor import (
    Crashed, Request, Shutdown, StartFailed, Started, State, Stopped, Supervisor, Unload,
)

if TYPE_CHECKING:
    from lemonpack.trust.check import Trust
    from lemonpack.trust.requirements import Verdict

log = logging.getLogger("lemonpack.runtime.lifecycle.runner")


@dataclass
class _Live:
    generation: int
    engine: EngineProcess | None = None
    watchdog: probes.Watchdog | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class ModelReferences:
    """What a model's launch takes from registries, listed without building its launch plan
    (``serve``'s trust check before admission): ``model`` (its name), ``recipe`` (the recipe id
    a refusal names), ``images`` (the engine's container images:
    :func:`lemonpack.runtime.launch.build.launch_images`), ``checkpoints`` (``{checkpoint name:
    oci:// reference}`` pulled before the start:
    :func:`lemonpack.runtime.models.ref.launch_checkpoints`)."""

    model: str
    recipe: str
    images: tuple[str, ...] = ()
    checkpoints: Mapping[str, str] = field(default_factory=dict)


class Runner:
    """The supervisor bound to real engines: a thread-safe front for many models.

    ``plans`` maps a model name to its :class:`LaunchPlan` (a mapping or a callable, called
    at each start). :meth:`ensure_ready` blocks until the model's engine is ready (starting
    it, or joining a start under way) and returns it. ``on_state(model, old, new)`` observes
    transitions; ``on_spawn(model, engine)`` is called as soon as an engine is spawned,
    before its probe (``lemonpack run`` streams its log lines from there). Decisions are the
    :class:`Supervisor`'s; this class only performs them. It is the one driver of engines:
    ``lemonpack run`` (one model) and the server (many) both use it.

    Before each spawn the plan's container images are judged by the trust policy
    (:func:`trusted_plan`): a rejected image is never started (the start fails with the
    refusal); :meth:`trust_refusal` asks the same question ahead, for the server's 403, of the
    references ``judged_references(model)`` lists (:class:`ModelReferences`; without it, of
    the model's plan). ``trust``: the :class:`~lemonpack.trust.check.Trust` to judge with
    (``--policy``, ``--registries.d``); None: the default places, read at each check.
    """

    def __init__(self, plans: Mapping[str, LaunchPlan] | Callable[[str], LaunchPlan],
                 engines: Engines | None = None, *, watchdog_interval: float | None = None,
                 watchdog_failures: int = 3, on_state: Callable[[str, State, State], None] | None = None,
                 on_spawn: Callable[[str, EngineProcess], None] | None = None, trust: Trust | None = None,
                 judged_references: Callable[[str], ModelReferences] | None = None) -> None:
        self._plans = plans
        self._judged_references = judged_references  # what trust_refusal judges: no plan, no weights
        self.trust = trust
        self._on_spawn = on_spawn
        self.engines = engines or Engines()
        self._own_engines = engines is None
        self.watchdog_interval, self.watchdog_failures = watchdog_interval, watchdog_failures
        self._on_state = on_state
        self._observers: list[Callable[[str, State, State], None]] = []
        self._lock = threading.RLock()
        self._sv = Supervisor(self)
        self._live: dict[str, _Live] = {}
        self._idle = threading.Condition(self._lock)
        self.starts = 0  # engines spawned (for tests and stats)
        self._refusals: dict[str, str | None] = {}
        self._verdicts: dict[str, dict[str, object]] = {}

    # -- public API

    def ensure_ready(self, model: str, timeout: float | None = None) -> EngineProcess:
        """Block until ``model`` is ready; return its engine. Raises RuntimeFailure when the
        start fails, the model is unloaded meanwhile, or ``timeout`` seconds pass."""
        fut = self.request(model)
        try:
            return fut.result(timeout)
        except TimeoutError as e:
            raise RuntimeFailure(f"{model}: not ready within {timeout}s") from e

    def request(self, model: str) -> Future:
        """Ask for ``model`` without blocking: a future resolved with its ready engine, or
        failed with RuntimeFailure (start failed, unloaded, shutting down)."""
        fut: Future = Future()
        self._post(Request(model, fut))
        return fut

    def last_error(self, model: str) -> str | None:
        """Why ``model``'s last engine failed or crashed (None: it did not)."""
        with self._lock:
            return self._sv.slot(model).last_error

    def unload(self, model: str, timeout: float | None = 60.0) -> None:
        """Stop ``model``'s engine and wait until it is stopped."""
        self._post(Unload(model))
        self._wait(lambda: self._sv.state(model) is State.STOPPED, timeout)

    def state(self, model: str) -> State:
        with self._lock:
            return self._sv.state(model)

    def models(self) -> dict[str, State]:
        """Every model this runner has started or tried to start, and its state."""
        with self._lock:
            return self._sv.models()

    def engine(self, model: str) -> EngineProcess | None:
        """The current engine of ``model`` (None when there is none)."""
        with self._lock:
            live = self._live.get(model)
            return live.engine if live else None

    def wait_state(self, model: str, state: State, timeout: float | None = 30.0) -> bool:
        """Block until ``model`` is in ``state``; False on timeout."""
        return self._wait(lambda: self._sv.state(model) is state, timeout)

    def close(self, timeout: float | None = 120.0) -> None:
        """Stop every model and wait; then close the engines driver if we made it."""
        self._post(Shutdown())
        self._wait(lambda: self._sv.idle, timeout)
        if self._own_engines:
            self.engines.close()

    # -- plumbing

    def _post(self, event) -> None:
        with self._lock:
            self._sv.handle(event)
            self._idle.notify_all()

    def _wait(self, pred: Callable[[], bool], timeout: float | None) -> bool:
        with self._idle:
            return self._idle.wait_for(pred, timeout)

    def _plan(self, model: str) -> LaunchPlan:
        return self._plans(model) if callable(self._plans) else self._plans[model]

    def trust_refusal(self, model: str) -> str | None:
        """The trust policy's refusal of ``model``'s engine images (one line naming the
        image, the policy file, the scope and the reason), or None when they are accepted, or
        the plan cannot be built (the start reports that). Cached per model for the runner's
        life; the check before each spawn is not cached. Blocks (registry I/O)."""
        if model not in self._refusals:
            try:
                self._judge_ahead(model)
                self._refusals[model] = None
            except TrustError as e:
                self._refusals[model] = str(e)
            except LemonpackError:
                return None
        return self._refusals[model]

    def trust_checked(self, model: str) -> bool:
        """Whether :meth:`trust_refusal` has a cached answer for ``model`` (then it does not block)."""
        return model in self._refusals

    def trust_status(self, model: str) -> dict[str, object] | None:
        """The last trust check of ``model``'s engine images and, when judged ahead
        (:meth:`trust_refusal` with ``judged_references``), its ``oci://`` checkpoints first
        (:meth:`trust_refusal` or the check before a spawn): ``{"allowed": bool, "scope": label, "reason": sentence or None,
        "reference": judged reference, "policy": file}``; for several images, the first
        rejected one (else the last judged). None when no check ran (no policy file, no
        registry image, or not asked yet). Does not block."""
        with self._lock:
            return self._verdicts.get(model)

    def _trusted(self, model: str) -> LaunchPlan:
        """:func:`trusted_plan` of ``model``'s plan, recording what it decided (:meth:`trust_status`)."""
        seen: list = []
        try:
            return trusted_plan(self._plan(model), self.trust, on_verdict=seen.append)
        finally:
            self._record(model, seen)

    def _judge_ahead(self, model: str) -> None:
        """Judge what ``model``'s launch would take from registries (its ``judged_references``:
        checkpoints, then engine images, as a start meets them) without building its plan, so
        asking whether a model is trusted downloads no weights and takes no port; without
        ``judged_references``, the plan's images (:meth:`_trusted`). Raises TrustError."""
        if self._judged_references is None:
            self._trusted(model)
            return
        from lemonpack.runtime.models.ref import checkpoint_use

        refs = self._judged_references(model)
        if not refs.images and not refs.checkpoints:
            return  # nothing to judge: no policy read
        if self.trust is not None:
            trust = self.trust
        else:
            from lemonpack.trust.check import Trust

            trust = Trust.load()
        seen: list = []  # checkpoints' verdicts too: the status page shows a rejected model, not only images
        try:
            for name, reference in refs.checkpoints.items():
                trust.enforce(reference, use=checkpoint_use(refs.model, name), on_verdict=seen.append)
            for image in refs.images:
                trust.enforce_image(image, use=f"{refs.recipe}: engine image", on_verdict=seen.append)
        finally:
            self._record(model, seen)

    def _record(self, model: str, seen: list) -> None:
        """Keep the verdicts of a check of ``model``'s checkpoints and engine images for :meth:`trust_status`."""
        if seen:
            v = next((v for v in seen if not v.allowed), seen[-1])
            with self._lock:
                self._verdicts[model] = {"allowed": all(x.allowed for x in seen), "scope": v.scope,
                                         "reason": v.reason or None, "reference": v.reference,
                                         "policy": v.policy_file}

    # -- Effects (called under the lock; must not block)

    def start(self, model: str, generation: int) -> None:
        live = self._live[model] = _Live(generation)
        threading.Thread(target=self._do_start, args=(model, live), name=f"start-{model}", daemon=True).start()

    def stop(self, model: str, generation: int) -> None:
        live = self._live.get(model)
        if live is None or live.generation != generation:
            live = _Live(generation)
        live.cancelled.set()
        threading.Thread(target=self._do_stop, args=(model, live), name=f"stop-{model}", daemon=True).start()

    def ready(self, model, generation, waiters) -> None:
        eng = self._live[model].engine
        for w in waiters:
            _settle(w, eng, None)

    def failed(self, model, waiters, error) -> None:
        for w in waiters:
            _settle(w, None, error)

    def state_changed(self, model, old, new) -> None:
        for fn in (self._on_state, *self._observers):
            if fn is None:
                continue
            try:  # an observer must not break the machine in the middle of a transition
                fn(model, old, new)
            except Exception:  # noqa: BLE001
                log.exception("%s: state observer failed on %s -> %s", model, old.value, new.value)

    def add_observer(self, fn: Callable[[str, State, State], None]) -> None:
        """Also call ``fn(model, old, new)`` on every transition (under the runner's lock, on
        whichever thread made it: ``fn`` must only hand the event on, never block)."""
        with self._lock:
            self._observers.append(fn)

    # -- workers

    def _do_start(self, model: str, live: _Live) -> None:
        try:
            plan = self._trusted(model)  # the images judged are the ones spawned
            with live.lock:
                if live.cancelled.is_set():
                    raise RuntimeFailure(f"{model}: start cancelled")
                live.engine = eng = self.engines.spawn(plan)
                self.starts += 1
            if self._on_spawn is not None:
                try:
                    self._on_spawn(model, eng)
                except Exception:  # noqa: BLE001
                    log.exception("%s: on_spawn observer failed", model)
            self.engines.wait_ready(eng, cancelled=live.cancelled)
        except Exception as e:  # noqa: BLE001 (every failure is reported as an event)
            err = e if isinstance(e, RuntimeFailure) else RuntimeFailure(f"{model}: {e}")
            self._post(StartFailed(model, live.generation, err))
            return
        gen = live.generation
        if live.cancelled.is_set():  # unloaded while the probe ran: the stop worker cleans up
            self._post(StartFailed(model, gen, RuntimeFailure(f"{model}: start cancelled")))
            return
        eng.on_exit(lambda rc: self._post(Crashed(model, gen, exit_text(rc))))
        if plan.health_probe.type == "http":
            live.watchdog = probes.Watchdog(plan.health_probe, plan.host, plan.port,
                                            lambda why: self._post(Crashed(model, gen, WATCHDOG + why)),
                                            interval=self.watchdog_interval, failures=self.watchdog_failures,
                                            name=model).start()
        self._post(Started(model, gen))

    def _do_stop(self, model: str, live: _Live) -> None:
        try:
            with live.lock:
                eng = live.engine
            if live.watchdog is not None:
                live.watchdog.stop()
            if eng is not None:
                self.engines.stop(eng)
        finally:
            self._post(Stopped(model, live.generation))


#: How a crash reason reported by the watchdog starts (the engine runs but fails its health
#: check; the runner stops it and the next request starts a new one).
WATCHDOG = "watchdog: "


def trusted_plan(plan: LaunchPlan, trust: Trust | None = None, *,
                 on_verdict: Callable[[Verdict], None] | None = None) -> LaunchPlan:
    """``plan`` with every registry image its container command line names judged by the
    trust policy (:func:`lemonpack.trust.check.enforce_argv`: ``trust``, else
    containers-policy.json found as podman finds it) and written by the digest judged. A plan that runs no container is
    returned as it is, without reading any policy. Raises
    :class:`~lemonpack.errors.TrustError` (exit 3) before anything is spawned."""
    from dataclasses import replace

    from lemonpack.trust.check import enforce_argv

    argv = enforce_argv(plan.argv, trust, use=f"{plan.recipe}: engine image", on_verdict=on_verdict)
    return plan if argv == tuple(plan.argv) else replace(plan, argv=argv)


def exit_text(rc: int) -> str:
    """The crash reason of an engine that exited with return code ``rc`` (``subprocess``'s:
    negative for a signal): ``engine exited with code 3``, ``engine exited with code -9
    (killed by signal SIGKILL)``."""
    text = f"engine exited with code {rc}"
    if rc < 0:
        try:
            text += f" (killed by signal {signal.Signals(-rc).name})"
        except ValueError:
            text += f" (killed by signal {-rc})"
    return text


def _settle(waiter: Future, result, error: BaseException | None) -> None:
    """Resolve ``waiter`` unless its owner already gave up on it (cancelled, or resolved by a
    timeout): a waiter that is gone is dropped and never stops the others being answered."""
    try:
        if error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(result)
    except InvalidStateError:
        pass


__all__ = ["ModelReferences", "Runner", "WATCHDOG", "exit_text"]
