"""Truthful ends and graceful giving way (issue 27, points 1 and 3), with real engine processes:
an engine SIGKILLed mid-stream or SIGSTOPped (``--upstream-read-timeout``) ends the client's
answer as an error the ``openai`` client raises on, logged and counted as status 502 with
``cut``; ``/v1/unload`` lets a running stream finish, ``?force=true`` cuts it and says so."""

from __future__ import annotations

import logging
import os
import signal
import threading

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.recipes import recipe_doc
from support.helpers import wait_for

STREAM = {"model": "user.fake", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def _access(caplog, model="user.fake"):
    return [r.fields for r in caplog.records if r.name == "lemonpack.server.access"
            and getattr(r, "fields", {}).get("model") == model]


def _statuses(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", trust_env=False).text
    return {s.labels["status"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if f.name == "lemonpack_requests" and s.name.endswith("_total") and s.labels.get("model") == "user.fake"}


def _engine_pid(lv) -> int:
    assert wait_for(lambda: lv.server.runner.engine("user.fake") is not None, 20)
    return lv.server.runner.engine("user.fake").pid


def _stream_with_openai(url: str, on_first) -> tuple[int, Exception | None]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", timeout=30, max_retries=0,
                           http_client=httpx.Client(trust_env=False, timeout=30))
    n, err = 0, None
    try:
        for _chunk in client.chat.completions.create(model="user.fake", messages=STREAM["messages"], stream=True):
            n += 1
            if n == 3:
                on_first()
    except Exception as e:  # noqa: BLE001 (what the client raised is the result)
        err = e
    return n, err


@pytest.mark.parametrize("kill", [signal.SIGKILL])
def test_engine_killed_mid_stream_is_an_error_for_the_openai_client(live, caplog, kill):
    caplog.set_level(logging.INFO, logger="lemonpack.server")
    lv = live()
    lv.add("user.fake", recipe_doc("fake-engine", fake_engine=["--chunks", "200", "--chunk-delay", "0.02"]))
    lv.start()
    assert httpx.post(lv.url + "/v1/chat/completions", json={**STREAM, "stream": False},
                      trust_env=False, timeout=30).status_code == 200
    pid = _engine_pid(lv)
    n, err = _stream_with_openai(lv.url, lambda: os.kill(pid, kill))
    assert err is not None and n < 200, "a stream cut by the engine's death must raise, not end as complete"
    assert isinstance(err, (openai.APIError, httpx.HTTPError)), repr(err)
    assert wait_for(lambda: any(f.get("cut") for f in _access(caplog)), 10)
    line = [f for f in _access(caplog) if f.get("cut")][-1]
    assert line["status"] == 502
    assert _statuses(lv.url).get("502") == 1.0


def test_the_last_event_of_a_cut_stream_is_an_openai_error_and_the_body_is_unterminated(live):
    lv = live()
    lv.add("user.fake", recipe_doc("fake-engine", fake_engine=["--chunks", "200", "--chunk-delay", "0.02"]))
    lv.start()
    httpx.post(lv.url + "/v1/load", json={"model_name": "user.fake"}, trust_env=False, timeout=30)
    pid = _engine_pid(lv)
    got: list[bytes] = []
    with httpx.Client(trust_env=False, timeout=30) as c, pytest.raises(httpx.RemoteProtocolError):
        with c.stream("POST", lv.url + "/v1/chat/completions", json=STREAM) as r:
            for line in r.iter_lines():
                got.append(line.encode())
                if len(got) == 4:
                    os.kill(pid, signal.SIGKILL)
    assert b"data: [DONE]" not in got
    assert got[-3] == b"event: error" and b'"type": "upstream_error"' in got[-2], got[-3:]


def test_a_silent_engine_is_bounded_by_the_upstream_read_timeout(live, tmp_path):
    lv = live(upstream_read_timeout=1.0)
    lv.add("user.fake", recipe_doc("fake-engine", fake_engine=["--chunks", "400", "--chunk-delay", "0.02"]))
    lv.start()
    httpx.post(lv.url + "/v1/load", json={"model_name": "user.fake"}, trust_env=False, timeout=30)
    pid = _engine_pid(lv)
    try:
        n, err = _stream_with_openai(lv.url, lambda: os.kill(pid, signal.SIGSTOP))
        assert err is not None and n < 400, "a stream from a stopped engine must fail after the read timeout"
        # before the answer's head: 504
        r = httpx.post(lv.url + "/v1/chat/completions", json={**STREAM, "stream": False}, trust_env=False,
                       timeout=30)
        assert r.status_code == 504 and "upstream-read-timeout" in r.json()["error"]["message"]
    finally:
        os.kill(pid, signal.SIGCONT)


def _stream_in_thread(url: str, out: dict) -> threading.Thread:
    def run() -> None:
        lines = []
        try:
            with httpx.Client(trust_env=False, timeout=60) as c:
                with c.stream("POST", url + "/v1/chat/completions", json=STREAM) as r:
                    for line in r.iter_lines():
                        lines.append(line)
        except httpx.HTTPError as e:
            out["error"] = e
        out["lines"] = lines
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _load_and_stream(lv) -> tuple[dict, threading.Thread]:
    """Load ``user.fake`` on ``lv``, start a streamed chat in a thread, and return once serve
    counts it in flight: ``(the thread's result dict, the thread)``."""
    httpx.post(lv.url + "/v1/load", json={"model_name": "user.fake"}, trust_env=False, timeout=30)
    out: dict = {}
    t = _stream_in_thread(lv.url, out)
    assert wait_for(lambda: lv.in_flight().get("user.fake"), 10)
    return out, t


def test_unload_lets_a_running_stream_finish_and_force_cuts_it(live):
    lv = live(drain_timeout=30)
    lv.add("user.fake", recipe_doc("fake-engine", fake_engine=["--chunks", "40", "--chunk-delay", "0.05"]))
    lv.start()
    out, t = _load_and_stream(lv)
    r = httpx.post(lv.url + "/v1/unload", json={"model_name": "user.fake"}, trust_env=False, timeout=60)
    t.join(30)
    assert r.status_code == 200 and r.json()["cut"] == 0 and r.json()["state"] == "unloaded"
    assert out["lines"][-2:] == ["data: [DONE]", ""] or out["lines"][-1] == "data: [DONE]", out["lines"][-3:]
    assert "error" not in out

    out, t = _load_and_stream(lv)
    r = httpx.post(lv.url + "/v1/unload?force=true", json={"model_name": "user.fake"}, trust_env=False, timeout=60)
    t.join(30)
    assert r.status_code == 200 and r.json()["force"] is True and r.json()["cut"] == 1, r.json()
    assert "cut" in r.json()["message"]
    assert isinstance(out.get("error"), httpx.RemoteProtocolError)
    assert "event: error" in out["lines"] and "data: [DONE]" not in out["lines"]


def test_unload_cuts_at_the_drain_timeout(live):
    lv = live(drain_timeout=0.5)
    lv.add("user.fake", recipe_doc("fake-engine", fake_engine=["--chunks", "200", "--chunk-delay", "0.05"]))
    lv.start()
    out, t = _load_and_stream(lv)
    r = httpx.post(lv.url + "/v1/unload", json={"model_name": "user.fake"}, trust_env=False, timeout=60)
    t.join(30)
    assert r.json()["cut"] == 1 and r.json()["force"] is False
    assert any("drain timeout" in ln for ln in out["lines"]), out["lines"][-3:]


def test_recipe_deleted_while_streaming_lets_the_stream_finish_then_stops(live):
    lv = live(drain_timeout=30)
    lv.add("user.fake", recipe_doc("fake-engine", fake_engine=["--chunks", "40", "--chunk-delay", "0.05"]))
    lv.start()
    out, t = _load_and_stream(lv)
    (lv.backends / "fake-engine.json").unlink()  # the watcher sees it gone: the model gives way
    assert wait_for(lambda: lv.server.policy.giving_way("user.fake"), 10)
    t.join(30)
    assert "data: [DONE]" in out["lines"] and "error" not in out
    assert wait_for(lambda: lv.server.runner.engine("user.fake") is None
                    or lv.server.runner.engine("user.fake").poll() is not None, 10)
    assert lv.server.policy.cuts == 0
