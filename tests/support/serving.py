"""A fake world for the serving policy (lemonpack/runtime/serving/policy.py): a clock only the test
moves and an effects object that records every command, for tests that drive the policy
synchronously (no sleeps, no I/O)."""

from __future__ import annotations

from lemonpack.runtime.serving.policy import ServingPolicy

#: Bytes in a GiB (memory figures of the policy are bytes).
GiB = 1 << 30


class Clock:
    """A clock read as ``clock()`` (seconds); the test sets ``clock.t``."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Fx:
    """Records effects; ``answers[req]`` is the one answer each request got."""

    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.answers: dict = {}
        self.twice: list = []
        self.running: set[str] = set()
        self.starts = self.stops = 0

    def _answer(self, req, what) -> None:
        if req in self.answers:
            self.twice.append(req)
        self.answers[req] = what

    def grant(self, req, model, engine):
        self.log.append(("grant", req, model))
        self._answer(req, ("grant", model, engine))

    def reject(self, req, status, kind, message):
        self.log.append(("reject", req, status, kind))
        self._answer(req, ("reject", status, kind, message))

    def start(self, model, info):
        self.log.append(("start", model, info.options))
        self.running.add(model)
        self.starts += 1

    def stop(self, model):
        self.log.append(("stop", model))
        self.stops += 1

    def downsize(self, model, engine):
        self.log.append(("downsize", model))

    def cut(self, req, reason):
        self.log.append(("cut", req, reason))


def make(**kw):
    """``(policy, effects, clock)``: a :class:`ServingPolicy` over :class:`Fx` and :class:`Clock`; ``kw`` its options."""
    clock, fx = Clock(), Fx()
    return ServingPolicy(fx, clock=clock, **kw), fx, clock
