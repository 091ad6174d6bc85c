"""``lemonpack serve --json-logs`` (one JSON object per request) and no read timeout on
inference routes (a long wait before the first byte is normal)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from lemonpack.runtime.models import ModelRegistry
from tests.server.conftest import fake_doc
from tests.support.helpers import write_descriptor

CHAT = {"model": "user.fake", "messages": [{"role": "user", "content": "hi"}]}
FIELDS = {"model", "route", "status", "bytes", "ttfb_ms", "total_ms"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_json_logs_one_object_per_request(tmp_path):
    cfg = tmp_path / "config"
    backends = cfg / "backends"
    write_descriptor(backends, "fake-engine.json", fake_doc())
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    ModelRegistry(cfg / "user_models.json").add("user.fake", "fake-engine", {"main": str(model)})
    port = _free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "LEMONPACK_CONFIG_DIR": str(cfg), "LEMONPACK_CACHE_DIR": str(tmp_path / "cache"),
           "LEMONPACK_BACKENDS_PATH": f"user:{backends}", "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    proc = subprocess.Popen([sys.executable, "-m", "lemonpack.cli", "serve", "--port", str(port), "--json-logs"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    lines: list[str] = []
    up = threading.Event()

    def read() -> None:
        for ln in proc.stderr:
            lines.append(ln)
            if "listening on" in ln:
                up.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert up.wait(60), "".join(lines)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=30) as c:
            plain = c.post("/v1/chat/completions", json=CHAT)
            assert plain.status_code == 200
            streamed = c.post("/api/v1/chat/completions", json={**CHAT, "stream": True})
            assert streamed.status_code == 200 and b"[DONE]" in streamed.content
            assert c.post("/v1/embeddings", json={"model": "user.fake", "input": "x"}).status_code == 400
            assert c.post("/v1/chat/completions", json={**CHAT, "model": "user.none"}).status_code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        reader.join(10)
    docs = []
    for ln in lines:
        if ln.startswith("{"):
            docs.append(json.loads(ln))  # every JSON-looking line is one whole object
    reqs = [d for d in docs if d.get("msg") == "request"]
    assert len(reqs) == 4, lines
    for d in reqs:
        assert FIELDS <= d.keys()
    by = {(d["route"], d["status"]): d for d in reqs}
    ok = by[("/v1/chat/completions", 200)]
    assert ok["model"] == "user.fake" and ok["bytes"] == len(plain.content)
    assert 0 < ok["ttfb_ms"] <= ok["total_ms"]
    st = by[("/api/v1/chat/completions", 200)]
    assert st["bytes"] == len(streamed.content) and st["ttfb_ms"] <= st["total_ms"]
    assert by[("/v1/embeddings", 400)]["model"] == "user.fake"
    assert by[("/v1/chat/completions", 404)]["model"] == "user.none"


def test_no_read_timeout_on_inference_routes(live):
    lv = live()
    lv.add("user.fake", fake_doc("fake-engine", "--first-byte-delay", "6"))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=60) as c:
        assert c.post("/v1/load", json={"model_name": "user.fake"}).status_code == 200
        t0 = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            plain = pool.submit(c.post, "/v1/chat/completions", json=CHAT)
            streamed = pool.submit(c.post, "/v1/chat/completions", json={**CHAT, "stream": True})
            p, s = plain.result(30), streamed.result(30)
        took = time.monotonic() - t0
    assert p.status_code == 200 and p.json()["choices"][0]["message"]["content"]
    assert s.status_code == 200 and s.content.rstrip().endswith(b"data: [DONE]")
    assert took >= 6.0  # the engine really waited before its first byte
