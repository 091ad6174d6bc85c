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
    with pytest.raises(LemonpackError, match="^no model file or registered model named 'user.nope' in "):
        resolve_model("user.nope", registry=registry)


# --- oci:// checkpoints against the real registry (issue 23, point 3) -----------------------------

@pytest.fixture
def pushed(registry, tmp_path):
    """The tiny llama GGUF pushed as a ModelPack artifact: ``(oci://HOST/REPO@DIGEST, local file, store)``."""
    from lemonpack.runtime.models.push import push_model
    from lemonpack.runtime.models.store import ModelStore
    from support.llama_server import write_tiny_gguf

    (tmp_path / "src").mkdir()
    gguf = write_tiny_gguf(tmp_path / "src" / "tiny.gguf")
    got = push_model([gguf], f"{registry.host}/models/tiny:v1")
    return f"oci://{registry.host}/models/tiny@{got.digest}", gguf, ModelStore(tmp_path / "store")


def _recipe(management: str = "lemond_managed"):
    from lemonpack.contract import load_recipe_text

    doc = dict(RECIPE, model_management=management)
    return load_recipe_text(json.dumps(doc), "/etc/lemonpack/backends/tiny_engine.json")


def _store_files(store) -> list:
    return sorted(p for p in store.root.rglob("*") if p.is_file()) if store.root.exists() else []


def test_an_oci_checkpoint_is_pulled_on_first_use_and_launched_from_the_store(pushed):
    from lemonpack.runtime.launch.modelfiles import ModelSpec
    from lemonpack.runtime.models.ref import fetch_checkpoints

    ref, gguf, store = pushed
    spec = ModelSpec(name="user.tiny", checkpoints={"main": ref}, recipe_options={"ctx_size": 256})
    with pytest.raises(LemonpackError, match="--offline forbids fetching it.*lemonpack models pull"):
        fetch_checkpoints(spec, _recipe(), offline=True, store=store)
    assert not [p for p in _store_files(store) if "blobs" in p.parts]  # offline: nothing fetched
    got = fetch_checkpoints(spec, _recipe(), store=store)
    main = got.checkpoints["main"]
    assert main.startswith(str(store.root)) and os.path.basename(main) == "tiny.gguf"
    assert open(main, "rb").read() == gguf.read_bytes() and got.model_dir == os.path.dirname(main)
    assert got.recipe_options == spec.recipe_options
    # a second use, offline, comes from the store
    assert fetch_checkpoints(spec, _recipe(), offline=True, store=store).checkpoints["main"] == main


def test_a_self_managed_recipe_is_never_prefetched(pushed):
    from lemonpack.runtime.launch.modelfiles import ModelSpec
    from lemonpack.runtime.models.ref import fetch_checkpoints

    ref, _gguf, store = pushed
    spec = ModelSpec(name="user.tiny", checkpoints={"main": ref})
    assert fetch_checkpoints(spec, _recipe("self_managed"), store=store) is spec
    assert _store_files(store) == []


def test_the_memory_estimate_is_read_from_the_header_before_the_weights(registry, tmp_path):
    from lemonpack.runtime.models.memory import estimate_model
    from lemonpack.runtime.models.push import push_model
    from lemonpack.runtime.models.ref import oci_estimate
    from lemonpack.runtime.models.store import ModelStore
    from support.gguf_files import write_gguf

    gguf = write_gguf(tmp_path / "big.gguf", "llama", {"llama.block_count": 2, "llama.embedding_length": 64,
                                                        "llama.attention.head_count": 4},
                      {"token_embd.weight": [64, 32768]})  # 8 MiB of weights after a header of a few hundred bytes
    ref = f"oci://{registry.host}/models/big@{push_model([gguf], f'{registry.host}/models/big:v1').digest}"
    store = ModelStore(tmp_path / "store")
    assert oci_estimate(ref, 256, offline=True, store=store) is None  # offline and never pulled: unknown
    est = oci_estimate(ref, 256, store=store)
    assert est == estimate_model(str(gguf), 256) and est.kv > 0
    fetched = sum(p.stat().st_size for p in _store_files(store))
    assert fetched < gguf.stat().st_size / 4, fetched  # the header, manifest and config: not the weights


def test_registered_oci_model_resolves_and_kube_gets_its_file_names(pushed, tmp_path):
    from lemonpack.runtime.launch.modelfiles import ModelSpec
    from lemonpack.runtime.models.memory import estimate_model
    from lemonpack.runtime.models.ref import oci_model_facts

    ref, gguf, store = pushed
    reg = ModelRegistry(tmp_path / "user_models.json")
    reg.add("user.tiny", "tiny-engine", {"main": ref})
    named = resolve_model("user.tiny", registry=reg)
    assert named.main == ref and named.spec().checkpoints["main"] == ref
    facts = oci_model_facts(ModelSpec(name="user.tiny", checkpoints={"main": ref}), None, store=store)
    assert dict(facts.files) == {"main": "tiny.gguf"} and facts.memory == estimate_model(str(gguf)).total
    with pytest.raises(LemonpackError, match="not oci:// beside an oci:// main"):
        oci_model_facts(ModelSpec(name="user.tiny", checkpoints={"main": ref, "draft": "/m/d.gguf"}), store=store)


def test_the_selector_sees_the_artifacts_file_names(pushed, tmp_path, monkeypatch):
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    ref, _gguf, _store = pushed
    reg = ModelRegistry(tmp_path / "user_models.json")
    reg.add("user.tiny", "tiny-engine", {"main": ref})
    art = resolve_model("user.tiny", registry=reg).artifact()
    assert art.ref == "user.tiny" and art.names == ("tiny.gguf",)
