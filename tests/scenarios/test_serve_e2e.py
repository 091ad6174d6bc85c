"""``lemonpack serve`` end to end with real engines: a podman container and llama.cpp's llama-server.

Each test discovers its recipe from a backends directory, lists it on ``/v1/models``, answers
chat completions through the proxy, refuses an undeclared route with ``unsupported_operation``,
unloads, and checks the engine is gone (the container no longer in ``podman ps -a``; the
llama-server process reaped and no longer alive).

slow: real podman + runc with the suite's busybox image (built by ``lemonpack build``), and the
llama-server the suite builds once per machine (tests/support/llama_server.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from support.helpers import wait_for
from support.llama_server import llama_server_dir, write_tiny_gguf

from lemonpack.runtime.engines.proctable import pid_alive

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CHAT_ANSWER = {"id": "chatcmpl-bb", "object": "chat.completion", "created": 0, "model": "user.bb",
               "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "Hello from busybox"}}],
               "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}}


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, trust_env=False, timeout=120)


def container_listed(name: str) -> bool:
    r = subprocess.run(["podman", "ps", "-a", "--filter", f"name=^{name}$", "--format", "{{.Names}}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return name in r.stdout.split()


CGI_ROUTES = {"embeddings": "embed", "reranking": "rerank", "classification": "classify"}


def busybox_www(root: Path, bb: str) -> Path:
    """A document root for busybox httpd: ``/health`` (static, 200), ``/cgi-bin/chat``, a CGI
    that drains the request body and prints a fixed chat completion, and one CGI per other
    capability of section 14 (``embed``, ``rerank``, ``classify``) answering
    ``{"answered_by": NAME, "bytes": N}`` (N: the request body's length as the engine read it)."""
    www = root / "www"
    (www / "cgi-bin").mkdir(parents=True)
    (www / "health").write_text("ok\n")
    (www / "chat.json").write_text(json.dumps(CHAT_ANSWER))
    scripts = {"chat": f"{bb} head -c \"${{CONTENT_LENGTH:-0}}\" >/dev/null\n"
                       "printf 'Status: 200 OK\\r\\nContent-Type: application/json\\r\\n\\r\\n'\n"
                       f"{bb} cat /w/chat.json\n"}
    for cgi_name in CGI_ROUTES.values():
        scripts[cgi_name] = (f"n=$({bb} head -c \"${{CONTENT_LENGTH:-0}}\" | {bb} wc -c)\n"
                             "printf 'Status: 200 OK\\r\\nContent-Type: application/json\\r\\n\\r\\n'\n"
                             f"printf '{{\"answered_by\": \"{cgi_name}\", \"bytes\": %s}}' \"$n\"\n")
    for cgi_name, body in scripts.items():
        cgi = www / "cgi-bin" / cgi_name
        cgi.write_text(f"#!{bb} sh\n" + body)
        os.chmod(cgi, 0o755)
    for p in (www, www / "cgi-bin"):
        os.chmod(p, 0o755)
    os.chmod(www / "health", 0o644)
    os.chmod(www / "chat.json", 0o644)
    return www


def test_container_engine_discovered_multi_capability_unsupported_unload_gone(live, podman_env, tmp_path):
    image = podman_env["image"]
    name = f"lemonpack-e2e-{os.urandom(4).hex()}"
    www = busybox_www(tmp_path, image.bb)
    doc = {
        "recipe": "bb-chat", "display_name": "busybox chat", "api_contract_version": "1",
        "capabilities": ["chat_completion", *CGI_ROUTES],  # section 14: an engine that serves more than chat
        "endpoints": {"chat_completion": "/cgi-bin/chat", **{c: f"/cgi-bin/{n}" for c, n in CGI_ROUTES.items()}},
        "health_probe": {"type": "http", "endpoint": "/health", "expected_status": 200,
                         "timeout_seconds": 90, "poll_interval_ms": 100},
        "platforms": {"linux": {"cpu": {
            "command": "podman",
            "args": ["run", "--rm", "--name", name, "--network", "host", "-v", f"{www}:/w:ro", image.ref,
                     *image.shell, f"exec {image.bb} httpd -f -p {{host}}:{{port}} -h /w"],
            "stop_command": "podman", "stop_command_args": ["rm", "-f", "-t", "0", name],
        }}},
    }
    lv = live()
    lv.add("user.bb", doc)
    lv.start()
    try:
        with client(lv.url) as c:
            models = c.get("/v1/models").json()["data"]
            assert [(m["id"], m["recipe"], m["state"]) for m in models] == [("user.bb", "bb-chat", "unloaded")]
            assert not container_listed(name)
            r = c.post("/v1/chat/completions", json={"model": "user.bb",
                                                     "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "Hello from busybox"
            assert container_listed(name)  # the engine is that container
            assert c.get("/v1/models").json()["data"][0]["state"] == "ready"
            for route, cgi_name in [("/v1/embeddings", "embed"), ("/api/v1/rerank", "rerank"),
                                    ("/v1/reranking", "rerank"), ("/v1/classify", "classify")]:
                body = json.dumps({"model": "user.bb", "input": "x", "query": "q", "documents": ["a", "b"]}).encode()
                r = c.post(route, content=body, headers={"Content-Type": "application/json"})
                assert r.status_code == 200, (route, r.text)
                assert r.json() == {"answered_by": cgi_name, "bytes": len(body)}, route
            for route in ("/v1/audio/speech", "/v1/images/generations", "/v1/completions"):  # not declared
                r = c.post(route, json={"model": "user.bb", "input": "x", "prompt": "p"})
                assert r.status_code == 400 and r.json()["error"]["type"] == "unsupported_operation", route
            assert c.post("/v1/unload", json={"model_name": "user.bb"}).status_code == 200
            assert not container_listed(name)  # gone once unload answered
            assert c.get("/v1/models").json()["data"][0]["state"] == "unloaded"
        assert lv.server.runner.starts == 1
    finally:
        lv.close()
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def llama_bin():
    """llama-server built once per machine; fails (never skips) saying how to get it."""
    try:
        d = llama_server_dir(build=True)
    except Exception as e:  # noqa: BLE001 (any build failure becomes one clear failure)
        pytest.fail(f"llama-server is unavailable: {e}; build it with `python tests/support/llama_server.py`")
    if d is None or not (d / "llama-server").is_file():
        pytest.fail("llama-server is unavailable: build it with `python tests/support/llama_server.py`")
    return d


def test_llama_server_through_openai_client_plain_streamed_unload_gone(live, llama_bin, tmp_path, caplog):
    caplog.set_level("INFO", logger="lemonpack.server.engine")
    lv = live()
    lv.model_file = write_tiny_gguf(tmp_path / "tiny-llama.gguf")
    lv.add("user.tiny", {
        "recipe": "llama-passthrough", "display_name": "llama.cpp", "api_contract_version": "1",
        "capabilities": ["chat_completion", "completion"],
        "health_probe": {"type": "http", "endpoint": "/health", "expected_status": 200,
                         "timeout_seconds": 90, "poll_interval_ms": 20},
        "platforms": {"linux": {"cpu": {
            "command": str(llama_bin / "llama-server"),
            "args": ["--host", "{host}", "--port", "{port}", "-m", "{checkpoint:main}", "--threads", "1",
                     "-c", "256"],
        }}},
    })
    lv.start()
    oc = openai.OpenAI(base_url=lv.url + "/v1", api_key="none", max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": "hi"}]
    assert [m.id for m in oc.models.list().data] == ["user.tiny"]
    r = oc.chat.completions.create(model="user.tiny", messages=msgs, max_tokens=8, temperature=0)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens >= 1
    assert r.model == "user.tiny"  # the name asked for, not llama-server's model path
    chunks = list(oc.chat.completions.create(model="user.tiny", messages=msgs, max_tokens=8, stream=True))
    assert len(chunks) >= 2 and all(c.object == "chat.completion.chunk" for c in chunks)
    assert {c.model for c in chunks} == {"user.tiny"}  # rewritten in every chunk of the (chunked) stream
    # llama-server's own output reached the engine logger, tagged with the model
    engine_lines = [rec.getMessage() for rec in caplog.records if rec.name == "lemonpack.server.engine"]
    assert any("llama" in ln.lower() or "server" in ln.lower() for ln in engine_lines), engine_lines[:5]
    assert all(rec.fields == {"model": "user.tiny"} for rec in caplog.records if rec.name == "lemonpack.server.engine")
    assert any(c.choices and c.choices[0].finish_reason for c in chunks)  # the iterator ended after the end
    with client(lv.url) as c:  # the raw stream ends with the [DONE] sentinel
        with c.stream("POST", "/v1/chat/completions",
                      json={"model": "user.tiny", "messages": msgs, "max_tokens": 4, "stream": True}) as s:
            lines = [x for x in s.iter_lines() if x.strip()]
        assert lines[-1] == "data: [DONE]"
        r = c.post("/v1/embeddings", json={"model": "user.tiny", "input": "x"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "unsupported_operation"
        eng = lv.server.runner.engine("user.tiny")
        assert eng is not None and pid_alive(eng.pid)
        # the recipe's literal "-c 256" takes no {ctx_size}: the option is reported ignored, not applied
        r = c.post("/v1/load", json={"model_name": "user.tiny", "ctx_size": 512})
        assert r.status_code == 200, r.text
        assert "ctx_size" in r.json()["ignored_options"] and "ctx_size" not in r.json()["options"]
        assert lv.server.runner.engine("user.tiny") is eng  # not restarted
        assert c.post("/v1/unload", json={"model_name": "user.tiny"}).status_code == 200
    assert eng.poll() is not None
    assert wait_for(lambda: not pid_alive(eng.pid), 5, 0.05)
    assert lv.server.runner.starts == 1
