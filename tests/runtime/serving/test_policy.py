"""The serving policy's decisions, synchronously, with an injected clock (no sleeps, no I/O)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from lemonpack.runtime.serving.policy import (
    Arrive, Cut, Drain, EngineExited, EngineFailed, EngineReady, EngineStopped, Finish, ModelInfo, Phase,
    ServingPolicy, Shutdown, Tick, Unload,
)

from support.serving import Clock, Fx, GiB, make


def up(p, fx, model, engine=None):
    """Complete a start the policy asked for."""
    p.handle(EngineReady(model, engine or f"eng-{model}"))


def down(p, model):
    p.handle(EngineStopped(model))


def test_cold_requests_share_one_start_then_are_granted():
    p, fx, _ = make()
    for r in range(3):
        p.handle(Arrive(r, "a"))
    assert [e for e in fx.log if e[0] == "start"] == [("start", "a", ())]
    up(p, fx, "a")
    assert {r: a[0] for r, a in fx.answers.items()} == {0: "grant", 1: "grant", 2: "grant"}
    assert p.in_flight() == {"a": 3}


def test_a_stream_on_a_is_never_cut_by_b():
    p, fx, _ = make()
    p.handle(Arrive(1, "a")); up(p, fx, "a")
    p.handle(Arrive(2, "b")); up(p, fx, "b")
    assert ("stop", "a") not in fx.log and fx.answers[2][0] == "grant"


def test_exclusive_swap_waits_for_running_streams():
    p, fx, _ = make()
    npu = ModelInfo(slot_policy="exclusive_npu")
    p.handle(Arrive(1, "a", npu)); up(p, fx, "a")
    p.handle(Arrive(2, "b", npu))
    assert ("stop", "a") not in fx.log and 2 not in fx.answers  # a's stream runs on
    p.handle(Arrive(3, "a", npu))
    assert 3 not in fx.answers  # a drains: no new grant
    p.handle(Finish(1))
    assert fx.log[-1] == ("stop", "a")
    down(p, "a")
    assert fx.log[-1] == ("start", "b", ())
    up(p, fx, "b")
    assert fx.answers[2][0] == "grant"
    p.handle(Finish(2))  # then a's waiter gets its turn: b gives way
    assert fx.log[-1] == ("stop", "b")


def test_coexist_by_type_swaps_same_kind_only():
    p, fx, _ = make()
    p.handle(Arrive(1, "chat1", ModelInfo(slot_policy="coexist_by_type", kind="chat"))); up(p, fx, "chat1")
    p.handle(Arrive(2, "emb", ModelInfo(slot_policy="coexist_by_type", kind="embeddings"))); up(p, fx, "emb")
    assert fx.answers[2][0] == "grant" and ("stop", "chat1") not in fx.log
    p.handle(Finish(1))
    p.handle(Arrive(3, "chat2", ModelInfo(slot_policy="coexist_by_type", kind="chat")))
    assert ("stop", "chat1") in fx.log and ("stop", "emb") not in fx.log


def test_memory_fits_starts_lru_idle_evicted_busy_never():
    p, fx, clock = make(budget=10 * GiB)
    m4 = ModelInfo(memory=4 * GiB)
    p.handle(Arrive(1, "a", m4)); up(p, fx, "a"); p.handle(Finish(1))
    clock.t = 1
    p.handle(Arrive(2, "b", m4)); up(p, fx, "b"); p.handle(Finish(2))
    clock.t = 2
    p.handle(Arrive(3, "a", m4))  # a used last: b is the LRU
    p.handle(Finish(3))
    p.handle(Arrive(4, "c", m4))
    assert fx.log[-1] == ("stop", "b") and 4 not in fx.answers
    down(p, "b")
    assert fx.log[-1] == ("start", "c", ())
    up(p, fx, "c")
    assert fx.answers[4][0] == "grant"
    # a and c busy: d cannot fit: 503 at once, nobody stopped
    p.handle(Arrive(5, "a", m4))
    p.handle(Arrive(6, "d", m4))
    st_, kind, msg = fx.answers[6][1:]
    assert (st_, kind) == (503, "insufficient_memory") and "needs 4.0 GiB, 2.0 GiB free of 10.0 GiB" in msg
    assert "busy: a 4.0 GiB, c 4.0 GiB" in msg and fx.stops == 1


def test_larger_than_the_budget_is_refused_without_a_start():
    p, fx, _ = make(budget=1 << 20)
    p.handle(Arrive(1, "big", ModelInfo(memory=2 << 20)))
    assert fx.answers[1][1:3] == (503, "insufficient_memory") and fx.starts == 0
    assert "more than the whole memory budget" in fx.answers[1][3]


def test_unmetered_is_not_counted():
    p, fx, _ = make(budget=1 << 20)
    p.handle(Arrive(1, "u", ModelInfo(memory=2 << 20, slot_policy="unmetered")))
    assert fx.starts == 1


def test_ttl_and_soft_idle_from_the_last_request_never_while_busy():
    p, fx, clock = make(ttl=10, soft_idle=4)
    p.handle(Arrive(1, "a")); up(p, fx, "a")
    clock.t = 50; p.handle(Tick())
    assert ("stop", "a") not in fx.log  # busy
    p.handle(Finish(1))
    clock.t = 53.9; p.handle(Tick())
    assert ("downsize", "a") not in fx.log
    clock.t = 54; p.handle(Tick()); p.handle(Tick())
    assert fx.log.count(("downsize", "a")) == 1
    clock.t = 60; p.handle(Tick())
    assert fx.log[-1] == ("stop", "a")


def test_load_timeout_answers_the_waiter_others_still_served():
    p, fx, clock = make(load_timeout=5)
    p.handle(Arrive(1, "slow"))
    p.handle(Arrive(2, "a")); up(p, fx, "a")
    clock.t = 5; p.handle(Tick())
    assert fx.answers[1][1:3] == (503, "model_load_timeout") and fx.answers[2][0] == "grant"


def test_max_in_flight_and_slot_freed_at_finish():
    p, fx, _ = make(max_in_flight=1)
    p.handle(Arrive(1, "a")); up(p, fx, "a")
    p.handle(Arrive(2, "a"))
    assert fx.answers[2][1] == 429
    p.handle(Finish(1))
    p.handle(Arrive(3, "a"))
    assert fx.answers[3][0] == "grant"


def test_load_with_other_options_reloads_after_in_flight():
    p, fx, _ = make()
    p.handle(Arrive(1, "a")); up(p, fx, "a")
    p.handle(Arrive(2, "a", ModelInfo(options=(("ctx_size", "512"),)), load=True))
    assert ("stop", "a") not in fx.log and 2 not in fx.answers
    p.handle(Finish(1))
    assert fx.log[-1] == ("stop", "a")
    down(p, "a")
    assert fx.log[-1] == ("start", "a", (("ctx_size", "512"),))
    up(p, fx, "a")
    assert fx.answers[2][0] == "grant" and p.in_flight() == {}


def test_start_failure_answers_waiters_and_is_not_sticky():
    p, fx, _ = make()
    p.handle(Arrive(1, "a")); p.handle(EngineFailed("a", "boom"))
    assert fx.answers[1][1:] == (500, "model_load_error", "boom")
    down(p, "a")
    p.handle(Arrive(2, "a"))
    assert fx.starts == 2


def test_crash_then_waiters_restart_it_once_stopped():
    p, fx, _ = make()
    p.handle(Arrive(1, "a")); up(p, fx, "a")
    p.handle(EngineExited("a", "exit 3"))
    p.handle(Arrive(2, "a"))
    assert fx.starts == 1
    down(p, "a")
    assert fx.starts == 2


def test_cancelled_waiter_is_dropped():
    p, fx, _ = make()
    p.handle(Arrive(1, "a")); p.handle(Arrive(2, "a"))
    p.handle(Finish(1))  # client gone while waiting
    up(p, fx, "a")
    assert 1 not in fx.answers and fx.answers[2][0] == "grant"


# ---------------------------------------------------------------- property test

MODELS = ("a", "b", "c", "d")
INFOS = {"a": ModelInfo(memory=3), "b": ModelInfo(memory=4), "c": ModelInfo(memory=5, slot_policy="exclusive_npu"),
         "d": ModelInfo(memory=6)}

event = st.one_of(
    st.tuples(st.just("arrive"), st.sampled_from(MODELS), st.booleans()),
    st.tuples(st.just("finish"), st.integers(0, 40)),
    st.tuples(st.just("tick"), st.floats(0, 30)),
    st.tuples(st.just("ready"), st.sampled_from(MODELS)),
    st.tuples(st.just("fail"), st.sampled_from(MODELS)),
    st.tuples(st.just("crash"), st.sampled_from(MODELS)),
    st.tuples(st.just("stopped"), st.sampled_from(MODELS)),
    st.tuples(st.just("unload"), st.sampled_from(MODELS)),
)


class World(Fx):
    """Effects with an engine world that only does what was asked (start -> may become
    ready, stop -> may become stopped), checking the invariants at each effect."""

    def __init__(self, budget):
        super().__init__()
        self.budget = budget
        self.phase = {m: "stopped" for m in MODELS}  # the engines' truth
        self.held: dict[str, int] = {}
        self.p = None

    def start(self, model, info):
        super().start(model, info)
        assert self.phase[model] == "stopped", "started twice"
        self.phase[model] = "starting"
        self.held[model] = info.metered
        assert sum(self.held.values()) <= self.budget, "started beyond the budget"

    def stop(self, model):
        super().stop(model)
        if self.p is not None and self.p._models[model].draining in ("evict", "swap"):
            assert not self.p._models[model].busy, "a busy engine was evicted"
        if self.phase[model] != "stopped":
            self.phase[model] = "stopping"


@settings(max_examples=500, deadline=None)
@given(st.lists(event, max_size=60), st.integers(5, 14))
def test_random_event_sequences_keep_the_invariants(events, budget):
    clock = Clock()
    w = World(budget)
    p = ServingPolicy(w, clock=clock, budget=budget, max_in_flight=4, ttl=20, soft_idle=5, load_timeout=15)
    w.p = p
    asked: list[int] = []
    finished: set[int] = set()
    for ev in events:
        kind = ev[0]
        if kind == "arrive":
            req = len(asked)
            asked.append(req)
            p.handle(Arrive(req, ev[1], INFOS[ev[1]], load=ev[2]))
        elif kind == "finish" and ev[1] < len(asked):
            finished.add(ev[1])
            p.handle(Finish(ev[1]))
        elif kind == "tick":
            clock.t += ev[1]
            p.handle(Tick())
        elif kind == "ready" and w.phase[ev[1]] == "starting":
            w.phase[ev[1]] = "ready"
            p.handle(EngineReady(ev[1], "eng"))
        elif kind == "fail" and w.phase[ev[1]] == "starting":
            w.phase[ev[1]] = "stopping"
            p.handle(EngineFailed(ev[1], "boom"))
        elif kind == "crash" and w.phase[ev[1]] == "ready":
            w.phase[ev[1]] = "stopping"
            p.handle(EngineExited(ev[1], "exit"))
        elif kind == "stopped" and w.phase[ev[1]] == "stopping":
            w.phase[ev[1]] = "stopped"
            w.held.pop(ev[1], None)
            p.handle(EngineStopped(ev[1]))
        elif kind == "unload":
            p.handle(Unload(ev[1]))
        assert not w.twice, "a waiter answered twice"
    # settle: engines do what was asked, clients end what they were granted, until quiet
    for _ in range(20):
        for m in MODELS:
            if w.phase[m] == "starting":
                w.phase[m] = "ready"
                p.handle(EngineReady(m, "eng"))
            elif w.phase[m] == "stopping":
                w.phase[m] = "stopped"
                w.held.pop(m, None)
                p.handle(EngineStopped(m))
        for req, a in list(w.answers.items()):
            if a[0] == "grant" and req not in finished:
                finished.add(req)
                p.handle(Finish(req))
    # no waiter lost: every request its client did not leave was answered, exactly once
    for req in asked:
        assert req in w.answers or req in finished, f"request {req} never answered"
    assert not w.twice
    # close: every engine started is stopped
    p.handle(Shutdown())
    for m in MODELS:
        if w.phase[m] == "stopping":
            w.phase[m] = "stopped"
            p.handle(EngineStopped(m))
    assert all(ph == "stopped" for ph in w.phase.values()), w.phase
    assert p.idle


# -- giving way and shutting down: drains with a deadline, cuts (issue 27, points 3 and 4)


def busy_model(p, fx, model="a", reqs=(1, 2)):
    for r in reqs:
        p.handle(Arrive(r, model))
    up(p, fx, model)
    assert all(fx.answers[r][0] == "grant" for r in reqs)


def cuts(fx):
    return [e[1] for e in fx.log if e[0] == "cut"]


def test_unload_lets_running_requests_finish_then_stops():
    p, fx, clock = make(drain_timeout=30)
    busy_model(p, fx)
    p.handle(Unload("a"))
    assert fx.stops == 0 and p.phase("a") is Phase.READY and p.giving_way("a")  # running ones go on
    p.handle(Arrive(3, "a"))
    assert 3 not in fx.answers  # no new request is granted while it gives way
    clock.t = 29.9
    p.handle(Tick())
    p.handle(Finish(1))
    assert fx.stops == 0
    p.handle(Finish(2))
    assert fx.stops == 1 and cuts(fx) == [] and p.cuts == 0  # drained in time: nothing cut
    down(p, "a")
    assert fx.starts == 2  # the request that came meanwhile starts it afresh
    up(p, fx, "a")
    assert fx.answers[3][0] == "grant"


def test_unload_cuts_what_still_runs_at_the_drain_deadline():
    p, fx, clock = make(drain_timeout=30)
    busy_model(p, fx)
    p.handle(Finish(1))
    p.handle(Unload("a"))
    clock.t = 10
    p.handle(Unload("a"))  # the sweep asks again: the deadline stays where it was
    clock.t = 29.9
    p.handle(Tick())
    assert cuts(fx) == [] and fx.stops == 0
    clock.t = 30
    p.handle(Tick())
    assert cuts(fx) == [2] and fx.stops == 1 and p.cuts == p.cuts_of("a") == 1
    assert "drain timeout (30s)" in [e for e in fx.log if e[0] == "cut"][0][2]
    p.handle(Tick())
    assert cuts(fx) == [2]  # cut once


def test_unload_without_drain_timeout_waits_for_ever():
    p, fx, clock = make(drain_timeout=None)
    busy_model(p, fx, reqs=(1,))
    p.handle(Unload("a"))
    clock.t = 1e6
    p.handle(Tick())
    assert cuts(fx) == [] and fx.stops == 0
    p.handle(Finish(1))
    assert fx.stops == 1


def test_forced_unload_cuts_at_once_and_rejects_waiting():
    p, fx, _ = make()
    busy_model(p, fx)
    p.handle(Arrive(9, "b"))
    p.handle(Cut("a"))
    assert cuts(fx) == [1, 2] and fx.stops == 1 and p.cuts_of("a") == 2 and p.cuts_of("b") == 0


def test_drain_rejects_new_stops_idle_cuts_late_then_shutdown_cuts_the_rest():
    p, fx, clock = make(drain_timeout=5)
    busy_model(p, fx, "a", (1,))
    busy_model(p, fx, "b", (2,))
    p.handle(Finish(2))  # b is idle
    p.handle(Arrive(3, "c"))  # c is starting, nobody granted
    p.handle(Drain())
    assert fx.answers[3][:3] == ("reject", 503, "server_shutting_down")
    assert ("stop", "b") in fx.log and ("stop", "a") not in fx.log  # idle stops, busy drains
    p.handle(Arrive(4, "a"))
    assert fx.answers[4][:3] == ("reject", 503, "server_shutting_down")
    assert p.busy() == 1
    clock.t = 5
    p.handle(Tick())
    assert cuts(fx) == [1] and ("stop", "a") in fx.log


def test_shutdown_cuts_every_running_request():
    p, fx, _ = make()
    busy_model(p, fx, "a", (1, 2))
    p.handle(Drain())
    assert cuts(fx) == []
    p.handle(Shutdown())  # a second signal
    assert cuts(fx) == [1, 2] and p.cuts == 2


def test_gives_way_to_says_for_whom():
    """What the server's engine events read (``evicted`` ``for``, ``gave_way`` ``for``, ``reloading``)."""
    p, fx, _ = make(budget=6 * GiB)
    p.handle(Arrive(1, "a", ModelInfo(memory=4 * GiB))); up(p, fx, "a"); p.handle(Finish(1))
    assert p.gives_way_to("a") is None
    p.handle(Arrive(2, "b", ModelInfo(memory=4 * GiB)))
    assert fx.log[-1] == ("stop", "a") and p.gives_way_to("a") == ("evict", "b")
    down(p, "a")
    assert p.gives_way_to("a") is None
    npu = ModelInfo(slot_policy="exclusive_npu")
    p.handle(Arrive(3, "x", npu)); up(p, fx, "x"); p.handle(Finish(3))
    p.handle(Arrive(4, "y", npu))
    assert p.gives_way_to("x") == ("swap", "y")
    p.handle(Arrive(5, "b", ModelInfo(memory=4 * GiB, options=(("ctx_size", "512"),)), load=True))
    assert p.gives_way_to("b") == ("reload", None)


