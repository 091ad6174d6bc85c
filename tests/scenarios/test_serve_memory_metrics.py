"""Memory-aware admission and eviction, the load timeout and GET /metrics, on a real server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from lemonpack.runtime.lifecycle.supervisor import State
from support.recipes import recipe_doc, write_recipe
from support.helpers import FakeClock, wait_for

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
FLOOR = "dev.lemonpack.engine_floor"


def _add(lv, name, size, doc):
    f = lv.backends.parent / f"{name}.bin"
    f.write_bytes(b"x" * size)
    write_recipe(lv.backends / f"{doc['recipe']}.json", doc)
    lv.registry.add(name, doc["recipe"], {"main": str(f)})


def test_busy_models_are_not_evicted_idle_ones_are_and_too_big_is_refused(live):
    lv = live(memory_budget=1500)
    doc = recipe_doc("slow", fake_engine=["--chunks", "20", "--chunk-delay", "0.05"])
    _add(lv, "user.a", 1000, doc)
    _add(lv, "user.b", 1000, doc)
    _add(lv, "user.huge", 2000, doc)
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c, \
            httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c2:
        with c.stream("POST", "/v1/chat/completions", json={**CHAT, "model": "user.a", "stream": True}) as r:
            chunks = r.iter_raw()
            next(chunks)
            busy = c2.post("/v1/chat/completions", json={**CHAT, "model": "user.b"})
            assert busy.status_code == 503, busy.text
            err = busy.json()["error"]
            assert err["type"] == "insufficient_memory" and "needs 1000 B, 500 B free of 1.5 KiB (busy: user.a" in \
                err["message"]
            rest = b"".join(chunks)
        assert b"[DONE]" in rest  # the busy stream finished
        starts = lv.server.runner.starts
        huge = c2.post("/v1/chat/completions", json={**CHAT, "model": "user.huge"})
        assert huge.status_code == 503 and "more than the whole memory budget" in huge.json()["error"]["message"]
        assert lv.server.runner.starts == starts  # no engine started
        ok = c2.post("/v1/chat/completions", json={**CHAT, "model": "user.b"})  # a is idle now: evicted
        assert ok.status_code == 200, ok.text
        assert lv.server.runner.state("user.a") is State.STOPPED and lv.server.runner.state("user.b") is State.READY
        m = c2.get("/metrics")
        assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
        text = m.text
        for line in ('lemonpack_requests_total{model="user.b",route="/v1/chat/completions",status="200"} 1.0',
                     'lemonpack_requests_total{model="user.a",route="/v1/chat/completions",status="200"} 1.0',
                     'lemonpack_requests_total{model="user.b",route="/v1/chat/completions",status="503"} 1.0',
                     'lemonpack_engine_starts_total{model="user.a"} 1.0', 'lemonpack_engine_starts_total{model="user.b"} 1.0',
                     'lemonpack_model_memory_bytes{model="user.b"} 1000.0',
                     'lemonpack_memory_budget_bytes 1500.0', 'lemonpack_inflight_requests{model="user.b"} 0.0'):
            assert line in text, line
        assert "lemonpack_request_duration_seconds_bucket" in text
        assert "lemonpack_time_to_first_byte_seconds_count" in text


def test_load_timeout_is_503_and_others_are_served(live, tmp_path):
    clock = FakeClock()  # the load timeout counts on it: the test says when it has passed
    lv = live(load_timeout=0.5, idle_check=0.02, clock=clock)
    lv.add("user.slow", recipe_doc("slowstart", fake_engine=["--health-gate", str(tmp_path / "never")]))  # never ready
    lv.add("user.fast", recipe_doc("fast", fake_engine=[]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c, ThreadPoolExecutor(1) as pool:
        slow = pool.submit(c.post, "/v1/chat/completions", json={**CHAT, "model": "user.slow"})
        assert wait_for(lambda: lv.in_flight().get("user.slow") == 1, 30)  # it waits for the engine
        clock.advance(0.5)
        r = slow.result(timeout=30)  # a hang guard
        assert r.status_code == 503 and r.json()["error"]["type"] == "model_load_timeout"
        assert "not ready within 0.5s" in r.json()["error"]["message"]
        assert c.post("/v1/chat/completions", json={**CHAT, "model": "user.fast"}).status_code == 200


def test_engine_failures_are_counted_and_metrics_are_loopback_only(live):
    lv = live()
    lv.add("user.bad", recipe_doc("bad", fake_engine=["--exit-now", "--exit-code", "4"]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        assert c.post("/v1/chat/completions", json={**CHAT, "model": "user.bad"}).status_code == 500
        text = c.get("/metrics").text
    assert 'lemonpack_engine_failures_total{model="user.bad",reason="start_failed"} 1.0' in text
    assert 'lemonpack_requests_total{model="user.bad",route="/v1/chat/completions",status="500"} 1.0' in text


def test_a_bad_memory_budget_is_a_one_line_usage_error(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "LEMONPACK_CONFIG_DIR": str(tmp_path / "c"), "LEMONPACK_CACHE_DIR": str(tmp_path / "k")}
    r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "serve", "--port", "0", "--memory-budget", "12parsecs"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == ("error: --memory-budget: size '12parsecs': expected a number with an optional unit "
                                "(24GiB, 512MiB, 8GB)")


def test_with_a_queue_timeout_a_request_waits_for_memory_then_is_served(live):
    clock = FakeClock()  # the queue timeout counts on it
    lv = live(memory_budget=1500, queue_timeout=30, idle_check=0.02, clock=clock)
    doc = recipe_doc("slow", fake_engine=["--chunks", "20", "--chunk-delay", "0.05"])
    _add(lv, "user.a", 1000, doc)
    _add(lv, "user.b", 1000, doc)
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c, \
            httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c2, ThreadPoolExecutor(1) as pool:
        with c.stream("POST", "/v1/chat/completions", json={**CHAT, "model": "user.a", "stream": True}) as r:
            chunks = r.iter_raw()
            next(chunks)
            waiting = pool.submit(c2.post, "/v1/chat/completions", json={**CHAT, "model": "user.b"})
            assert wait_for(lambda: lv.server.driver.policy.queued() == {"user.b": 1}, 30)
            assert not waiting.done() and lv.server.runner.state("user.b") is State.STOPPED
            queued = [e for e in lv.server.driver.events.recent() if e["event"] == "queued"]
            assert [(e["model"], e["waiting"]) for e in queued] == [("user.b", 1)], queued
            assert queued[0]["message"] == "request waits up to 30s for memory (1 waiting)"
            rest = b"".join(chunks)
        assert b"[DONE]" in rest  # a's stream ran to its end, then a was evicted for b
        got = waiting.result(timeout=30)
        assert got.status_code == 200, got.text
        assert lv.server.runner.state("user.a") is State.STOPPED
        # a queue timeout: b busy now, a waits and gives up after 30 s (of the fake clock)
        with c.stream("POST", "/v1/chat/completions", json={**CHAT, "model": "user.b", "stream": True}) as r:
            chunks = r.iter_raw()
            next(chunks)
            waiting = pool.submit(c2.post, "/v1/chat/completions", json={**CHAT, "model": "user.a"})
            assert wait_for(lambda: lv.server.driver.policy.queued() == {"user.a": 1}, 30)
            clock.advance(30)
            late = waiting.result(timeout=30)
            assert late.status_code == 503 and late.headers["retry-after"] == "1"
            assert late.json()["error"]["type"] == "insufficient_memory"
            assert late.json()["error"]["message"].startswith("waited 30s for memory: model 'user.a' needs 1000 B")
            assert b"[DONE]" in b"".join(chunks)
        metrics = c2.get("/metrics").text
    assert 'lemonpack_requests_total{model="user.a",route="/v1/chat/completions",status="503"} 1.0' in metrics


def test_the_engine_floor_is_counted_in_admission(live):
    lv = live(memory_budget=1500)
    doc = recipe_doc("floored", fake_engine=[], extensions={"dev.lemonpack.engine_floor": 600})
    _add(lv, "user.f", 1000, doc)  # 1000 B + 600 B of engine > 1500 B
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        r = c.post("/v1/chat/completions", json={**CHAT, "model": "user.f"})
        assert r.status_code == 503 and "needs 1.6 KiB, more than the whole memory budget" in r.json()["error"]["message"]
        doc["extensions"] = {"dev.lemonpack.engine_floor": 400}
        write_recipe(lv.backends / "floored.json", doc)
        assert wait_for(lambda: c.post("/v1/chat/completions", json={**CHAT, "model": "user.f"}).status_code == 200, 10)
        assert 'lemonpack_model_memory_bytes{model="user.f"} 1400.0' in c.get("/metrics").text
        doc["extensions"] = {"dev.lemonpack.engine_floor": "lots"}
        write_recipe(lv.backends / "floored.json", doc)
        assert wait_for(lambda: lv.server.catalog.get("user.f").recipe.extensions[FLOOR] == "lots", 10)  # re-read
        assert c.post("/v1/unload", json={"model_name": "user.f"}).status_code == 200  # read at the next start
        assert c.post("/v1/chat/completions", json={**CHAT, "model": "user.f"}).status_code == 500
        err = c.post("/v1/chat/completions", json={**CHAT, "model": "user.f"}).json()["error"]["message"]
        assert 'floored.json: extensions["dev.lemonpack.engine_floor"]: expected an integer number of bytes' in err
