"""``lemonpack serve`` idle handling: ``--ttl`` unload and ``--soft-idle`` downsize (seed 000
sections 4 and 10), against real fake-engine processes behind a real server.

The serving policy reads a :class:`FakeClock` (``ServerConfig.clock``) that only the test moves:
idle times are what the test says, however loaded the machine. The sweeps still wake up every
``idle_check`` real seconds; ``Live.swept`` waits until one has run after the clock moved,
``Live.settled`` until the policy has seen the last request end."""

from __future__ import annotations

import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from lemonpack.runtime.lifecycle.supervisor import State
from support.recipes import recipe_doc
from support.helpers import FakeClock, wait_for

CHAT = {"model": "user.fake", "messages": [{"role": "user", "content": "hi"}]}

#: Only guards against a hang (a sweep every ``idle_check`` s never came): seconds, generous.
HANG = 30


def test_ttl_unloads_only_after_the_last_request_never_while_starting_or_in_flight(live, tmp_path):
    # starting and the request itself (before its first byte) both outlast the TTL: the engine
    # is ready, and answers, only when the test creates the gate files
    ready, answer, rec = tmp_path / "ready", tmp_path / "answer", tmp_path / "record.jsonl"
    clock = FakeClock()
    lv = live(ttl=0.5, idle_check=0.02, clock=clock)
    lv.add("user.fake", recipe_doc(fake_engine=["--health-gate", str(ready), "--first-byte-gate", str(answer), "--record", str(rec)]))
    lv.start()
    policy = lv.server.policy
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=HANG) as c, ThreadPoolExecutor(1) as pool:
        fut = pool.submit(c.post, "/v1/chat/completions", json=CHAT)
        assert wait_for(lambda: lv.server.runner.state("user.fake") is State.STARTING, HANG)
        clock.advance(2.0)  # starting for four TTLs
        lv.swept()
        assert lv.server.runner.state("user.fake") is State.STARTING and lv.server.runner.starts == 1
        ready.touch()
        # the request is at the engine (recorded before the gate): in flight
        assert wait_for(lambda: rec.exists() and '"request"' in rec.read_text(), HANG)
        assert policy.phase("user.fake") is State.READY and lv.in_flight() == {"user.fake": 1}
        clock.advance(2.0)  # in flight for four TTLs
        lv.swept()
        eng = lv.server.runner.engine("user.fake")
        assert lv.server.runner.state("user.fake") is State.READY and eng.poll() is None
        answer.touch()
        r = fut.result(timeout=HANG)
        assert r.status_code == 200, r.text
        assert lv.server.runner.starts == 1 and eng.poll() is None
        lv.settled()
        clock.advance(0.25)  # idle, but not yet for the TTL
        lv.swept()
        assert lv.server.runner.state("user.fake") is State.READY and eng.poll() is None
        clock.advance(0.25)  # idle for the TTL since the last request ended
        assert wait_for(lambda: eng.poll() is not None, HANG), "an idle model past its TTL is unloaded"
        assert wait_for(lambda: c.get("/v1/models").json()["data"][0]["state"] == "unloaded", HANG)


def test_requests_at_ttl_expiry_neither_deadlock_nor_fail(live):
    """A stress test: before each burst of requests the clock moves by about the TTL (mostly
    just over it, sometimes just under), so the sweeps (every 5 ms, real) race the burst's first requests
    (0 to 30 ms, real) to the model. Every request is answered 200, none hangs. The last burst
    comes once a sweep has seen the TTL expire, so at least one burst meets a stopping or
    unloaded model whatever the machine's speed."""
    ttl = 0.3
    clock = FakeClock()
    lv = live(ttl=ttl, idle_check=0.005, clock=clock)
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    lv.start()
    rnd = random.Random(8)
    statuses: list[int] = []
    lock = threading.Lock()
    never = threading.Event()

    def one(c: httpx.Client, delay: float) -> None:
        never.wait(delay)  # a real delay
        code = c.post("/v1/chat/completions", json=CHAT).status_code
        with lock:
            statuses.append(code)

    rounds = 8
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=HANG) as c, ThreadPoolExecutor(16) as pool:
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
        lv.settled()
        for k in range(rounds):
            if k == rounds - 1:
                clock.advance(ttl + 0.01)  # past it (whatever the rounding of the clock's sum)
                assert wait_for(lambda: lv.server.policy.phase("user.fake") is not State.READY, HANG)
            else:  # the burst straddles the moment the model's TTL expires
                clock.advance(ttl + rnd.uniform(-0.02, 0.06))  # mostly just over it
            futs = [pool.submit(one, c, rnd.uniform(0, 0.03)) for _ in range(16)]
            for f in futs:
                f.result(timeout=60)  # no deadlock (a generous bound: a hang guard, not a speed check)
            lv.settled()
    assert statuses == [200] * len(statuses) and len(statuses) == rounds * 16
    assert lv.server.runner.starts >= 2, "some bursts met an unloaded or stopping model (the race ran)"


def test_soft_idle_calls_downsize_endpoint_once_per_idle_period(live, tmp_path):
    rec = tmp_path / "record.jsonl"
    doc = recipe_doc(fake_engine=["--record", str(rec)])
    doc["downsize_endpoint"] = "/downsize"
    clock = FakeClock()
    lv = live(soft_idle=0.3, idle_check=0.02, clock=clock)
    lv.add("user.fake", doc)
    lv.start()
    driver = lv.server.driver
    asked: list[str] = []  # the policy's downsize effects, counted as they are decided (in the sweep)
    real_downsize = driver.downsize
    driver.downsize = lambda model, eng: (asked.append(model), real_downsize(model, eng))[1]  # type: ignore[method-assign]

    def downsizes() -> int:
        lines = rec.read_text().splitlines() if rec.exists() else []
        return sum(1 for ln in lines if json.loads(ln).get("path") == "/downsize")

    with httpx.Client(base_url=lv.url, trust_env=False, timeout=HANG) as c:
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
        lv.settled()
        clock.advance(0.15)
        lv.swept()
        assert asked == [] and downsizes() == 0  # not idle long enough yet
        clock.advance(0.2)  # idle 0.35 s
        assert wait_for(lambda: downsizes() == 1, HANG)
        clock.advance(0.6)
        lv.swept()
        assert len(asked) == 1 and downsizes() == 1  # once per idle period
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200  # a new period
        lv.settled()
        clock.advance(0.35)
        assert wait_for(lambda: downsizes() == 2, HANG)
        clock.advance(0.6)
        lv.swept()
        assert len(asked) == 2 and downsizes() == 2
    eng = lv.server.runner.engine("user.fake")
    assert eng is not None and eng.poll() is None  # downsizing does not unload
