"""Findings of a new-user trial of ``lemonpack serve``, each against a real server on 127.0.0.1
and the fake engine as a real process (conftest.py): load options a recipe has no token for,
engine output, access-line sizes of error answers, a ``model`` of the wrong type, the
``model`` field of answers, unknown ``/v1/load`` fields, and no file-existence oracle on a
server that serves registered models only."""

from __future__ import annotations

import json
import logging
import os

import httpx
import pytest

from lemonpack.server.catalog import Catalog
from support.recipes import recipe_doc
from support.serve import serve_cli

CHAT = {"model": "user.fake", "messages": [{"role": "user", "content": "hi"}]}


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


def test_load_options_without_a_token_are_reported_ignored_and_not_applied(live):
    lv = live()
    lv.add("user.lit", recipe_doc("lit-engine", fake_engine=["--ctx-size", "256"]))  # a literal, no {ctx_size}
    lv.add("user.tok", recipe_doc("tok-engine", fake_engine=["--ctx-size", "{ctx_size}"]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        r = c.post("/v1/load", json={"model_name": "user.lit"})
        assert r.status_code == 200, r.text
        eng = lv.server.runner.engine("user.lit")
        r = c.post("/v1/load", json={"model_name": "user.lit", "ctx_size": 512, "options": {"gpu_layers": 9}})
        assert r.status_code == 200, r.text
        doc = r.json()
        assert doc["options"] == {}  # nothing claimed as applied
        assert set(doc["ignored_options"]) == {"ctx_size", "gpu_layers"}
        assert "{ctx_size}" in doc["ignored_options"]["ctx_size"]
        assert lv.server.runner.engine("user.lit") is eng  # not restarted for options it cannot take
        assert _cmdline(eng.pid)[-2:] == ["--ctx-size", "256"]
        # a recipe with the token: applied (the engine restarts with it), nothing ignored
        r = c.post("/v1/load", json={"model_name": "user.tok", "ctx_size": 512})
        assert r.status_code == 200, r.text
        assert r.json()["options"] == {"ctx_size": "512"} and "ignored_options" not in r.json()
        assert _cmdline(lv.server.runner.engine("user.tok").pid)[-2:] == ["--ctx-size", "512"]


def test_load_accepts_unknown_fields_with_a_warning_and_refuses_wrong_types(live, caplog):
    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    lv.start()
    caplog.set_level(logging.WARNING, logger="lemonpack.server")
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        r = c.post("/api/v1/load", json={"model_name": "user.fake", "llamacpp_backend": "vulkan"})
        assert r.status_code == 200, r.text
        assert r.json()["ignored_fields"] == ["llamacpp_backend"]
        assert any("llamacpp_backend" in rec.getMessage() for rec in caplog.records)
        for bad, field in (({"ctx_size": [1]}, "ctx_size"), ({"options": 5}, "options"), ({"model_name": 7}, "model_name")):
            r = c.post("/v1/load", json={"model_name": "user.fake", **bad})
            assert r.status_code == 400, (bad, r.text)
            assert field in r.json()["error"]["message"]


def test_model_of_the_wrong_type_is_a_400_naming_the_field(live):
    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        for route, body in (("/v1/chat/completions", {**CHAT, "model": 123}),
                            ("/v1/unload", {"model_name": 123}), ("/v1/unload", {"model": ["x"]})):
            r = c.post(route, json=body)
            assert r.status_code == 400, (route, r.text)
            msg = r.json()["error"]["message"]
            assert "must be a string" in msg and "no model given" not in msg
        assert lv.server.runner.starts == 0


def test_answers_carry_the_model_name_asked_for(live, tmp_path):
    release = tmp_path / "release"
    lv = live()
    # a stream of 3 chunks whose engine holds the last two until the test creates `release`
    lv.add("user.fake", recipe_doc(fake_engine=["--chunks", "3", "--hold-stream", str(release)]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200
        doc = r.json()
        assert doc["model"] == "user.fake" and doc["system_fingerprint"] == "user.fake"  # engine's --model
        assert int(r.headers["Content-Length"]) == len(r.content)
        got, held = [], []
        with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as s:
            for line in s.iter_lines():
                if line.startswith("data: {"):
                    got.append(json.loads(line[6:])["model"])
                    held.append(not release.exists())
                    release.touch()
        assert got == ["user.fake"] * 3
        # streamed as it came (never buffered whole): the first event arrived while the engine held the rest
        assert held == [True, False, False]


def test_models_named_by_path_on_a_registered_only_server_reveal_no_file(live, tmp_path):
    lv = live(model_files=False)  # what `serve --host` with a non-loopback address builds
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    lv.start()
    there = tmp_path / "secret.gguf"
    there.write_bytes(b"GGUF")
    missing = tmp_path / "missing.gguf"
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        for route, key in (("/v1/chat/completions", "model"), ("/v1/load", "model_name"),
                           ("/v1/completions", "model")):
            answers = []
            for p in (there, missing, tmp_path):
                r = c.post(route, json={key: str(p), "messages": [], "prompt": "x"})
                answers.append((r.status_code, r.json()["error"]["message"].replace(str(p), "PATH")))
            assert len(set(answers)) == 1 and answers[0][0] == 404, answers
        r = c.post("/v1/unload", json={"model_name": str(there)})
        r2 = c.post("/v1/unload", json={"model_name": str(missing)})
        assert (r.status_code, r.text.replace(str(there), "P")) == (r2.status_code, r2.text.replace(str(missing), "P"))
    assert lv.server.runner.starts == 0


def test_a_registered_only_catalog_never_looks_at_a_path(monkeypatch):
    """``server.main.run`` builds the catalog with ``model_files=is_loopback(host)``; a
    registered-only catalog never looks at a path a request names (no stat: nothing to time
    or to tell), a loopback one does (so this check can fail)."""
    import pathlib

    import lemonpack.server.catalog as cat

    looked: list[str] = []
    real_stat = pathlib.Path.stat

    def stat(self, *a, **kw):
        looked.append(str(self))
        return real_stat(self, *a, **kw)

    monkeypatch.setattr(pathlib.Path, "stat", stat)
    for fn in ("exists", "isfile", "isdir", "lexists"):
        real = getattr(os.path, fn)
        monkeypatch.setattr(os.path, fn, lambda p, _r=real: looked.append(str(p)) or _r(p))
    c = Catalog.__new__(Catalog)
    c.entries = lambda: {}  # type: ignore[method-assign]
    c.discovery = lambda: None  # type: ignore[method-assign]
    c.model_files = False
    c._served = {}  # Catalog.__init__ is skipped: its memo of resolved names
    for p in ("/etc/passwd", "/nope/x.gguf"):
        with pytest.raises(cat.ModelNotFound, match="served only when lemonpack serve listens on a loopback"):
            c.get(p)
    assert looked == []
    c.model_files = True
    with pytest.raises(cat.ModelNotFound, match="is not a model file"):
        c.get("/nope/x.gguf")
    assert "/nope/x.gguf" in looked


def test_engine_output_shown_on_serve_stderr_and_error_sizes_logged(tmp_path):
    with serve_cli(tmp_path, recipe_doc(fake_engine=[]), "--json-logs") as (c, lines):
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
        bad = c.post("/v1/embeddings", json={"model": "user.fake", "input": "x"})
        missing = c.post("/v1/chat/completions", json={**CHAT, "model": "user.none"})
        typed = c.post("/v1/chat/completions", json={**CHAT, "model": 5})
        assert (bad.status_code, missing.status_code, typed.status_code) == (400, 404, 400)
    docs = [json.loads(ln) for ln in lines if ln.startswith("{")]
    engine = [d for d in docs if d.get("logger") == "lemonpack.server.engine"]
    assert any("fake-engine[" in d["msg"] and "listening on" in d["msg"] for d in engine), lines
    assert all(d["model"] == "user.fake" for d in engine)
    reqs = {(d["route"], d["status"], d["model"]): d for d in docs if d.get("msg") == "request"}
    assert reqs[("/v1/embeddings", 400, "user.fake")]["bytes"] == len(bad.content) > 0
    assert reqs[("/v1/chat/completions", 404, "user.none")]["bytes"] == len(missing.content) > 0
    assert reqs[("/v1/chat/completions", 400, None)]["bytes"] == len(typed.content) > 0


def test_engine_output_in_text_logs_is_prefixed_with_the_model(tmp_path):
    with serve_cli(tmp_path, recipe_doc(fake_engine=[])) as (c, lines):
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
    assert any(ln.startswith("[user.fake] fake-engine[") for ln in lines), lines
    with serve_cli(tmp_path / "quiet", recipe_doc(fake_engine=[]), "--no-engine-output") as (c, lines):
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
    assert not any(ln.startswith("[user.fake]") for ln in lines), lines


def test_json_answers_small_and_too_large_to_rewrite_pass_whole(live):
    """The fake engine echoes a POST to another route as JSON (no ``model`` member): a small
    answer is read whole and sent with its length, one over the rewrite bound streams through
    unchanged (nothing dropped, nothing held)."""
    lv = live()
    lv.add("user.fake", recipe_doc(fake_engine=[], capabilities=("chat_completion", "embeddings")))
    lv.start()
    import base64

    with httpx.Client(base_url=lv.url, trust_env=False, timeout=60) as c:
        for size in (10, 7_000_000):  # the echo's base64 of 7 MB is over the 8 MiB bound
            body = json.dumps({"model": "user.fake", "input": "x" * size}).encode()
            r = c.post("/v1/embeddings", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 200
            assert base64.b64decode(r.json()["body_b64"]) == body
            assert int(r.headers["Content-Length"]) == len(r.content)
