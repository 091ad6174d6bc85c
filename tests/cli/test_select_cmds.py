"""``lemonpack select MODEL [--json]`` over real discovery directories, a real model registry
and real engine files; the host is injected through ``LEMONPACK_HOST_FACTS``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lemonpack.cli import main
from support.recipes import recipe_doc, write_recipe
from lemonpack.runtime.selection.selector import RANK_KEY, SERVES_KEY

ROCM = '{"os": "linux", "accelerators": ["rocm"], "rocm_arch": "gfx1151"}'


def _descriptor(directory: Path, rid: str, *, command: str, serves=("*.gguf",), rank=None, accel="cpu"):
    ext = {SERVES_KEY: list(serves)}
    if rank is not None:
        ext[RANK_KEY] = rank
    write_recipe(directory / f"{rid}.json",
                 recipe_doc(rid, command=command, accelerator=accel, extensions=ext))


@pytest.fixture
def engines(home):
    """``(root, model, engine)``: two descriptor dirs (user first), an engine binary that exists, a model file."""
    tmp_path = home.root
    user, system = home.search_path(tmp_path / "user", tmp_path / "sys")
    engine = tmp_path / "engine"
    engine.write_text("#!/bin/sh\nexit 0\n")
    engine.chmod(0o755)
    home.host()
    model = home.model("qwen.gguf")
    # fast: ranks 3 and 3 (user dir first), a rank-9 one for rocm only, a missing engine at rank 8,
    # a litertlm engine at rank 10.
    _descriptor(system, "fast-sys", command=str(engine), rank=3)
    _descriptor(user, "fast-user", command=str(engine), rank=3)
    _descriptor(user, "rocm-eng", command=str(engine), rank=9, accel="rocm")
    _descriptor(user, "gone-eng", command=str(tmp_path / "nope"), rank=8)
    _descriptor(user, "lite-eng", command=str(engine), rank=10, serves=("*.litertlm",))
    return tmp_path, model, engine


def _json(capsys, args):
    code = main(["select", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_auto_pick_tie_to_first_discovered_and_reasons(engines, capsys):
    _, model, _ = engines
    code, doc = _json(capsys, [str(model)])
    assert code == 0 and doc["outcome"] == "recipe" and doc["recipe"] == "fast-user"
    why = {c["recipe"]: c for c in doc["candidates"]}
    assert [c["recipe"] for c in doc["candidates"]][-1] == "fast-sys"  # lower-priority directory last
    assert why["fast-sys"]["why"] == "same rank (3) as fast-user, discovered later"
    assert why["rocm-eng"]["available"] is False
    assert why["gone-eng"]["available"] is False and "is not present" in why["gone-eng"]["available_reason"]
    assert why["lite-eng"]["can_serve"] is False
    code = main(["select", str(model)])
    out = capsys.readouterr().out
    assert code == 0 and "decision: recipe fast-user" in out and "fast-sys: not taken: same rank" in out


def test_host_facts_change_the_pick(engines, capsys, monkeypatch):
    _, model, _ = engines
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", ROCM)
    code, doc = _json(capsys, [str(model)])
    assert code == 0 and doc["recipe"] == "rocm-eng"


def test_litertlm_model_goes_to_its_engine(engines, capsys):
    tmp, _, _ = engines
    m = tmp / "gemma.litertlm"
    m.write_bytes(b"x")
    code, doc = _json(capsys, [str(m)])
    assert code == 0 and doc["recipe"] == "lite-eng"


def test_no_candidate_can_serve_is_the_default(engines, capsys):
    tmp, _, _ = engines
    m = tmp / "weights.safetensors"
    m.write_bytes(b"x")
    code, doc = _json(capsys, [str(m)])
    assert code == 0 and doc["outcome"] == "default" and doc["recipe"] is None


@pytest.mark.parametrize("name,outcome,recipe,error", [
    ("LLAMA.CPP", "default", None, None),
    ("FAST-SYS", "recipe", "fast-sys", None),
    ("no-such", "error", None, "unknown"),
    ("rocm-eng", "error", None, "unavailable"),
    ("gone-eng", "error", None, "unavailable"),
    ("lite-eng", "error", None, "cannot-serve"),
])
def test_env_override(engines, capsys, monkeypatch, name, outcome, recipe, error):
    _, model, _ = engines
    monkeypatch.setenv("LEMONPACK_BACKEND", name)
    code, doc = _json(capsys, [str(model)])
    assert (code, doc["outcome"], doc["recipe"], doc["error"]) == (1 if error else 0, outcome, recipe, error)
    assert doc["override_source"] == "LEMONPACK_BACKEND"
    code = main(["select", str(model)])
    cap = capsys.readouterr()
    assert code == (1 if error else 0)
    if error:
        assert f"hard error ({error})" in cap.out and "error: LEMONPACK_BACKEND=" in cap.err
        assert "Traceback" not in cap.err


def test_registry_backend_field_and_env_precedence(engines, capsys, monkeypatch):
    tmp, model, _ = engines
    assert main(["models", "add", "user.qwen", "--recipe", "fast-user", "-c", f"main={model}",
                 "--backend", "fast-sys"]) == 0
    capsys.readouterr()
    reg = json.loads((tmp / "config" / "user_models.json").read_text())
    assert reg["user.qwen"]["backend"] == "fast-sys"
    code, doc = _json(capsys, ["user.qwen"])
    assert code == 0 and doc["recipe"] == "fast-sys" and doc["override"] == "fast-sys"
    assert doc["override_source"].endswith('user_models.json ["user.qwen"].backend')
    monkeypatch.setenv("LEMONPACK_BACKEND", "llama.cpp")  # the environment wins
    code, doc = _json(capsys, ["user.qwen"])
    assert code == 0 and doc["outcome"] == "default" and doc["override_source"] == "LEMONPACK_BACKEND"
    monkeypatch.delenv("LEMONPACK_BACKEND")
    assert main(["models", "add", "user.lite", "--recipe", "fast-user", "-c", f"main={model}",
                 "--backend", "lite-eng"]) == 0
    capsys.readouterr()
    code, doc = _json(capsys, ["user.lite"])
    assert code == 1 and doc["error"] == "cannot-serve" and "user.lite" in doc["message"]


def test_registry_without_backend_auto_selects(engines, capsys):
    _, model, _ = engines
    assert main(["models", "add", "user.plain", "--recipe", "fast-sys", "-c", f"main={model}"]) == 0
    capsys.readouterr()
    code, doc = _json(capsys, ["user.plain"])
    assert code == 0 and doc["recipe"] == "fast-user" and doc["override"] is None


def test_bad_backend_name_in_registry_is_refused(engines, capsys):
    _, model, _ = engines
    code = main(["models", "add", "user.bad", "--recipe", "fast-sys", "-c", f"main={model}", "--backend", "a b"])
    err = capsys.readouterr().err
    assert code == 1 and "backend" in err and "Traceback" not in err


def test_missing_model(engines, capsys):
    tmp, _, _ = engines
    assert main(["select", str(tmp / "absent.gguf")]) == 1
    assert "model file not found" in capsys.readouterr().err
    assert main(["select", "user.nobody"]) == 1
    assert "no model file or registered model named 'user.nobody'" in capsys.readouterr().err


def test_the_default_decision_says_why_no_recipe_was_chosen(home, capsys):
    """``select user.hello`` said "no available recipe can serve user.hello" then "serves:
    hello-engine": the reason (no dev.lemonpack.serves patterns) was only in the candidate list."""
    engine = home.root / "engine"
    engine.write_text("#!/bin/sh\nexit 0\n")
    engine.chmod(0o755)
    (user,) = home.search_path(home.root / "user")
    home.host()
    write_recipe(user / "hello-eng.json", recipe_doc("hello-eng", command=str(engine), accelerator="cpu"))
    model = home.model("hello-model.txt")
    assert main(["models", "add", "user.hello", "--recipe", "hello-eng", "-c", f"main={model}"]) == 0
    capsys.readouterr()
    assert main(["select", "user.hello"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == ('decision: default (llamacpp): no recipe chosen (hello-eng declares no '
                        'extensions["dev.lemonpack.serves"] patterns), so the built-in default (llama.cpp), '
                        'the implicit rank-0 fallback'), lines
    assert lines[2].startswith("serves: hello-eng (its registered recipe")
    code, doc = _json(capsys, ["user.hello"])
    assert code == 0 and doc["outcome"] == "default" and doc["message"].startswith("no available recipe can serve")
    assert doc["no_recipe_reason"] == 'hello-eng declares no extensions["dev.lemonpack.serves"] patterns'


def test_registered_model_says_the_recipe_serve_starts(engines, capsys, monkeypatch):
    """The selector may pick another recipe for the file, but serve keeps a registered model's
    recipe unless an override names one: select says which (found by trying the README's
    example, `select user.hello` said "default (llamacpp)" while serve started hello-engine)."""
    _, model, _ = engines
    assert main(["models", "add", "user.plain", "--recipe", "fast-sys", "-c", f"main={model}"]) == 0
    capsys.readouterr()
    code, doc = _json(capsys, ["user.plain"])
    assert code == 0 and doc["recipe"] == "fast-user" and doc["serving"] == "fast-sys"
    assert main(["select", "user.plain"]) == 0
    out = capsys.readouterr().out
    assert "serves: fast-sys (its registered recipe" in out
    monkeypatch.setenv("LEMONPACK_BACKEND", "fast-user")  # an override that selects a recipe wins
    code, doc = _json(capsys, ["user.plain"])
    assert code == 0 and doc["serving"] == "fast-user"
    assert main(["select", "user.plain"]) == 0
    assert "serves: fast-user (an override" in capsys.readouterr().out
    monkeypatch.delenv("LEMONPACK_BACKEND")
    code, doc = _json(capsys, [str(model)])  # a model file: the selected recipe
    assert code == 0 and doc["serving"] == "fast-user"
    assert main(["select", str(model)]) == 0
    assert "serves:" not in capsys.readouterr().out
