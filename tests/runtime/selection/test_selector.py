"""The backend selector (seed 001 section 2.3 applied to recipes): the whole resolution table.

The decision is pure: recipes are real validated recipes, the host is a :class:`HostFacts`
and presence facts are passed in. The fact gathering (binaries, commands, images, model
bundles) is tested against real files and the real podman.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat

import pytest

from lemonpack.contract.host import HostFacts
from lemonpack.runtime.selection.selector import (BUILTIN_DEFAULT, BackendSelectionError, ModelArtifact, Presence,
                                                  RANK_KEY, SERVES_KEY, host_block, model_artifact, select_backend)

from support.recipes import load_doc, recipe_doc

CPU_HOST = HostFacts("linux", frozenset({"cpu"}))
ROCM_HOST = HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1151")
GGUF = ModelArtifact("/models/qwen.gguf", ("qwen.gguf",))
LITERT = ModelArtifact("/models/gemma.litertlm", ("gemma.litertlm",))


def recipe(rid: str, *, rank=None, serves=("*.gguf",), platforms=None, variant_of=None):
    """A loaded recipe with the selector's extension keys: ``serves`` patterns and ``rank``."""
    ext = {}
    if serves is not None:
        ext[SERVES_KEY] = list(serves)
    if rank is not None:
        ext[RANK_KEY] = rank
    variant = {"binary": "llama-server", "variant_of": variant_of, "version_policy": "roll_forward"} if variant_of else {}
    return load_doc(recipe_doc(rid, command=f"/opt/{rid}/server", platforms=platforms, extensions=ext, **variant),
                    f"{rid}.json")


def present(*recipes, absent=()):
    return {r.recipe: Presence(r.recipe not in absent, f"command /opt/{r.recipe}/server") for r in recipes}


# --- the resolution table -------------------------------------------------------------------
# Each row: candidates (id, rank, kind), override, expected (outcome, recipe-or-error-kind).
# kind: ok | noblock (no block for the host) | absent (artifact missing) | unprobed (no presence
# fact) | noserve (patterns do not match) | undeclared (no serves key) | badrank.

def build(rows):
    recs, absent, unprobed = [], set(), set()
    for rid, rank, kind in rows:
        kw = {}
        if kind == "noblock":
            kw["platforms"] = {"linux": {"rocm": {"command": "/x", "args": []}}}
        if kind == "noserve":
            kw["serves"] = ("*.litertlm", "*.mlpackage")
        if kind == "undeclared":
            kw["serves"] = None
        if kind == "badrank":
            rank = "high"
        r = recipe(rid, rank=rank, **kw)
        recs.append(r)
        if kind == "absent":
            absent.add(rid)
        if kind == "unprobed":
            unprobed.add(rid)
    facts = {k: v for k, v in present(*recs, absent=absent).items() if k not in unprobed}
    return recs, facts


AUTO = [
    ("no candidates", [], ("default", None)),
    ("one rank-0 recipe beats the default", [("aa", None, "ok")], ("recipe", "aa")),
    ("a negative rank still beats the default", [("aa", -3, "ok")], ("recipe", "aa")),
    ("highest rank wins", [("aa", 1, "ok"), ("bb", 5, "ok"), ("cc", 2, "ok")], ("recipe", "bb")),
    ("tie goes to the first discovered", [("bb", 3, "ok"), ("aa", 3, "ok")], ("recipe", "bb")),
    ("tie, other order", [("aa", 3, "ok"), ("bb", 3, "ok")], ("recipe", "aa")),
    ("tie below a higher rank", [("aa", 3, "ok"), ("bb", 3, "ok"), ("cc", 4, "ok")], ("recipe", "cc")),
    ("higher rank without a host block loses", [("aa", 1, "ok"), ("bb", 9, "noblock")], ("recipe", "aa")),
    ("higher rank with its artifact absent loses", [("aa", 1, "ok"), ("bb", 9, "absent")], ("recipe", "aa")),
    ("higher rank never probed loses", [("aa", 1, "ok"), ("bb", 9, "unprobed")], ("recipe", "aa")),
    ("higher rank that cannot serve loses", [("aa", 1, "ok"), ("bb", 9, "noserve")], ("recipe", "aa")),
    ("a recipe declaring no serves key loses", [("aa", 0, "ok"), ("bb", 9, "undeclared")], ("recipe", "aa")),
    ("a malformed rank disqualifies", [("aa", 0, "ok"), ("bb", None, "badrank")], ("recipe", "aa")),
    ("none qualifies: the default", [("aa", 9, "noblock"), ("bb", 9, "absent"), ("cc", 9, "noserve")],
     ("default", None)),
]


