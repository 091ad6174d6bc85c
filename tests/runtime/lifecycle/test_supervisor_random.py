"""The supervisor under random interleavings (seeded, synchronous, no processes).

A simulated world answers the supervisor's commands in a random order, and random requests,
crashes and unloads arrive in between. Invariants checked after every event:

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
