"""Every spelling of every flag a built-in launch plan sets or reserves is refused in
``{custom_args}`` (RFC section 4.3, case 09), from the engines' own argument tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lemonpack.contract import HostFacts, load_recipe_text
from lemonpack.errors import TokenError
from lemonpack.runtime.launch.engine_flags import ENGINE_FLAGS, LLAMA_CPP, SD_CPP, WHISPER_CPP, table_for
from lemonpack.runtime.launch.customargs import check_reserved
from lemonpack.runtime.launch.build import build_launch_plan
from lemonpack.runtime.launch.modelfiles import ModelSpec
from lemonpack.runtime.launch.builtin import LAUNCH_PLANS, BuiltinInputs

MODES = {"llamacpp": (None, "chat", "embeddings", "reranking"), "whispercpp": (None,), "sd-cpp": (None,)}


def _inputs(mode):
    return BuiltinInputs(model_path="/m/main.gguf", port="8001", host="127.0.0.1", ctx_size="4096",
                         mode=mode, mmproj_path="/m/mmproj.gguf")


def _plan_reserved(builtin: str) -> list[str]:
    out: list[str] = []
    for mode in MODES[builtin]:
        out += [f for f in LAUNCH_PLANS[builtin](_inputs(mode)).reserved_args if f not in out]
    return out


def _cases():
    """(builtin, reserved flag, spelling) for every spelling of every reserved flag,
    plus the ``=value`` form and, for llama.cpp, the ``_`` form of every long spelling."""
    for builtin, table in ENGINE_FLAGS.items():
        for flag in _plan_reserved(builtin):
            for s in table.spellings_of(flag):
                yield builtin, flag, s
                yield builtin, flag, s + "=x"
                if table.underscore_long and s.startswith("--") and "-" in s[2:]:
                    yield builtin, flag, "--" + s[2:].replace("-", "_")


CASES = list(_cases())


@pytest.mark.parametrize("builtin, flag, spelling", CASES, ids=[f"{b}:{f}:{s}" for b, f, s in CASES])
def test_every_spelling_of_every_reserved_flag_is_refused(builtin, flag, spelling):
    with pytest.raises(TokenError) as e:
        check_reserved([spelling, "v"], (flag,), ENGINE_FLAGS[builtin])
    msg = str(e.value)
    assert f"custom_args element {spelling!r}" in msg and f"reserved flag {flag!r}" in msg


def test_the_tables_cover_the_aliases_the_issue_names():
    """The spellings case 09 and the engines' tables give (not only the plan's text)."""
    assert {"-mm", "--mmproj", "-mmu", "--mmproj-url", "--no-mmproj", "--no-mmproj-auto", "-hf"} <= set(
        LLAMA_CPP.spellings_of("--mmproj"))
    assert {"--embedding", "--embeddings", "--reranking", "--rerank", "--embd-gemma-default"} <= set(
        LLAMA_CPP.spellings_of("--embeddings"))
    assert {"-m", "--model", "-hf", "-hfr", "--hf-repo", "-mu", "--model-url", "-dr", "--docker-repo",
            "--gpt-oss-20b-default"} <= set(LLAMA_CPP.spellings_of("-m"))
    assert {"--port", "--fim-qwen-7b-default"} <= set(LLAMA_CPP.spellings_of("--port"))
    assert {"--jinja", "--no-jinja"} <= set(LLAMA_CPP.spellings_of("--jinja"))
    assert set(SD_CPP.spellings_of("--listen-ip")) == {"-l", "--listen-ip"}
    assert set(WHISPER_CPP.spellings_of("--model")) == {"-m", "--model"}


@pytest.mark.parametrize("builtin", sorted(LAUNCH_PLANS))
def test_every_flag_a_plan_sets_is_reserved_and_known_to_its_table(builtin):
    table = ENGINE_FLAGS[builtin]
    for mode in MODES[builtin]:
        plan = LAUNCH_PLANS[builtin](_inputs(mode))
        set_flags = [a for a in plan.argv[1:] if a.startswith("-")]
        assert set(set_flags) <= set(plan.reserved_args), (mode, set_flags)
        for flag in plan.reserved_args:
            assert table.option(flag) is not None, f"{builtin} reserves {flag!r}, unknown to {table.source}"


@pytest.mark.parametrize("builtin, args", [
    ("llamacpp", ["--no-host"]),              # bypass host buffer, not --host
    ("llamacpp", ["-mg", "0"]),               # --main-gpu begins with -m
    ("llamacpp", ["-md", "/d.gguf"]),         # the draft model, not the model
    ("llamacpp", ["--mmproj-offload", "--no-mmproj-offload"]),
    ("llamacpp", ["-ngl", "99", "--temp", "0.2", "--portable"]),
    ("llamacpp", ["--pooling", "mean"]),      # free unless the plan reranks
    ("whispercpp", ["-p", "4"]),              # --processors in whisper-server
    ("sd-cpp", ["-t", "4", "-v"]),
])
def test_unrelated_flags_pass(builtin, args):
    check_reserved(args, _plan_reserved_for_mode(builtin, None), ENGINE_FLAGS[builtin])


def _plan_reserved_for_mode(builtin, mode):
    return LAUNCH_PLANS[builtin](_inputs(mode)).reserved_args


def test_pooling_is_reserved_only_when_the_plan_reranks():
    check_reserved(["--pooling", "cls"], _plan_reserved_for_mode("llamacpp", "embeddings"), LLAMA_CPP)
    with pytest.raises(TokenError, match="reserved flag '--pooling'"):
        check_reserved(["--pooling", "cls"], _plan_reserved_for_mode("llamacpp", "reranking"), LLAMA_CPP)


def test_manifest_reserved_flags_get_the_engines_aliases_too():
    with pytest.raises(TokenError, match=r"'-ngl' overrides the reserved flag '--n-gpu-layers': '-ngl' is an alias"):
        check_reserved(["-ngl", "9"], ("--n-gpu-layers",), LLAMA_CPP)
    with pytest.raises(TokenError, match="'-nocb' is a negation of '-cb'"):
        check_reserved(["-nocb"], ("-cb",), LLAMA_CPP)
    # A flag the table does not know stands for itself (exact and =value).
    with pytest.raises(TokenError, match="reserved flag '--fork-only'"):
        check_reserved(["--fork_only=1"], ("--fork-only",), LLAMA_CPP)
    check_reserved(["--fork-onl"], ("--fork-only",), LLAMA_CPP)


def test_table_for_variant_or_binary_name():
    assert table_for("llamacpp") is LLAMA_CPP and table_for("whispercpp") is WHISPER_CPP
    assert table_for(None, "/opt/x/sd-server") is SD_CPP and table_for(None, "podman") is None
    assert table_for("some-external", None) is None


def _variant(builtin, binary, reserved):
    doc = {"recipe": "fork", "display_name": "Fork", "api_contract_version": "1", "variant_of": builtin, "version_policy": "roll_forward",
           "capabilities": ["chat_completion"],
           "platforms": {"linux": {"cpu": {"binary": binary, "reserved_args": reserved}}}}
    return load_recipe_text(json.dumps(doc))


@pytest.mark.parametrize("custom, named, how", [
    ("-mm x", "--mmproj", "an alias of '--mmproj' in llama.cpp"),
    ("--embedding", "--embeddings", "an alias of '--embeddings' in llama.cpp"),
    ("--no-jinja", "--jinja", "a negation of '--jinja' in llama.cpp"),
    ("--ctx_size 8", "--ctx-size", "llama.cpp's spelling of '--ctx-size'"),
    ("-hf a/b", "-m", "a llama.cpp option that also sets 'model', which '-m' sets"),
    ("--gpt-oss-20b-default", "--port", "also sets 'port'"),  # the manifest's --port comes first
])
def test_build_launch_plan_refuses_aliases_naming_the_plan_flag(tmp_path: Path, custom, named, how):
    """Case 09's recipe: manifest reserves --port --host -m; the plan adds the rest."""
    exe = tmp_path / "cache" / "external" / "fork" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    r = _variant("llamacpp", "llama-server", ["--port", "--host", "-m"])
    model = ModelSpec("m", {"main": str(tmp_path / "m.gguf")}, recipe_options={"custom_args": custom})
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    with pytest.raises(TokenError) as e:
        build_launch_plan(r, model, HostFacts("linux", frozenset({"cpu"})), port=8001, cache_root=tmp_path / "cache")
    msg = str(e.value)
    assert f"overrides the reserved flag {named!r}" in msg and how in msg
    ok = ModelSpec("m", {"main": str(tmp_path / "m.gguf")}, recipe_options={"custom_args": "-mg 0 --no-host"})
    p = build_launch_plan(r, ok, HostFacts("linux", frozenset({"cpu"})), port=8001, cache_root=tmp_path / "cache")
    assert p.argv[-3:] == ("-mg", "0", "--no-host")


def test_plain_recipe_running_a_known_engine_binary_gets_its_table(tmp_path):
    doc = {"recipe": "plain", "display_name": "Plain", "api_contract_version": "1",
           "capabilities": ["chat_completion"],
           "platforms": {"linux": {"cpu": {"command": str(tmp_path / "llama-server"),
                                           "args": ["--port", "{port}", "{custom_args}"],
                                           "reserved_args": ["--port"]}}}}
    r = load_recipe_text(json.dumps(doc))
    model = ModelSpec("m", recipe_options={"custom_args": "--port_x"})
    p = build_launch_plan(r, model, HostFacts("linux", frozenset({"cpu"})), port=8001)
    assert p.argv[-1] == "--port_x"
    with pytest.raises(TokenError, match="reserved flag '--mmproj'"):
        doc["platforms"]["linux"]["cpu"]["reserved_args"] = ["--mmproj"]
        build_launch_plan(load_recipe_text(json.dumps(doc)), ModelSpec("m", recipe_options={"custom_args": "-mm x"}),
                          HostFacts("linux", frozenset({"cpu"})), port=8001)