@pytest.mark.parametrize("rows,expected", [(r, e) for _, r, e in AUTO], ids=[n for n, _, _ in AUTO])
@pytest.mark.parametrize("override", [None, "", "   "], ids=["unset", "empty", "blank"])
def test_auto_selection(rows, expected, override):
    recs, facts = build(rows)
    sel = select_backend(GGUF, recs, CPU_HOST, facts, override=override)
    assert (sel.outcome, sel.recipe) == expected
    assert sel.error is None and sel.ok and sel.override is None
    assert [c.recipe for c in sel.candidates] == [r.recipe for r in recs]
    assert [c.taken for c in sel.candidates] == [r.recipe == expected[1] for r in recs]
    assert sel.require() is sel


OVERRIDE_ROWS = [("aa", 1, "ok"), ("bb", 9, "ok"), ("nob", 20, "noblock"), ("abs", 20, "absent"),
                 ("unp", 20, "unprobed"), ("nos", 20, "noserve"), ("und", 20, "undeclared"),
                 ("bad", None, "badrank")]

OVERRIDES = [
    ("llamacpp", ("default", None, None)),
    ("LLAMA.CPP", ("default", None, None)),
    ("llama-cpp", ("default", None, None)),
    (" LlamaCpp ", ("default", None, None)),
    ("aa", ("recipe", "aa", None)),  # a lower rank, forced
    ("AA", ("recipe", "aa", None)),  # case-insensitive
    ("bb", ("recipe", "bb", None)),
    ("nope", ("error", None, "unknown")),
    ("llama", ("error", None, "unknown")),
    ("nob", ("error", None, "unavailable")),
    ("ABS", ("error", None, "unavailable")),
    ("unp", ("error", None, "unavailable")),
    ("nos", ("error", None, "cannot-serve")),
    ("und", ("error", None, "cannot-serve")),
    ("bad", ("error", None, "cannot-serve")),
]


@pytest.mark.parametrize("name,expected", OVERRIDES, ids=[n.strip() or n for n, _ in OVERRIDES])
@pytest.mark.parametrize("source", [None, "user_models.json backend"])
def test_override(name, expected, source):
    recs, facts = build(OVERRIDE_ROWS)
    sel = select_backend(GGUF, recs, CPU_HOST, facts, override=name, override_source=source)
    assert (sel.outcome, sel.recipe, sel.error) == expected
    assert sel.override == name.strip()
    src = source or "LEMONPACK_BACKEND"
    assert sel.override_source == src and sel.message.startswith(f"{src}={name.strip()}")
    if sel.outcome == "error":
        assert not sel.ok
        assert {"unknown": "unknown backend", "unavailable": "is unavailable",
                "cannot-serve": "cannot serve"}[sel.error] in sel.message
        with pytest.raises(BackendSelectionError, match=sel.error.replace("-", " ")):
            sel.require()
        assert not any(c.taken for c in sel.candidates)
    else:
        assert sel.require() is sel
        assert [c.recipe for c in sel.candidates if c.taken] == ([sel.recipe] if sel.recipe else [])


def test_unknown_override_lists_the_known_names():
    recs, facts = build([("aa", 1, "ok"), ("bb", 2, "ok")])
    sel = select_backend(GGUF, recs, CPU_HOST, facts, override="zzz")
    assert sel.error == "unknown" and "known: aa, bb, llamacpp" in sel.message


