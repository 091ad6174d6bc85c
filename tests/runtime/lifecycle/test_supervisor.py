"""The supervisor's decisions (lemonpack/runtime/lifecycle/supervisor.py), synchronously against a
fake effects object (no processes); then under random interleavings (seeded): a simulated world
answers the supervisor's commands in a random order, and random requests, crashes and unloads
arrive in between. Invariants checked after every event:

- at most one engine per model is alive or starting: a ``start`` is never issued while an
  earlier generation has not been confirmed ``Stopped``;
- generations only grow;
- every waiter is answered exactly once, and once the world is drained nothing is pending.
"""

from __future__ import annotations

import random

import pytest

from lemonpack.errors import RuntimeFailure
from lemonpack.runtime.lifecycle.supervisor import (
    Crashed, Request, Shutdown, StartFailed, Started, State, Stopped, Supervisor, Unload,
)


class FakeEffects:
    """Records every command in order as tuples."""

    def __init__(self):
        self.calls = []

    def start(self, model, generation):
        self.calls.append(("start", model, generation))

    def stop(self, model, generation):
        self.calls.append(("stop", model, generation))

    def ready(self, model, generation, waiters):
        self.calls.append(("ready", model, generation, waiters))

    def failed(self, model, waiters, error):
        self.calls.append(("failed", model, waiters, str(error)))

    def state_changed(self, model, old, new):
        self.calls.append(("state", model, old.value, new.value))

    def commands(self):
        return [c for c in self.calls if c[0] != "state"]

    def take(self):
        out, self.calls = self.commands(), []
        return out


@pytest.fixture
def sv():
    fx = FakeEffects()
    s = Supervisor(fx)
    s.fx = fx
    return s


def test_cold_request_starts_one_engine_and_many_join(sv):
    for i in range(10):
        sv.handle(Request("m", i))
    assert sv.fx.take() == [("start", "m", 1)]
    assert sv.state("m") is State.STARTING
    sv.handle(Started("m", 1))
    assert sv.fx.take() == [("ready", "m", 1, tuple(range(10)))]
    assert sv.state("m") is State.READY


def test_request_when_ready_is_answered_at_once(sv):
    sv.handle(Request("m", "a"))
    sv.handle(Started("m", 1))
    sv.fx.take()
    sv.handle(Request("m", "b"))
    assert sv.fx.take() == [("ready", "m", 1, ("b",))]


def test_state_transitions_are_observed(sv):
    sv.handle(Request("m", "a"))
    sv.handle(Started("m", 1))
    sv.handle(Unload("m"))
    sv.handle(Stopped("m", 1))
    assert [c[2:] for c in sv.fx.calls if c[0] == "state"] == [
        ("stopped", "starting"), ("starting", "ready"), ("ready", "stopping"), ("stopping", "stopped")]


def test_start_failure_fails_waiters_cleans_up_and_is_not_sticky(sv):
    sv.handle(Request("m", "a"))
    sv.handle(Request("m", "b"))
    sv.fx.take()
    sv.handle(StartFailed("m", 1, RuntimeFailure("exit 3")))
    assert sv.fx.take() == [("stop", "m", 1), ("failed", "m", ("a", "b"), "exit 3")]
    assert sv.state("m") is State.STOPPING
    sv.handle(Stopped("m", 1))
    assert sv.state("m") is State.STOPPED
    assert sv.slot("m").last_error == "exit 3"
    sv.handle(Request("m", "c"))  # no sticky failure: the next request starts again
    assert sv.fx.take() == [("start", "m", 2)]


def test_crash_after_ready_goes_back_to_stopped_then_next_request_restarts(sv):
    sv.handle(Request("m", "a"))
    sv.handle(Started("m", 1))
    sv.fx.take()
    sv.handle(Crashed("m", 1, "exited with 139"))
    assert sv.fx.take() == [("stop", "m", 1)]
    sv.handle(Stopped("m", 1))
    assert sv.state("m") is State.STOPPED
    assert sv.fx.take() == []  # no restart without a request
    sv.handle(Request("m", "b"))
    assert sv.fx.take() == [("start", "m", 2)]
    sv.handle(Started("m", 2))
    assert sv.fx.take() == [("ready", "m", 2, ("b",))]


