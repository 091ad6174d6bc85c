"""``lemonpack serve``: the proxy against real fake-engine processes on loopback."""

from __future__ import annotations

import base64
import json
import threading

import httpx
import pytest
import openai

from support.recipes import recipe_doc
from support.helpers import wait_for

CHAT = {"model": "user.fake", "messages": [{"role": "user", "content": "hi"}]}


def client(url):
    return httpx.Client(base_url=url, trust_env=False, timeout=30)


def test_openai_client_chat_plain_and_streamed(live):
    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    lv.start()
    oc = openai.OpenAI(base_url=lv.url + "/v1", api_key="none")
    r = oc.chat.completions.create(model="user.fake", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content == "Hello from the fake engine"
    text = "".join(c.choices[0].delta.content or "" for c in
                   oc.chat.completions.create(model="user.fake", messages=CHAT["messages"], stream=True))
    assert text.split() == ["Hello", "from", "the", "fake", "engine"]
    assert lv.server.runner.starts == 1
    with client(lv.url) as c:  # the /api/v1 prefix too
        assert c.post("/api/v1/chat/completions", json=CHAT).status_code == 200


def test_undeclared_route_is_unsupported_operation_without_starting_the_engine(live):
    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    lv.start()
    with client(lv.url) as c:
        for path in ("/v1/embeddings", "/api/v1/rerank", "/v1/reranker", "/v1/classify", "/v1/tokenize"):
            r = c.post(path, json={"model": "user.fake", "input": "x"})
            assert r.status_code == 400, path
            assert r.json()["error"]["type"] == "unsupported_operation"
        r = c.post("/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF")}, data={"model": "user.fake"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "unsupported_operation"
        r = c.post("/v1/images/generations?model=user.fake", json={"prompt": "x"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "unsupported_operation"
    assert lv.server.runner.starts == 0


def test_multi_capability_engine_and_endpoint_remap(live):
    """Section 14: chat, embeddings, reranking and classification on one engine; classify remapped."""
    lv = live()
    lv.add("user.multi", recipe_doc("multi", fake_engine=[], capabilities=("chat_completion", "embeddings", "reranking",
                                                         "classification"), endpoints={"classification": "/engine/classify"}))
    lv.start()
    with client(lv.url) as c:
        assert c.post("/v1/embeddings", json={"model": "user.multi"}).json()["path"] == "/v1/embeddings"
        for alias in ("rerank", "reranking", "reranker"):
            assert c.post(f"/v1/{alias}", json={"model": "user.multi"}).json()["path"] == f"/v1/{alias}"
        assert c.post("/v1/classify", json={"model": "user.multi"}).json()["path"] == "/engine/classify"
        r = c.post("/v1/audio/speech", json={"model": "user.multi"})
        assert r.json()["error"]["type"] == "unsupported_operation"
    assert lv.server.runner.starts == 1


def test_sse_streams_unbuffered_and_client_disconnect_closes_upstream(live, tmp_path):
    rec, release = tmp_path / "events", tmp_path / "release"
    lv = live()
    # the engine sends its first chunk, then holds the other 39 until the test creates `release`
    lv.add("user.fake", recipe_doc("slow", fake_engine=["--chunks", "40", "--hold-stream", str(release), "--record", str(rec)]))
    lv.start()

    def events() -> list[dict]:
        return [json.loads(x) for x in rec.read_text().splitlines()] if rec.exists() else []

    with client(lv.url) as c:
        c.post("/v1/load", json={"model_name": "user.fake"}).raise_for_status()
        with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
            assert r.headers["x-accel-buffering"] == "no"
            # unbuffered: the first chunk arrives while the engine still holds the rest
            first = next(r.iter_raw())
            assert first.startswith(b"data: ")
            assert not release.exists() and "stream-end" not in [e["event"] for e in events()]
    # the client closed mid-stream: the proxy closes its connection to the engine, which sees it
    # while still holding its answer (30 s only guards against a hang)
    assert wait_for(lambda: "disconnect" in [e["event"] for e in events()], 30), "the engine never saw the disconnect"


def test_body_framing_headers_and_multipart(live, tmp_path):
    lv = live()
    lv.add("user.multi", recipe_doc("multi", fake_engine=[], capabilities=("embeddings", "transcription")))
    lv.start()
    with client(lv.url) as c:
        def chunked():
            yield b'{"model": "user.multi", '
            yield b'"input": "' + b"x" * 5000 + b'"}'
        r = c.post("/v1/embeddings", content=chunked(),
                   headers={"Content-Type": "application/json", "Connection": "keep-alive, X-Drop",
                            "X-Drop": "1", "Keep-Alive": "timeout=5", "TE": "trailers",
                            "Accept-Encoding": "gzip, br", "X-Keep": "yes"})
        assert r.status_code == 200
        echo = r.json()
        hdrs = [(k.lower(), v) for k, v in echo["headers"]]
        body = base64.b64decode(echo["body_b64"])
        assert json.loads(body)["input"] == "x" * 5000
        assert [v for k, v in hdrs if k == "content-length"] == [str(len(body))]
        names = {k for k, _ in hdrs}
        assert not names & {"transfer-encoding", "keep-alive", "te", "x-drop"}
        assert dict(hdrs)["accept-encoding"] == "identity" and dict(hdrs)["x-keep"] == "yes"
        # multipart, byte for byte with its boundary, model taken from the form field
        blob = bytes(range(256)) * 64
        b = "xYzBoundary42"
        sent = (f'--{b}\r\nContent-Disposition: form-data; name="model"\r\n\r\nuser.multi\r\n'
                f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
                f'Content-Type: audio/wav\r\n\r\n').encode() + blob + f"\r\n--{b}--\r\n".encode()
        ctype = f"multipart/form-data; boundary={b}"
        r = c.post("/v1/audio/transcriptions", content=sent, headers={"Content-Type": ctype})
        echo = r.json()
        assert base64.b64decode(echo["body_b64"]) == sent
        assert dict((k.lower(), v) for k, v in echo["headers"])["content-type"] == ctype
        # hop-by-hop headers of the engine's answer are not passed on
        assert "keep-alive" not in {k.lower() for k in r.headers}


def test_engine_dying_mid_stream_ends_stream_and_next_request_restarts(live):
    lv = live()
    lv.add("user.fake", recipe_doc("dying", fake_engine=["--die-mid-stream", "--chunks", "10"]))
    lv.start()
    with client(lv.url) as c:
        got = b""
        with pytest.raises(httpx.RemoteProtocolError):  # ends, no hang: as an error (issue 27)
            with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
                for part in r.iter_raw():
                    got += part
        assert got.count(b"data: ") == 3 and b"event: error" in got and b"[DONE]" not in got
        r = c.post("/v1/chat/completions", json=CHAT)  # plain: restarts the engine
        assert r.status_code == 200, r.text
    assert lv.server.runner.starts == 2


def _raw_stream(url: str, body: dict) -> tuple[bytes, list[bytes]]:
    """The raw (still framed) body of a streamed chat answer and its events (httpx de-chunks)."""
    with client(url) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200 and r.headers["transfer-encoding"] == "chunked"
            data = b"".join(r.iter_bytes())
    return data, [e for e in data.split(b"\n\n") if e]


@pytest.mark.parametrize("frame", [0, 9, 40, 2])
def test_a_chunked_event_stream_has_its_model_rewritten_however_the_framing_cuts_it(live, frame):
    """A chunked event stream is relayed with its framing until a ``model`` member may be in
    it, then de-chunked and rewritten (``Answer.relay``'s watch): every event names the model
    asked for, with one event per chunk, or chunks of 9 or 40 bytes (the member cut once by
    the framing, across reads, or not at all). Chunks of 2 bytes cut it more than once (a
    documented limit: found only when a half of it is whole)."""
    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=["--chunked", "--chunks", "50", "--frame-size", str(frame),
                                                "--model", "/models/own-name.gguf"]))
    lv.start()
    _data, events = _raw_stream(lv.url, {**CHAT, "stream": True})
    assert events[-1] == b"data: [DONE]" and len(events) == 51
    docs = [json.loads(e.removeprefix(b"data: ")) for e in events[:-1]]
    assert [d["choices"][0]["delta"]["content"] for d in docs] == [f"w{i} " for i in range(50)]
    if frame != 2:
        assert {d["model"] for d in docs} == {"user.fake"}


def test_a_chunked_event_stream_without_a_model_member_passes_whole(live):
    """Relayed with the engine's framing to its end (no member to rewrite: no switch)."""
    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=["--chunked", "--chunks", "30", "--no-model-field"]))
    lv.start()
    with client(lv.url) as c:
        with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
            raw = b"".join(r.iter_raw())  # httpx de-chunks
    assert raw.count(b"data: ") == 31 and raw.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("rewritten", [False, True])
