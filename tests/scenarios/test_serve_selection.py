"""``lemonpack serve`` wires the backend selector (seed 001 section 2.3): a request naming a
model file, or a registered model with an override, is served by the recipe
``select_backend`` picks; a hard error is HTTP 400 ``backend_selection_error``."""

from __future__ import annotations

import httpx
import pytest

from support.recipes import recipe_doc, write_recipe

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def _recipe(rid: str, serves, rank: int = 0, os_: str = "linux") -> dict:
    doc = recipe_doc(rid, fake_engine=["--model", f"{rid}-engine"])  # the engine answers with its recipe's name
    doc["extensions"] = {"dev.lemonpack.serves": serves, "dev.lemonpack.rank": rank}
    if os_ != "linux":
        doc["platforms"] = {os_: doc["platforms"]["linux"]}
    return doc


@pytest.fixture
def sel(live, monkeypatch):
    monkeypatch.delenv("LEMONPACK_BACKEND", raising=False)
    lv = live()
    for doc in (_recipe("alpha", ["*.gguf"], 1), _recipe("beta", ["*.GGUF"], 5),
                _recipe("gamma", ["*.litertlm"], 9), _recipe("ghost", ["*.gguf"], 50, os_="darwin")):
        write_recipe(lv.backends / f"{doc['recipe']}.json", doc)
    lv.registry.add("user.reg", "alpha", {"main": str(lv.model_file)})
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        yield lv, c


def _served_by(c: httpx.Client, model: str) -> str:
    r = c.post("/v1/chat/completions", json={"model": model, **CHAT})
    assert r.status_code == 200, r.text
    return r.json()["system_fingerprint"].removesuffix("-engine")  # the engine's --model


def test_model_file_goes_to_the_highest_ranked_available_recipe_that_can_serve(sel):
    lv, c = sel
    # ghost ranks higher but has no block for this host; gamma cannot serve *.gguf
    assert _served_by(c, str(lv.model_file)) == "beta"


def test_a_loaded_model_file_is_listed_in_models_until_unloaded(sel):
    lv, c = sel
    path = str(lv.model_file)
    assert path not in {m["id"] for m in c.get("/v1/models").json()["data"]}
    assert _served_by(c, path) == "beta"
    listed = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
    assert listed[path]["state"] == "ready" and listed[path]["recipe"] == "beta"
    assert listed[path]["capabilities"] == ["chat_completion"]
    assert listed["user.reg"]["state"] == "unloaded"  # registered models are listed as before
    assert c.post("/v1/unload", json={"model_name": path}).status_code == 200
    assert path not in {m["id"] for m in c.get("/v1/models").json()["data"]}


def test_registered_model_keeps_its_recipe_without_an_override(sel):
    lv, c = sel
    assert _served_by(c, "user.reg") == "alpha"


@pytest.mark.parametrize("override,served", [("BETA", "beta"), ("llama.cpp", "alpha")])
def test_override_on_a_registered_model(sel, monkeypatch, override, served):
    lv, c = sel
    monkeypatch.setenv("LEMONPACK_BACKEND", override)  # the default's names keep the registered recipe
    assert _served_by(c, "user.reg") == served


def test_registry_backend_field_overrides_the_registered_recipe(sel):
    lv, c = sel
    lv.registry.add("user.pinned", "alpha", {"main": str(lv.model_file)}, backend="beta")
    assert _served_by(c, "user.pinned") == "beta"


def test_env_override_on_a_model_file(sel, monkeypatch):
    lv, c = sel
    monkeypatch.setenv("LEMONPACK_BACKEND", "Alpha")
    assert _served_by(c, str(lv.model_file)) == "alpha"


@pytest.mark.parametrize("override,kind", [("nope", "unknown"), ("ghost", "unavailable"),
                                           ("gamma", "cannot-serve")])
def test_hard_errors_are_400_backend_selection_error_naming_the_kind(sel, monkeypatch, override, kind):
    lv, c = sel
    monkeypatch.setenv("LEMONPACK_BACKEND", override)
    for model in (str(lv.model_file), "user.reg"):
        for path, body in (("/v1/chat/completions", {"model": model, **CHAT}), ("/v1/load", {"model_name": model})):
            r = c.post(path, json=body)
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["type"] == "backend_selection_error" and err["code"] == kind
            assert err["message"].startswith(kind + ":") and override in err["message"]
    assert lv.server.runner.starts == 0  # no engine was started for a refused request


def test_model_file_nothing_serves_is_a_400_without_a_start(sel, tmp_path):
    lv, c = sel
    other = tmp_path / "weights.onnx"
    other.write_bytes(b"x")
    r = c.post("/v1/chat/completions", json={"model": str(other), **CHAT})
    assert r.status_code == 400 and r.json()["error"]["type"] == "backend_selection_error"
    assert "no available recipe can serve" in r.json()["error"]["message"]
    assert lv.server.runner.starts == 0


def test_model_files_by_path_only_on_a_loopback_listener(sel):
    """A remote client must not point an engine at any file of the server's machine: off
    loopback (``lemonpack serve --host 0.0.0.0``) only registered models are served."""
    lv, c = sel
    lv.server.catalog.model_files = False
    r = c.post("/v1/chat/completions", json={"model": str(lv.model_file), **CHAT})
    assert r.status_code == 404 and "loopback" in r.json()["error"]["message"], r.text
    assert _served_by(c, "user.reg") == "alpha"  # registered models still served
