"""Failures a user meets answer in the OpenAI error shape and never with a traceback: a
broken model registry, a body that is not JSON, a client leaving a stream."""

from __future__ import annotations

import logging

import httpx

from support.recipes import recipe_doc
from support.helpers import wait_for

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def test_a_broken_registry_keeps_the_last_good_one_and_says_why(live, caplog):
    caplog.set_level(logging.WARNING, logger="lemonpack.server")
    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["user.fake"]
        lv.registry.path.write_text('{"models": [')  # a half-written edit
        for _ in range(3):
            r = c.get("/v1/models")
            assert r.status_code == 200
            doc = r.json()
            assert [m["id"] for m in doc["data"]] == ["user.fake"]  # the last good registry
            assert str(lv.registry.path) in doc["warnings"][0]
        r = c.post("/v1/chat/completions", json={"model": "user.fake", **CHAT})
        assert r.status_code == 200, r.text
        assert str(lv.registry.path) in c.get("/v1/system-info").json()["model_registry_problem"]
        warned = [r for r in caplog.records if str(lv.registry.path) in r.getMessage()]
        assert len(warned) == 1 and not warned[0].exc_info  # once, one line
        lv.registry.path.unlink()
        lv.add("user.other", recipe_doc("other", fake_engine=[]))
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["user.other"]
        assert "warnings" not in c.get("/v1/models").json()


def test_a_broken_registry_at_start_serves_nothing_and_says_why(live):
    lv = live()
    lv.registry.path.write_text("{nope")
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        doc = c.get("/v1/models").json()
        assert doc["data"] == [] and str(lv.registry.path) in doc["warnings"][0]
        r = c.post("/v1/chat/completions", json={"model": "user.fake", **CHAT})
        assert r.status_code == 404 and r.json()["error"]["type"] == "model_not_found"


def test_a_body_that_is_not_json_is_a_400_saying_so(live):
    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        for path in ("/v1/chat/completions", "/v1/load", "/v1/unload", "/api/v1/embeddings"):
            r = c.post(path, content=b'{"model": "user.fake", bad', headers={"Content-Type": "application/json"})
            assert r.status_code == 400, (path, r.text)
            err = r.json()["error"]
            assert err["type"] == "invalid_request_error" and "not valid JSON" in err["message"], path
        # `curl -d '{...}'` labels JSON as a form: it is still read
        r = c.post("/v1/chat/completions", content=b'{"model": "user.fake", "messages": []}',
                   headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert r.status_code == 200, r.text
        assert lv.server.runner.starts == 1  # only the good request started the engine


def test_a_client_leaving_a_stream_logs_no_traceback(live, caplog):
    caplog.set_level(logging.DEBUG)
    lv = live()
    lv.add("user.fake", recipe_doc("slow", fake_engine=["--chunks", "40", "--chunk-delay", "0.05"]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        c.post("/v1/load", json={"model_name": "user.fake"}).raise_for_status()
        for _ in range(3):
            with c.stream("POST", "/v1/chat/completions", json={"model": "user.fake", **CHAT, "stream": True}) as r:
                chunks = r.iter_raw()
                for _ in range(3):
                    next(chunks)

        def statuses() -> list[int]:
            return [getattr(r, "fields", {}).get("status") for r in list(caplog.records) if r.getMessage() == "request"]
        # each handler logs its request line last; 30 s only guards against a hang
        assert wait_for(lambda: statuses().count(499) >= 3, 30), statuses()
        # a request after them: the loop has run what the ended handlers left queued (aiohttp's own logs)
        assert c.get("/v1/health").status_code == 200
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert bad == [], [r.getMessage() for r in bad]
    assert statuses().count(499) == 3, statuses()


def test_trial_mistakes_bad_load_options_unknown_unload_and_unbounded_metric_labels(live):
    """From a new user's trial: a load with a bad option value is 400 before the running engine
    is touched; unloading a model that does not exist is 404, not success; client-chosen
    model names and paths never become metric labels (one ``<unknown>`` series)."""
    from lemonpack.runtime.lifecycle.supervisor import State

    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        c.post("/v1/load", json={"model_name": "user.fake"}).raise_for_status()
        starts = lv.server.runner.starts
        for bad, words in (({"threads": "x"}, "must be an integer"), ({"ctx_size": -5}, "must not be negative"),
                           ({"ctx_size": "abc"}, "must be an integer")):
            r = c.post("/v1/load", json={"model_name": "user.fake", **bad})
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["type"] == "invalid_request_error" and words in err["message"], err
        assert lv.server.runner.state("user.fake") is State.READY and lv.server.runner.starts == starts
        r = c.post("/v1/unload", json={"model_name": "user.nope"})
        assert r.status_code == 404 and r.json()["error"]["type"] == "model_not_found"
        for i in range(50):
            c.post("/v1/chat/completions", json={"model": f"user.x{i:03d}-" + "B" * 100, **CHAT})
        c.post("/v1/chat/completions", json={"model": "user.fake", **CHAT}).raise_for_status()
        text = c.get("/metrics").text
    assert 'lemonpack_requests_total{model="<unknown>",route="/v1/chat/completions",status="404"} 50.0' in text
    assert 'model="user.fake",route="/v1/chat/completions",status="200"' in text
    assert "user.x0" not in text