def test_requests_during_crash_cleanup_restart_once_stopped(sv):
    sv.handle(Request("m", "a"))
    sv.handle(Started("m", 1))
    sv.handle(Crashed("m", 1, "watchdog"))
    sv.fx.take()
    sv.handle(Request("m", "b"))
    sv.handle(Request("m", "c"))
    assert sv.fx.take() == []
    sv.handle(Stopped("m", 1))
    assert sv.fx.take() == [("start", "m", 2)]
    sv.handle(Started("m", 2))
    assert sv.fx.take() == [("ready", "m", 2, ("b", "c"))]


def test_stale_events_of_older_generations_are_ignored(sv):
    sv.handle(Request("m", "a"))
    sv.handle(Started("m", 1))
    sv.handle(Crashed("m", 1, "x"))
    sv.handle(Stopped("m", 1))
    sv.handle(Request("m", "b"))
    sv.fx.take()
    sv.handle(Crashed("m", 1, "late report of the old engine"))
    sv.handle(Started("m", 1))
    sv.handle(StartFailed("m", 1, RuntimeFailure("old")))
    sv.handle(Stopped("m", 1))
    assert sv.fx.take() == []
    assert sv.state("m") is State.STARTING


def test_crash_while_starting_is_not_a_crash(sv):
    sv.handle(Request("m", "a"))
    sv.fx.take()
    sv.handle(Crashed("m", 1, "x"))  # the start path reports StartFailed instead
    assert sv.fx.take() == [] and sv.state("m") is State.STARTING


def test_unload_ready(sv):
    sv.handle(Request("m", "a"))
    sv.handle(Started("m", 1))
    sv.fx.take()
    sv.handle(Unload("m"))
    assert sv.fx.take() == [("stop", "m", 1)]
    sv.handle(Unload("m"))  # idempotent while stopping
    assert sv.fx.take() == []
    sv.handle(Stopped("m", 1))
    assert sv.state("m") is State.STOPPED
    sv.handle(Unload("m"))
    assert sv.fx.take() == []


def test_unload_during_start_cancels_it(sv):
    sv.handle(Request("m", "a"))
    sv.fx.take()
    sv.handle(Unload("m"))
    assert sv.fx.take() == [("stop", "m", 1), ("failed", "m", ("a",), "m: unloaded while starting")]
    sv.handle(Started("m", 1))  # the cancelled start finishing late changes nothing
    assert sv.state("m") is State.STOPPING and sv.fx.take() == []
    sv.handle(Stopped("m", 1))
    assert sv.state("m") is State.STOPPED


def test_unload_while_stopping_drops_pending_restart(sv):
    sv.handle(Request("m", "a"))
    sv.handle(Started("m", 1))
    sv.handle(Crashed("m", 1, "x"))
    sv.handle(Request("m", "b"))
    sv.fx.take()
    sv.handle(Unload("m"))
    assert sv.fx.take() == [("failed", "m", ("b",), "m: unloaded")]
    sv.handle(Stopped("m", 1))
    assert sv.fx.take() == [] and sv.state("m") is State.STOPPED


def test_models_are_independent(sv):
    sv.handle(Request("a", 1))
    sv.handle(Request("b", 2))
    assert sv.fx.take() == [("start", "a", 1), ("start", "b", 1)]
    sv.handle(StartFailed("a", 1, RuntimeFailure("boom")))
    sv.handle(Started("b", 1))
    assert sv.fx.take() == [("stop", "a", 1), ("failed", "a", (1,), "boom"), ("ready", "b", 1, (2,))]
    assert sv.models() == {"a": State.STOPPING, "b": State.READY}