def test_a_chunked_event_stream_cut_by_the_engines_death_ends_with_an_error_event(live, rewritten):
    """Relayed with the engine's framing (no model member) or framed by serve (rewritten):
    either way the last event is an error and the body is left unterminated."""
    lv = live()
    flags = ["--chunked", "--die-mid-stream", "--chunks", "10", "--model", "/models/own-name.gguf"]
    lv.add("user.fake", recipe_doc("dying", fake_engine=flags + ([] if rewritten else ["--no-model-field"])))
    lv.start()
    with client(lv.url) as c:
        got = b""
        with pytest.raises(httpx.RemoteProtocolError):  # unterminated: the client raises
            with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
                for part in r.iter_raw():
                    got += part
    assert got.count(b"data: ") == 3 and b"event: error" in got and b"[DONE]" not in got
    assert (b'"model":"user.fake"' in got) is rewritten and b'"model": "/models/own-name.gguf"' not in got


def test_concurrent_cold_requests_spawn_one_engine(live):
    lv = live()
    lv.add("user.fake", recipe_doc("cold", fake_engine=["--health-delay", "0.5"]))
    lv.start()
    results = []

    def one():
        with client(lv.url) as c:
            results.append(c.post("/v1/chat/completions", json=CHAT).status_code)

    ts = [threading.Thread(target=one) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert results == [200] * 8
    assert lv.server.runner.starts == 1


def test_in_flight_bound_answers_429_with_retry_after(live):
    lv = live(max_in_flight=1)
    lv.add("user.fake", recipe_doc("slow", fake_engine=["--chunks", "20", "--chunk-delay", "0.05"]))
    lv.start()
    with client(lv.url) as c, client(lv.url) as c2:
        with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
            chunks = r.iter_raw()  # kept: a dropped iterator closes the connection
            next(chunks)
            r2 = c2.post("/v1/chat/completions", json=CHAT)
            assert r2.status_code == 429 and r2.headers["retry-after"] == "1"
        # the client left: its slot is free at once (the handler is cancelled, no polling)
        assert c2.post("/v1/chat/completions", json=CHAT).status_code == 200


def test_failed_load_is_model_load_error_with_log_lines(live):
    lv = live()
    lv.add("user.bad", recipe_doc("bad", fake_engine=["--exit-now", "--exit-code", "4"]))
    lv.start()
    with client(lv.url) as c:
        r = c.post("/v1/chat/completions", json={**CHAT, "model": "user.bad"})
        assert r.status_code == 500
        err = r.json()["error"]
        assert err["type"] == "model_load_error" and "giving up with code 4" in err["message"]
        m = {x["id"]: x for x in c.get("/v1/models").json()["data"]}
        assert m["user.bad"]["state"] == "failed" and "code 4" in m["user.bad"]["reason"]
        r = c.post("/v1/load", json={"model_name": "user.bad"})
        assert r.status_code == 500 and r.json()["error"]["type"] == "model_load_error"


def test_unknown_model_and_missing_model(live):
    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    lv.start()
    with client(lv.url) as c:
        assert c.post("/v1/chat/completions", json={**CHAT, "model": "user.nope"}).status_code == 404
        assert c.post("/v1/chat/completions", json={"messages": []}).json()["error"]["type"] == \
            "invalid_request_error"
