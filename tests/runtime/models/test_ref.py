"""The one file-or-id rule for a RECIPE argument (Discovery.resolve) and the one rule for a
model argument (runtime.models.ref.resolve_model), shared by run, select, install, uninstall."""

from __future__ import annotations

import json
import os

import pytest

from lemonpack.errors import LemonpackError
from lemonpack.runtime.recipes.discovery import Discovery, SearchDir, recipe_id
from lemonpack.runtime.models.ref import resolve_model
from lemonpack.runtime.models.registry import ModelRegistry

RECIPE = {"recipe": "tiny-engine", "display_name": "Tiny", "api_contract_version": "1",
          "capabilities": ["chat_completion"],
          "platforms": {"linux": {"cpu": {"command": "/bin/true", "args": []}}}}


@pytest.fixture
def backends(tmp_path):
    d = tmp_path / "backends"
    d.mkdir()
    os.chmod(d, 0o755)
    p = d / "tiny_engine.json"
    p.write_text(json.dumps(RECIPE))
    os.chmod(p, 0o644)
    return Discovery([SearchDir(d, "user")])


def test_a_file_an_id_and_the_errors(backends, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert backends.resolve("tiny-engine").recipe == "tiny-engine"
    assert backends.resolve(str(backends.directories[0].path / "tiny_engine.json")).recipe == "tiny-engine"
    with pytest.raises(LemonpackError, match="^recipe file not found: nope.json$"):
        backends.resolve("nope.json")
    with pytest.raises(LemonpackError, match="^recipe file backends/ is not a regular file$"):
        backends.resolve("backends/")
    with pytest.raises(LemonpackError, match=r"no recipe file or discovered recipe named 'other' "
                                             r"\(discovered: tiny-engine; searched: .*backends\)"):
        backends.resolve("other")
    assert recipe_id("whatever-id") == "whatever-id"  # uninstall: an id need not be discovered
    assert recipe_id(str(backends.directories[0].path / "tiny_engine.json")) == "tiny-engine"


def test_model_file_registered_name_bundle_and_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    registry = ModelRegistry(tmp_path / "user_models.json")
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    registry.add("user.m", "tiny-engine", {"main": str(tmp_path / "m.gguf")})
    (tmp_path / "bundle.mlpackage").mkdir()

    f = resolve_model("m.gguf", registry=registry)
    assert f.path == (tmp_path / "m.gguf").resolve() and f.entry is None and f.recipe is None
    assert f.spec().checkpoints["main"] == str(f.path) and f.artifact().names[0] == "m.gguf"
    named = resolve_model("user.m", registry=registry)
    assert named.recipe == "tiny-engine" and named.spec().name == "user.m"
    assert named.backend_source == f'{registry.path} ["user.m"].backend'
    assert resolve_model("bundle.mlpackage", directories=True, registry=registry).path.name == "bundle.mlpackage"
    with pytest.raises(LemonpackError, match="^model path is not a file: bundle.mlpackage$"):
        resolve_model("bundle.mlpackage", registry=registry)
    with pytest.raises(LemonpackError, match="^model file not found: x/nope.gguf$"):
        resolve_model("x/nope.gguf", registry=registry)
    with pytest.raises(LemonpackError, match="no model named 'user.nope'.*registered model named 'user.nope'"):
        resolve_model("user.nope", registry=registry)