# -- the memory queue (--queue-timeout)


def _busy_a(**kw):
    """A policy with a 10 GiB budget and model a (8 GiB) busy with request 1."""
    p, fx, clock = make(budget=10 * GiB, **kw)
    p.handle(Arrive(1, "a", ModelInfo(memory=8 * GiB))); up(p, fx, "a")
    return p, fx, clock


def test_without_a_queue_a_model_that_does_not_fit_is_refused_at_once():
    p, fx, _ = _busy_a()
    p.handle(Arrive(2, "b", ModelInfo(memory=4 * GiB)))
    assert fx.answers[2][:3] == ("reject", 503, "insufficient_memory") and p.queued() == {}


def test_a_queued_request_waits_for_memory_then_starts():
    p, fx, clock = _busy_a(queue_timeout=30)
    p.handle(Arrive(2, "b", ModelInfo(memory=4 * GiB)))
    assert 2 not in fx.answers and p.queued() == {"b": 1} and ("stop", "a") not in fx.log  # a's stream goes on
    clock.t = 10
    p.handle(Tick())
    assert 2 not in fx.answers
    p.handle(Finish(1))  # a idle: evicted for b
    assert fx.log[-1] == ("stop", "a") and p.gives_way_to("a") == ("evict", "b")
    down(p, "a")
    assert fx.log[-1] == ("start", "b", ()) and p.queued() == {}  # waits for its engine now, not memory
    clock.t = 45  # past the queue timeout: started, so no longer queued
    p.handle(Tick())
    up(p, fx, "b")
    assert fx.answers[2][0] == "grant" and not fx.twice