def test_reasons_name_what_was_checked():
    recs, facts = build([("aa", 1, "ok"), ("bb", 1, "ok"), ("nob", 9, "noblock"), ("abs", 9, "absent"),
                         ("nos", 9, "noserve"), ("cc", 0, "ok")])
    sel = select_backend(GGUF, recs, CPU_HOST, facts)
    by = {c.recipe: c for c in sel.candidates}
    assert sel.recipe == "aa"
    assert by["aa"].why == "highest rank (1) among qualifying recipes"
    assert by["aa"].available_reason == "platforms.linux.cpu: command /opt/aa/server is present"
    assert by["aa"].serve_reason == "qwen.gguf matches *.gguf"
    assert by["bb"].why == "same rank (1) as aa, discovered later"
    assert by["cc"].why == "lower rank (0 < 1)"
    assert by["nob"].why == "not available" and "no linux block for an accelerator this host has" in \
        by["nob"].available_reason and by["nob"].can_serve is None
    assert by["abs"].available_reason == "platforms.linux.cpu: command /opt/abs/server is not present"
    assert by["nos"].why == "cannot serve the model"
    assert by["nos"].serve_reason == "qwen.gguf matches none of *.litertlm, *.mlpackage"


def test_selection_is_frozen_and_serialisable():
    recs, facts = build([("aa", 1, "ok")])
    sel = select_backend(GGUF, recs, CPU_HOST, facts)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sel.recipe = "bb"  # type: ignore[misc]
    doc = json.loads(json.dumps(sel.to_json()))
    assert doc["outcome"] == "recipe" and doc["recipe"] == "aa" and doc["default"] == "llamacpp"
    assert doc["candidates"][0]["taken"] is True


def test_artifact_patterns_are_case_insensitive_and_any_name_matches():
    r = recipe("lite", serves=("*.litertlm",))
    assert select_backend(LITERT, [r], CPU_HOST, present(r)).recipe == "lite"
    upper = ModelArtifact("/m/G.LITERTLM", ("G.LITERTLM",))
    assert select_backend(upper, [r], CPU_HOST, present(r)).recipe == "lite"
    assert select_backend(GGUF, [r], CPU_HOST, present(r)).outcome == "default"
    bundle = ModelArtifact("/m/bundle", ("bundle", "config.json", "text.mlpackage"))
    ml = recipe("ml", serves=("*.mlpackage", "*.mlmodelc"))
    assert select_backend(bundle, [r, ml], CPU_HOST, present(r, ml)).recipe == "ml"


@pytest.mark.parametrize("value", [[], "*.gguf", [""], ["a/*.gguf"], [3]])
def test_malformed_serves_cannot_serve_and_names_the_key(value):
    r = load_doc(recipe_doc("odd", command="/x", args=[], extensions={SERVES_KEY: value}), "odd.json")
    sel = select_backend(GGUF, [r], CPU_HOST, present(r), override="odd")
    assert sel.error == "cannot-serve" and f'odd.json: extensions["{SERVES_KEY}"]' in sel.message


@pytest.mark.parametrize("rank", [True, 1.5, "3", None])
def test_malformed_rank_names_the_key(rank):
    r = load_doc(recipe_doc("odd", command="/x", args=[], extensions={SERVES_KEY: ["*.gguf"], RANK_KEY: rank}),
                 "odd.json")
    sel = select_backend(GGUF, [r], CPU_HOST, present(r))
    assert sel.outcome == "default"
    assert f'extensions["{RANK_KEY}"] must be an integer' in sel.candidates[0].serve_reason


