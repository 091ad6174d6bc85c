"""Endpoint models, pure: the EndpointPool's health and choice, and the serving policy's
remote rules, synchronously with an injected clock (no sleeps, no I/O)."""

from __future__ import annotations

from lemonpack.runtime.serving.gateway import DOWN, UNKNOWN, UP, EndpointPool
from lemonpack.runtime.serving.policy import (
    Arrive, EngineExited, EngineFailed, EngineReady, Finish, ModelInfo, Phase, Shutdown, Tick, Unload,
)

from support.serving import Clock, GiB, make

A, B, C = "http://a:1", "http://b:2", "http://c:3"
REMOTE = ModelInfo(remote=True, memory=100 * GiB)


def pool(*urls, interval=0.5):
    clock = Clock()
    p = EndpointPool(clock)
    p.set_model("m", urls, interval)
    return p, clock


def test_unknown_until_probed_then_up_down_by_probe():
    p, clock = pool(A, B)
    assert p.state("m") == UNKNOWN and p.pick("m") is None
    assert sorted(p.due()) == [("m", A), ("m", B)]
    assert p.due() == []  # running: not asked twice
    assert p.observe("m", A, False, "connection refused") is None  # B still unknown
    assert p.observe("m", B, False, "HTTP 503") == DOWN
    assert p.reason("m") == f"{A}: connection refused; {B}: HTTP 503"
    clock.t = 0.49
    assert p.due() == []
    clock.t = 0.5  # one interval later, down ones are probed again
    assert sorted(p.due()) == [("m", A), ("m", B)]
    assert p.observe("m", B, True, "HTTP 200") == UP
    assert p.pick("m") == B
    assert p.observe("m", A, True, "HTTP 200") is None  # still up: no change to report


def test_least_in_flight_ties_deterministic_round_the_endpoints():
    p, _ = pool(A, B, C)
    for u in (A, B, C):
        p.due()
        p.observe("m", u, True, "HTTP 200")
    # idle: ties go to the least recently picked, then registry order: round the endpoints
    picks = [p.pick("m") for _ in range(3)]
    assert picks == [A, B, C]
    p.done("m", A)
    p.done("m", C)
    assert p.pick("m") == A  # A and C have 0 in flight, A was picked longer ago
    assert p.pick("m") == C
    # now A=1, B=1, C=1; B finishes twice (once too many: never negative)
    p.done("m", B)
    p.done("m", B)
    assert p.pick("m") == B
    assert [e.in_flight for e in p.endpoints("m")] == [1, 1, 1]
    assert p.pick("m", exclude=[A, B]) == C


def test_connect_failure_takes_it_out_until_a_probe_passes():
    p, clock = pool(A, B)
    for u in (A, B):
        p.due()
        p.observe("m", u, True, "HTTP 200")
    assert p.connect_failed("m", A, "connection refused") is None
    assert [p.pick("m") for _ in range(3)] == [B, B, B]  # A gets nothing while down
    assert p.connect_failed("m", B, "connection reset") == DOWN
    assert p.pick("m") is None
    clock.t = 1.0
    due = p.due()
    assert ("m", A) in due
    assert p.observe("m", A, True, "HTTP 200") == UP
    assert p.pick("m") == A


def test_update_keeps_known_endpoints_and_probes_new_ones():
    p, _ = pool(A)
    p.due()
    p.observe("m", A, True, "HTTP 200")
    p.set_model("m", [A, B], 0.5)
    assert p.state("m") == UP and [e.state for e in p.endpoints("m")] == [UP, UNKNOWN]
    assert p.due() == [("m", B)]
    p.drop_model("m")
    assert p.state("m") == UNKNOWN and p.pick("m") is None and p.observe("m", A, True, "x") is None


# -- the serving policy's remote rules


def test_remote_model_waits_for_verdict_then_granted_never_admitted_or_stopped():
    p, fx, clock = make(budget=1 * GiB, ttl=10.0)
    p.handle(Arrive(1, "r", REMOTE))
    assert [e[0] for e in fx.log] == ["start"]  # 100 GiB "needed", but nothing is admitted for a remote model
    assert p.used() == 0 and p.memory() == {}
    p.handle(EngineReady("r", "remote-r"))
    assert fx.answers[1] == ("grant", "r", "remote-r")
    p.handle(Finish(1))
    clock.t = 100.0
    p.handle(Tick())  # no TTL for a remote model
    assert p.phase("r") is Phase.READY and fx.stops == 0
    p.handle(Shutdown())
    assert fx.stops == 0