def test_the_queue_timeout_answers_503_with_the_shortfall():
    p, fx, clock = _busy_a(queue_timeout=30)
    p.handle(Arrive(2, "b", ModelInfo(memory=4 * GiB)))
    clock.t = 29.9
    p.handle(Tick())
    assert 2 not in fx.answers
    clock.t = 30
    p.handle(Tick())
    status, kind, msg = fx.answers[2][1:]
    assert (status, kind) == (503, "insufficient_memory")
    assert msg == "waited 30s for memory: model 'b' needs 4.0 GiB, 2.0 GiB free of 10.0 GiB (busy: a 8.0 GiB)"
    assert fx.starts == 1 and ("stop", "a") not in fx.log and p.queued() == {}


def test_the_queue_is_first_come_first_started():
    p, fx, _ = _busy_a(queue_timeout=30)
    p.handle(Arrive(2, "b", ModelInfo(memory=4 * GiB)))
    p.handle(Arrive(3, "c", ModelInfo(memory=1 * GiB)))  # would fit now (2 GiB free): waits behind b
    assert [e for e in fx.log if e[0] == "start"] == [("start", "a", ())]
    assert p.queued() == {"b": 1, "c": 1}
    p.handle(Finish(1)); down(p, "a")
    starts = [e[1] for e in fx.log if e[0] == "start"]
    assert starts == ["a", "b", "c"]  # b first, then c (5 GiB of 10 together)
    up(p, fx, "b"); up(p, fx, "c")
    assert fx.answers[2][0] == fx.answers[3][0] == "grant"


