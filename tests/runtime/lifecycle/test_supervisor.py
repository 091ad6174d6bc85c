"""The supervisor's decisions, synchronously against a fake effects object (no processes)."""

from __future__ import annotations

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