def test_host_block_uses_section_9_and_skips_accelerators_the_host_lacks():
    plat = {"linux": {"rocm": {"command": "/r", "args": [], "arch": {"gfx115*": {"command": "/r115"}}},
                      "cpu": {"command": "/c", "args": []}},
            "darwin": {"metal": {"command": "/m", "args": []}}}
    r = recipe("multi", platforms=plat)
    assert host_block(r, ROCM_HOST).path == "platforms.linux.rocm.arch.gfx115*"
    assert host_block(r, CPU_HOST).path == "platforms.linux.cpu"
    assert host_block(r, HostFacts("darwin", frozenset({"cpu", "metal"}))).path == "platforms.darwin.metal"
    assert "no platform block for windows" in host_block(r, HostFacts("windows"))
    # default_accelerator names a block the host lacks: another block the host has is used
    doc = json.loads(r.canonical)
    doc["default_accelerator"] = "rocm"
    r2 = load_doc(doc, "multi.json")
    assert host_block(r2, CPU_HOST).path == "platforms.linux.cpu"
    rocm_only = recipe("ro", platforms={"linux": {"rocm": {"command": "/r", "args": []}}})
    sel = select_backend(GGUF, [rocm_only], ROCM_HOST, present(rocm_only))
    assert sel.recipe == "ro"
    assert select_backend(GGUF, [rocm_only], CPU_HOST, present(rocm_only)).outcome == "default"


def test_default_is_injectable():
    from lemonpack.runtime.selection.selector import DefaultBackend

    d = DefaultBackend("whispercpp", ("whisper.cpp",), "the built-in whisper.cpp")
    r = recipe("aa")
    sel = select_backend(GGUF, [r], CPU_HOST, present(r), override="Whisper.CPP", default=d)
    assert sel.outcome == "default" and sel.default is d
    assert select_backend(GGUF, [r], CPU_HOST, present(r), override="llamacpp", default=d).error == "unknown"
    assert BUILTIN_DEFAULT.matches("LLAMA.CPP") and not BUILTIN_DEFAULT.matches("llama")


# --- gathering facts (real files, real podman) ----------------------------------------------


def test_model_artifact_names(tmp_path):
    f = tmp_path / "Qwen.Q4.gguf"
    f.write_bytes(b"GGUF")
    assert model_artifact("x", str(f)) == ModelArtifact("x", ("Qwen.Q4.gguf",))
    bundle = tmp_path / "gemma"
    (bundle / "text.mlpackage").mkdir(parents=True)
    (bundle / "manifest.json").write_text("{}")
    assert model_artifact("user.g", str(bundle)).names == ("gemma", "manifest.json", "text.mlpackage")
    assert model_artifact("user.h", "org/repo:sub/model.litertlm").names == ("model.litertlm",)
    assert stat.S_ISDIR(os.stat(bundle).st_mode)


def test_serving_recipe_is_serves_rule_for_registered_models_and_files():
    """The recipe that serves a model (lemonpack serve's catalog; lemonpack select reports it):
    a registered model keeps its recipe unless an override selected one; a file gets the
    selected recipe, or the first discovered recipe the default names."""
    a, b = recipe("eng-a", rank=1), recipe("eng-b", rank=2)
    picked = select_backend(GGUF, [a, b], CPU_HOST, present(a, b))
    assert picked.outcome == "recipe" and picked.recipe == "eng-b"
    assert picked.serving_recipe("registered", ()) == "registered"  # no override: the registration wins
    assert picked.serving_recipe(None, ["eng-a", "eng-b"]) == "eng-b"
    forced = select_backend(GGUF, [a, b], CPU_HOST, present(a, b), override="eng-a")
    assert forced.serving_recipe("registered", ()) == "eng-a"
    default = select_backend(LITERT, [a, b], CPU_HOST, present(a, b))
    assert default.outcome == "default"
    assert default.serving_recipe(None, ["eng-a", "llamacpp"]) == "llamacpp"
    assert default.serving_recipe(None, ["eng-a"]) is None
    assert default.serving_recipe("registered", ()) == "registered"
    broken = select_backend(GGUF, [a, b], CPU_HOST, present(a, b), override="nope")
    assert broken.outcome == "error" and broken.serving_recipe(None, ["eng-a"]) is None