def test_a_ready_model_is_granted_past_the_queue():
    p, fx, _ = _busy_a(queue_timeout=30)
    p.handle(Arrive(2, "b", ModelInfo(memory=4 * GiB)))
    p.handle(Arrive(3, "a", ModelInfo(memory=8 * GiB)))  # needs no start: nothing to wait for
    assert fx.answers[3][0] == "grant" and 2 not in fx.answers


def test_the_queue_is_bounded():
    p, fx, _ = _busy_a(queue_timeout=30, queue_limit=2)
    for r in (2, 3, 4):
        p.handle(Arrive(r, "b", ModelInfo(memory=4 * GiB)))
    assert 2 not in fx.answers and 3 not in fx.answers
    status, kind, msg = fx.answers[4][1:]
    assert (status, kind) == (503, "insufficient_memory") and msg.endswith(
        "2 requests already wait for memory (limit 2)")
    assert p.queued() == {"b": 2}


def test_larger_than_the_budget_is_refused_at_once_even_with_a_queue():
    p, fx, _ = _busy_a(queue_timeout=30)
    p.handle(Arrive(2, "huge", ModelInfo(memory=11 * GiB)))
    assert fx.answers[2][:3] == ("reject", 503, "insufficient_memory") and p.queued() == {}
    assert "more than the whole memory budget" in fx.answers[2][3]


def test_a_queued_request_whose_client_left_is_forgotten():
    p, fx, _ = _busy_a(queue_timeout=30)
    p.handle(Arrive(2, "b", ModelInfo(memory=4 * GiB)))
    p.handle(Finish(2))
    assert p.queued() == {}
    p.handle(Finish(1))
    assert fx.starts == 1 and ("stop", "a") not in fx.log  # nobody wants b: a stays


def test_shutdown_answers_queued_requests():
    p, fx, _ = _busy_a(queue_timeout=30)
    p.handle(Arrive(2, "b", ModelInfo(memory=4 * GiB)))
    p.handle(Drain())
    assert fx.answers[2][1:3] == (503, "server_shutting_down")