def test_shutdown_stops_everything_and_refuses_new_requests(sv):
    sv.handle(Request("a", 1))
    sv.handle(Request("b", 2))
    sv.handle(Started("b", 1))
    sv.handle(Request("c", 3))
    sv.handle(Crashed("b", 1, "x"))
    sv.handle(Request("b", 4))
    sv.fx.take()
    sv.handle(Shutdown())
    cmds = sv.fx.take()
    assert ("stop", "a", 1) in cmds and ("stop", "c", 1) in cmds
    assert ("failed", "a", (1,), "the runtime is shutting down") in cmds
    assert ("failed", "b", (4,), "the runtime is shutting down") in cmds
    sv.handle(Request("d", 5))
    assert sv.fx.take() == [("failed", "d", (5,), "the runtime is shutting down")]
    assert not sv.idle
    for m in ("a", "b", "c"):
        sv.handle(Stopped(m, 1))
    assert sv.idle and sv.fx.take() == []  # no restart during shutdown


# --- random interleavings -------------------------------------------------------------------

class World:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.pending: list = []  # events the world will deliver later
        self.live: dict[str, set[int]] = {}  # model -> generations with an engine not yet stopped
        self.last_gen: dict[str, int] = {}
        self.answers: dict[object, int] = {}
        self.ready_gens: dict[str, int] = {}

    # Effects
    def start(self, model, generation):
        live = self.live.setdefault(model, set())
        assert not live, f"{model}: start of {generation} while {live} still alive"
        assert generation > self.last_gen.get(model, 0)
        self.last_gen[model] = generation
        live.add(generation)
        if self.rng.random() < 0.7:
            self.pending.append(Started(model, generation))
        else:
            self.pending.append(StartFailed(model, generation, RuntimeFailure("boom")))

    def stop(self, model, generation):
        self.pending.append(Stopped(model, generation))

    def ready(self, model, generation, waiters):
        for w in waiters:
            self.answers[w] = self.answers.get(w, 0) + 1
        self.ready_gens[model] = generation

    def failed(self, model, waiters, error):
        for w in waiters:
            self.answers[w] = self.answers.get(w, 0) + 1

    def state_changed(self, model, old, new):
        pass

    def deliver(self, sv: Supervisor, index: int) -> None:
        ev = self.pending.pop(index)
        if isinstance(ev, Stopped):
            self.live.get(ev.model, set()).discard(ev.generation)
        sv.handle(ev)


@pytest.mark.parametrize("seed", range(200))
def test_random_interleavings_keep_the_invariants(seed):
    rng = random.Random(seed)
    world = World(rng)
    sv = Supervisor(world)
    models = ["a", "b"]
    waiters = 0
    for _ in range(rng.randrange(20, 80)):
        roll = rng.random()
        model = rng.choice(models)
        if roll < 0.35:
            waiters += 1
            sv.handle(Request(model, waiters))
        elif roll < 0.45:
            gen = world.last_gen.get(model, 0)
            sv.handle(Crashed(model, gen, "crash"))
        elif roll < 0.5:
            sv.handle(Unload(model))
        elif roll < 0.52:
            sv.handle(Crashed(model, max(0, world.last_gen.get(model, 0) - 1), "stale"))
        elif world.pending:
            world.deliver(sv, rng.randrange(len(world.pending)))
    if rng.random() < 0.3:
        sv.handle(Shutdown())
    while world.pending:  # drain
        world.deliver(sv, rng.randrange(len(world.pending)))
    assert all(n == 1 for n in world.answers.values()), world.answers
    assert len(world.answers) == waiters, "a waiter was never answered"
    for model in models:
        assert sv.state(model) in (State.STOPPED, State.READY)
        if sv.state(model) is State.READY:
            assert world.live[model] == {world.last_gen[model]}
        else:
            assert not world.live.get(model)
