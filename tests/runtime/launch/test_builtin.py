"""The built-in launch-plan seam and variant_of plans (RFC sections 7 and 9)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from lemonpack.contract import HostFacts, HealthProbe, load_recipe_text
from lemonpack.contract.builtins import LAUNCH_PLAN_BUILTINS
from lemonpack.errors import LemonpackError, TokenError
from lemonpack.runtime.launch.build import build_launch_plan
from lemonpack.runtime.launch.modelfiles import MissingBinaryError, ModelSpec
from lemonpack.runtime.launch.builtin import (
    LAUNCH_PLANS, BuiltinInputs, UnsupportedBuiltinError, builtin_plan)

ROCM = HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1151")
INPUTS = BuiltinInputs(model_path="/m/main.gguf", port="8001", host="127.0.0.1", ctx_size="4096")


def install(cache: Path, recipe: str, binary: str = "llama-server", mode: int = 0o755) -> Path:
    """A real executable file at ``<cache>/external/<recipe>/<binary>``."""
    d = cache / "external" / recipe
    d.mkdir(parents=True, exist_ok=True)
    exe = d / binary
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(mode)
    return exe


def variant(builtin="llamacpp", *, block=None, top=None, caps=("chat_completion", "completion")):
    blk = {"binary": "llama-server", **(block or {})}
    # without a sha256 the binary is the user's own, unpinned (the normative schema requires
    # a sha256 for a pinned variant_of)
    unpinned = {} if "sha256" in (top or {}) else {"version_policy": "roll_forward"}
    doc = {"recipe": "fork", "display_name": "Fork", "api_contract_version": "1", "variant_of": builtin,
           **unpinned, "capabilities": list(caps), "platforms": {"linux": {"rocm": blk}}, **(top or {})}
    return load_recipe_text(json.dumps(doc))


@pytest.fixture
def model(tmp_path: Path) -> ModelSpec:
    d = tmp_path / "models"
    d.mkdir()
    for name in ("main.gguf", "mmproj.gguf"):
        (d / name).write_bytes(b"GGUF")
    return ModelSpec("user.m", {"main": str(d / "main.gguf")}, model_dir=str(d))


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def plan(r, m, cache, host=ROCM, **kw):
    return build_launch_plan(r, m, host, port=8001, cache_root=cache, environ={}, **kw)


# ---------------------------------------------------------------- the seam itself

def test_the_three_builtins_expose_a_plan():
    assert tuple(LAUNCH_PLANS) == LAUNCH_PLAN_BUILTINS == ("llamacpp", "whispercpp", "sd-cpp")


def test_llamacpp_plan():
    p = builtin_plan("llamacpp", INPUTS)
    assert p.executable == "llama-server"
    assert p.argv == ("llama-server", "-m", "/m/main.gguf", "--ctx-size", "4096", "--port", "8001",
                      "--host", "127.0.0.1", "--jinja", "--metrics")
    assert p.health_probe is None and p.working_dir is None and dict(p.env) == {}
    emb = builtin_plan("llamacpp", dataclasses.replace(INPUTS, mode="embeddings", mmproj_path="/m/mm.gguf"))
    assert emb.argv[-3:] == ("--mmproj", "/m/mm.gguf", "--embeddings")
    assert builtin_plan("llamacpp", dataclasses.replace(INPUTS, mode="reranking")).argv[-1] == "--reranking"


def test_whispercpp_plan():
    p = builtin_plan("whispercpp", INPUTS)
    assert p.argv == ("whisper-server", "-m", "/m/main.gguf", "--port", "8001", "--host", "127.0.0.1")


def test_sdcpp_plan_probes_root():
    p = builtin_plan("sd-cpp", INPUTS)
    assert p.argv == ("sd-server", "-m", "/m/main.gguf", "--listen-port", "8001", "--listen-ip", "127.0.0.1")
    assert p.health_probe == HealthProbe(type="http", endpoint="/")


@pytest.mark.parametrize("name", ["flm", "kokoro", "vllm", "my-external"])
def test_other_builtins_are_a_clear_error(name):
    with pytest.raises(UnsupportedBuiltinError, match="llamacpp, whispercpp, sd-cpp"):
        builtin_plan(name, INPUTS)


# ---------------------------------------------------------------- variant_of plans

def test_variant_of_retargets_the_executable_and_appends_argv_extra(model, cache):
    exe = install(cache, "fork")
    r = variant(block={"argv_extra": ["--gpu-layers", "{custom:gpu_layers:-0}"], "env": {"A": "{port}"}})
    p = plan(r, model, cache)
    assert p.executable == str(exe) and p.argv[0] == str(exe)
    assert p.argv[1:] == ("-m", model.checkpoints["main"], "--ctx-size", "4096", "--port", "8001",
                          "--host", "127.0.0.1", "--jinja", "--metrics", "--gpu-layers", "0")
    assert dict(p.env) == {"A": "8001"}
    assert p.platform_path == "platforms.linux.rocm" and p.mode == "chat"
    assert os.access(p.executable, os.X_OK)


def test_variant_of_mmproj_and_modes(model, cache, tmp_path):
    install(cache, "fork")
    mm = ModelSpec("m", {"main": model.checkpoints["main"], "mmproj": str(tmp_path / "models" / "mmproj.gguf")},
                   model_dir=model.model_dir)
    r = variant(caps=("chat_completion", "embeddings", "reranking"),
                top={"capability_enable_args": {"embeddings": ["--pooling", "mean"]}})
    chat = plan(r, mm, cache)
    assert chat.argv[-2:] == ("--mmproj", str(tmp_path / "models" / "mmproj.gguf"))
    emb = plan(r, mm, cache, mode="embeddings")
    assert emb.argv[-5:] == ("--mmproj", str(tmp_path / "models" / "mmproj.gguf"), "--embeddings", "--pooling", "mean")
    assert plan(r, mm, cache, mode="reranking").argv[-1] == "--reranking"


def test_variant_of_custom_args_appended_and_checked_against_block_top_and_builtin(model, cache):
    install(cache, "fork")
    r = variant(block={"reserved_args": ["--n-gpu-layers"]}, top={"reserved_args": ["--threads"]})
    ok = plan(r, dataclasses.replace(model, recipe_options={"custom_args": "--temp 0.2"}), cache)
    assert ok.argv[-2:] == ("--temp", "0.2")
    for bad, flag in (("--n-gpu-layers 9", "--n-gpu-layers"), ("--threads=2", "--threads"),
                      ("--port 1", "--port"), ("-m=/other", "-m"), ("--ctx-size 1", "--ctx-size")):
        with pytest.raises(TokenError, match=f"reserved flag '{flag}'"):
            plan(r, dataclasses.replace(model, recipe_options={"custom_args": bad}), cache)


def test_variant_of_reserved_args_apply_to_custom_args_only(model, cache):
    install(cache, "fork")
    r = variant(block={"argv_extra": ["--threads", "4"], "reserved_args": ["--threads"]})
    assert plan(r, model, cache).argv[-2:] == ("--threads", "4")


def test_variant_of_custom_args_placed_explicitly_in_argv_extra(model, cache):
    install(cache, "fork")
    r = variant(block={"argv_extra": ["{custom_args}", "--last"]})
    p = plan(r, dataclasses.replace(model, recipe_options={"custom_args": ["--temp", "1"]}), cache)
    assert p.argv[-3:] == ("--temp", "1", "--last")
    assert p.argv.count("--temp") == 1


def test_variant_of_whispercpp_and_sdcpp(model, cache):
    install(cache, "fork", "whisper-server")
    r = variant("whispercpp", block={"binary": "whisper-server"}, caps=("transcription",))
    p = plan(r, model, cache)
    assert p.argv[1:] == ("-m", model.checkpoints["main"], "--port", "8001", "--host", "127.0.0.1")
    assert p.health_probe == HealthProbe()

    install(cache, "fork", "sd-server")
    r = variant("sd-cpp", block={"binary": "sd-server"}, caps=("image",))
    p = plan(r, model, cache)
    assert p.argv[1:] == ("-m", model.checkpoints["main"], "--listen-port", "8001", "--listen-ip", "127.0.0.1")
    assert p.health_probe.endpoint == "/" and p.mode == "image"
    declared = variant("sd-cpp", block={"binary": "sd-server"}, caps=("image",),
                       top={"health_probe": {"type": "http", "endpoint": "/ready"}})
    assert plan(declared, model, cache).health_probe.endpoint == "/ready"  # the manifest's own probe wins


def test_variant_of_missing_binary_names_path_and_install(model, cache):
    r = variant()
    expected = cache / "external" / "fork" / "llama-server"
    with pytest.raises(MissingBinaryError, match=f"{expected}.*lemonpack install fork"):
        plan(r, model, cache)
    # run names the recipe the way the user did: a file (quoted for a shell) or an id
    with pytest.raises(MissingBinaryError, match=r"run `lemonpack install '/my recipes/fork\.json'`"):
        plan(r, model, cache, install_ref="/my recipes/fork.json")


def test_variant_of_non_executable_binary(model, cache):
    install(cache, "fork", mode=0o644)
    with pytest.raises(LemonpackError, match="not executable.*lemonpack install fork"):
        plan(variant(), model, cache)


def test_variant_of_missing_main_checkpoint(cache, tmp_path):
    install(cache, "fork")
    m = ModelSpec("m", {"main": str(tmp_path / "absent.gguf")})
    with pytest.raises(LemonpackError, match="checkpoint 'main'.*does not exist"):
        plan(variant(), m, cache)
    with pytest.raises(TokenError, match="no checkpoint 'main'"):
        plan(variant(), ModelSpec("m", {"other": str(tmp_path / "x")}), cache)


def test_variant_of_unsupported_builtin_in_a_recipe(model, cache):
    # the loader already refuses such a recipe; the runtime refuses it again by itself
    r = dataclasses.replace(variant(), variant_of="kokoro")
    install(cache, "fork")
    with pytest.raises(UnsupportedBuiltinError, match="'kokoro'.*llamacpp, whispercpp, sd-cpp"):
        plan(r, model, cache)


def test_variant_of_env_merge_plan_then_manifest(model, cache):
    install(cache, "fork")
    r = variant(block={"env": {"HSA_OVERRIDE_GFX_VERSION": "11.5.1", "ROCR": "{rocr_visible_devices}"}})
    p = plan(r, model, cache)
    assert dict(p.env) == {"HSA_OVERRIDE_GFX_VERSION": "11.5.1", "ROCR": "0"}
    assert p.container_name is None and p.container_runtime is None


def test_installed_artifact_must_match_the_pin_of_the_recipe(model, cache):
    install(cache, "fork")
    old, new = "1" * 64, "2" * 64
    record = cache / "external" / "fork.install.json"
    record.write_text(json.dumps({"recipe": "fork", "sha256": f"sha256:{old}"}))
    pinned = variant(top={"source": "https://example.invalid/f.tar.gz", "sha256": f"sha256:{new}"})
    with pytest.raises(MissingBinaryError, match=f"has sha256:{old}.*pins sha256:{new}.*lemonpack install fork"):
        plan(pinned, model, cache)
    record.write_text(json.dumps({"recipe": "fork", "sha256": f"sha256:{new}"}))
    assert plan(pinned, model, cache).executable.endswith("llama-server")
    record.unlink()  # no record: a user-provided binary, not checked
    assert plan(pinned, model, cache).executable.endswith("llama-server")
