"""``lemonpack serve --json-logs`` (one JSON object per request) and no read timeout on
inference routes (a long wait before the first byte is normal)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from support.recipes import recipe_doc
from support.helpers import wait_for
from support.serve import serve_cli

CHAT = {"model": "user.fake", "messages": [{"role": "user", "content": "hi"}]}
FIELDS = {"model", "route", "status", "bytes", "ttfb_ms", "total_ms"}


def test_json_logs_one_object_per_request(tmp_path):
    with serve_cli(tmp_path, recipe_doc(fake_engine=[]), "--json-logs") as (c, lines):
        plain = c.post("/v1/chat/completions", json=CHAT)
        assert plain.status_code == 200
        streamed = c.post("/api/v1/chat/completions", json={**CHAT, "stream": True})
        assert streamed.status_code == 200 and b"[DONE]" in streamed.content
        assert c.post("/v1/embeddings", json={"model": "user.fake", "input": "x"}).status_code == 400
        assert c.post("/v1/chat/completions", json={**CHAT, "model": "user.none"}).status_code == 404
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
    lv.add("user.fake", recipe_doc(fake_engine=["--first-byte-delay", "6"]))
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


def test_ttl_and_soft_idle_options_of_the_cli(tmp_path):
    """``--soft-idle`` calls the recipe's downsize_endpoint, ``--ttl`` then unloads the model
    (its engine process is gone); both count from the end of the last request."""
    rec = tmp_path / "record.jsonl"
    doc = recipe_doc(fake_engine=["--record", str(rec)])
    doc["downsize_endpoint"] = "/downsize"

    def paths() -> list[str]:
        return [json.loads(ln).get("path") for ln in rec.read_text().splitlines()] if rec.exists() else []

    ttl = 1.5
    with serve_cli(tmp_path, doc, "--soft-idle", "0.3", "--ttl", str(ttl)) as (c, lines):
        sent = time.monotonic()  # the server's idle time starts after this
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
        pid = next(p for p in _engine_pids(tmp_path))
        state = lambda: next(m["state"] for m in c.get("/v1/models").json()["data"] if m["id"] == "user.fake")  # noqa: E731
        assert state() == "ready"
        deadline = time.monotonic() + 10
        while "/downsize" not in paths() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "/downsize" in paths(), lines
        now = state()
        # downsized, not unloaded (unless this machine was so slow that the TTL itself has passed:
        # a serve subprocess has no clock a test can move)
        assert now == "ready" or time.monotonic() - sent >= ttl, now
        while state() != "unloaded" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state() == "unloaded", lines
        assert not os.path.exists(f"/proc/{pid}")


def _engine_pids(tmp_path) -> list[int]:
    """Pids of fake engines whose command line names this test's record file."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = open(f"/proc/{d}/cmdline", "rb").read()
            except OSError:
                continue
            if b"fake_engine" in cmd and str(tmp_path).encode() in cmd:
                out.append(int(d))
    return out


def test_ttl_and_soft_idle_must_be_positive(tmp_path):
    for opt in ("--ttl", "--soft-idle"):
        r = subprocess.run([sys.executable, "-m", "lemonpack.cli", "serve", opt, "0"], capture_output=True,
                           text=True, env={**os.environ, "LEMONPACK_CONFIG_DIR": str(tmp_path)})
        assert r.returncode == 2 and opt in r.stderr, r.stderr


def test_malformed_requests_and_early_disconnects_never_print_a_traceback(tmp_path):
    import urllib.parse

    with serve_cli(tmp_path, recipe_doc("slow", fake_engine=["--first-byte-delay", "0.5"])) as (c, lines):
        port = urllib.parse.urlsplit(str(c.base_url)).port
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200  # engine up
        for raw in (b"GET /v1/models HTTP/1.1\r\nHost x\r\nBad\x00Header: 1\r\n\r\n",
                    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: zz\r\n\r\n",
                    b"\x16\x03\x01garbage\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(raw)
                assert s.recv(65536).split(b" ")[1] == b"400"
        body = json.dumps({**CHAT, "stream": True}).encode()
        for _ in range(3):  # the client leaves before the response headers
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            s.close()
        # each handler logs its access line last; 30 s only guards against a hang
        wait_for(lambda: sum('"status": 499' in ln or "status=499" in ln for ln in list(lines)) >= 3, 30)
        # a request after them: the server has run what the ended handlers left queued (aiohttp's own logs)
        assert c.get("/v1/health").status_code == 200
    text = "".join(lines)
    assert "Traceback" not in text and "Error handling request" not in text, text
    assert text.count("status=499") == 3, text