def test_remote_down_answers_503_at_once_with_the_reason_until_it_is_back():
    p, fx, _ = make()
    p.handle(Arrive(1, "r", REMOTE))
    p.handle(Arrive(2, "r", REMOTE))
    p.handle(EngineFailed("r", "http://a:1: connection refused"))
    assert fx.answers[1][:3] == ("reject", 503, "model_unavailable")
    assert "connection refused" in fx.answers[1][3] and fx.answers[2][1] == 503
    p.handle(Arrive(3, "r", REMOTE))
    assert fx.answers[3][:3] == ("reject", 503, "model_unavailable")  # at once, no start asked again
    assert fx.starts == 1
    p.handle(EngineReady("r", "remote-r"))  # a probe passed: ready, no one asked
    p.handle(Arrive(4, "r", REMOTE))
    assert fx.answers[4][0] == "grant"
    p.handle(EngineExited("r", "http://a:1: HTTP 500"))
    p.handle(Arrive(5, "r", REMOTE))
    assert fx.answers[5][1] == 503 and "HTTP 500" in fx.answers[5][3]
    p.handle(Finish(4))
    assert p.in_flight() == {}


def test_remote_load_waits_for_a_passing_probe_and_times_out():
    p, fx, clock = make(load_timeout=5.0)
    p.handle(Arrive(1, "r", REMOTE, load=True))
    p.handle(EngineFailed("r", "all down"))
    assert 1 not in fx.answers  # a load waits for a passing probe
    p.handle(EngineReady("r", "remote-r"))
    assert fx.answers[1][0] == "grant"
    p.handle(EngineExited("r", "all down"))
    p.handle(Arrive(2, "r", REMOTE, load=True))
    assert fx.starts == 2
    p.handle(EngineFailed("r", "all down"))
    clock.t = 6.0
    p.handle(Tick())
    assert fx.answers[2][:3] == ("reject", 503, "model_load_timeout")


def test_remote_in_flight_limit_and_slot_policy_do_not_apply_to_others():
    p, fx, _ = make(max_in_flight=2)
    npu = ModelInfo(slot_policy="exclusive_npu")
    p.handle(Arrive(1, "r", ModelInfo(remote=True, slot_policy="exclusive_npu")))
    p.handle(EngineReady("r", "remote-r"))
    p.handle(Arrive(2, "r", REMOTE))
    p.handle(Arrive(3, "r", REMOTE))
    assert fx.answers[3][:2] == ("reject", 429)  # same in-flight limit as a local engine
    p.handle(Arrive(4, "local", npu))  # a remote model is never a slot conflict
    assert ("start", "local", ()) in fx.log and fx.stops == 0
    p.handle(Unload("r"))  # forgets the verdict, stops nothing
    assert fx.stops == 0 and p.phase("r") is Phase.STOPPED


def test_a_model_re_registered_local_is_local_again():
    p, fx, clock = make(ttl=10.0)
    p.handle(Arrive(1, "r", REMOTE))
    p.handle(EngineReady("r", "remote-r"))
    p.handle(Finish(1))
    p.handle(Unload("r"))  # the driver: no longer an endpoint model
    p.handle(Arrive(2, "r", ModelInfo(memory=1)))
    assert fx.log[-1] == ("start", "r", ())
    p.handle(EngineReady("r", "eng-r"))
    p.handle(Finish(2))
    clock.t = 20.0
    p.handle(Tick())
    assert fx.stops == 1  # TTL applies again


def test_retry_only_unsent_once_and_only_with_another_live_endpoint():
    p, _ = pool(A, B)
    for u in (A, B):
        p.due()
        p.observe("m", u, True, "HTTP 200")
    p.connect_failed("m", A, "connection refused")
    assert p.retry("m", [A], unsent=True)
    assert not p.retry("m", [A], unsent=False)  # the engine may have received it
    assert not p.retry("m", [A, B], unsent=True)  # once only
    p.connect_failed("m", B, "connection refused")
    assert not p.retry("m", [A], unsent=True)  # nowhere left to go
