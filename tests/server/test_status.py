"""The status page's server side (lemonpack/server/status.py): its files and headers, the
loopback rule, and ``GET /v1/status`` against a real server with fake engines."""

from __future__ import annotations

import asyncio
import os
import re
import tomllib
from pathlib import Path
from unittest import mock

import httpx
import pytest

from lemonpack.digest import file_digest
from lemonpack.server.status import CSP, FILES, ModelDigests, StatusPage, vm_rss
from support.helpers import wait_for
from support.recipes import recipe_doc

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "lemonpack" / "server" / "static"
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def test_the_static_files_are_package_data_and_load_nothing_from_elsewhere():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {p.name for g in globs["lemonpack.server"] for p in (ROOT / "lemonpack" / "server").glob(g)}
    assert shipped == {p.name for p in STATIC.iterdir()} == set(FILES)
    html = (STATIC / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=\"/status/app\.js\")", html)  # no inline script
    assert "style=" not in html and "<style" not in html and " on" not in re.sub(r"\s+", " ", html).replace(
        " one", "")  # no inline style, no on* handler attribute
    for f in STATIC.iterdir():
        text = f.read_text()
        assert not re.search(r"https?://", text), f  # no CDN, no absolute URL at all
    js = (STATIC / "app.js").read_text()
    assert "innerHTML" not in js and "outerHTML" not in js and "insertAdjacentHTML" not in js
    assert "eval(" not in js and "document.write" not in js


def test_the_csp_is_strict():
    rules = dict(r.strip().split(" ", 1) for r in CSP.split(";"))
    assert rules["default-src"] == "'none'" and rules["script-src"] == "'self'" and rules["style-src"] == "'self'"
    assert rules["connect-src"] == "'self'" and rules["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in CSP and "unsafe-eval" not in CSP and "*" not in CSP


def test_vm_rss_reads_proc_status():
    mine = vm_rss(os.getpid())
    assert mine is not None and mine > 1 << 20
    assert vm_rss(2**22 + 12345) is None  # no such process


def test_model_digests_hash_in_the_background_and_again_when_the_file_changes(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"x" * 100)
    d = ModelDigests()
    assert d.get(str(f)) in ("pending", str(file_digest(f)[0]))
    assert wait_for(lambda: d.get(str(f)) == str(file_digest(f)[0]), 10)
    f.write_bytes(b"GGUF" + b"y" * 200)
    assert wait_for(lambda: d.get(str(f)) == str(file_digest(f)[0]), 10)
    assert d.get(str(tmp_path / "missing")) is None and d.get(str(tmp_path)) is None


def test_the_page_answers_loopback_clients_only():
    from aiohttp.test_utils import make_mocked_request

    async def ask(peer: str, path: str, remote: bool = False) -> int:
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda k, d=None: (peer, 5555) if k == "peername" else d
        page = StatusPage(mock.Mock(), remote=remote)
        req = make_mocked_request("GET", path, transport=transport, match_info={"name": "app.js"})
        handler = page.page if path == "/" else page.asset if path.startswith("/status/") else page.status
        return (await handler(req)).status
    assert asyncio.run(ask("10.1.2.3", "/")) == 403
    assert asyncio.run(ask("10.1.2.3", "/status/app.js")) == 403
    assert asyncio.run(ask("10.1.2.3", "/v1/status")) == 403
    assert asyncio.run(ask("10.1.2.3", "/", remote=True)) == 200
    assert asyncio.run(ask("127.0.0.1", "/status/app.js")) == 200


def test_the_page_and_its_files_carry_the_headers(live):
    lv = live()
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        for path, ctype in (("/", "text/html"), ("/status/app.js", "text/javascript"), ("/status/app.css", "text/css")):
            r = c.get(path)
            assert r.status_code == 200 and r.headers["content-type"].startswith(ctype), path
            assert r.headers["content-security-policy"] == CSP and r.headers["x-content-type-options"] == "nosniff"
        assert c.get("/").content == (STATIC / "index.html").read_bytes()
        for bad in ("/status/index.htm", "/status/..%2fstatus.py", "/status/%2e%2e", "/status/app.js.map"):
            assert c.get(bad).status_code == 404, bad


@pytest.mark.timeout(120)
def test_status_json_has_state_engine_memory_digests_and_the_metrics_counters(live, tmp_path):
    lv = live(memory_budget=1 << 30)
    lv.add("user.ok", recipe_doc("ok", fake_engine=[]))
    lv.add("user.bad", recipe_doc("bad", fake_engine=["--exit-now", "--exit-code", "4"]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        first = c.get("/v1/status").json()
        assert {m["id"]: m["state"] for m in first["models"]} == {"user.ok": "unloaded", "user.bad": "unloaded"}
        assert all(m["engine"] is None and m["trust"] is None and m["memory"]["rss"] is None for m in first["models"])
        for _ in range(3):
            assert c.post("/v1/chat/completions", json={**CHAT, "model": "user.ok"}).status_code == 200
        assert c.post("/v1/chat/completions", json={**CHAT, "model": "user.bad"}).status_code == 500
        doc = c.get("/v1/status").json()
        metrics = c.get("/metrics").text
    ok = next(m for m in doc["models"] if m["id"] == "user.ok")
    bad = next(m for m in doc["models"] if m["id"] == "user.bad")
    assert ok["state"] == "ready" and ok["recipe"] == "ok" and ok["engine"]["pid"] == lv.server.runner.engine(
        "user.ok").pid
    assert ok["memory"]["estimate"] == 4  # the 4-byte model file (no engine floor for this recipe)
    assert abs(ok["memory"]["rss"] - (vm_rss(ok["engine"]["pid"]) or 0)) < 1 << 20  # the engine's resident set
    assert ok["memory"]["rss"] > 1 << 20
    assert any("listening on" in line for line in ok["log"])
    assert bad["state"] == "failed" and "code 4" in bad["reason"] and bad["engine"] is None
    assert ok["requests"] == 3 and bad["requests"] == 1 and ok["ttfb_count"] == 3 and ok["ttfb_sum"] > 0
    assert 'lemonpack_requests_total{model="user.ok",route="/v1/chat/completions",status="200"} 3.0' in metrics
    count = float(re.search(r'lemonpack_time_to_first_byte_seconds_count\{model="user.ok"[^}]*\} (\S+)',
                            metrics).group(1))
    assert count == ok["ttfb_count"]
    assert doc["server"]["requests"] >= 4 and doc["server"]["budget"] == 1 << 30 and doc["server"]["used"] >= 4
    assert wait_for(lambda: next(m for m in c_status(lv)["models"] if m["id"] == "user.ok")["digests"]["model"]
                    == str(file_digest(lv.model_file)[0]), 10)


def c_status(lv) -> dict:
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        return c.get("/v1/status").json()
