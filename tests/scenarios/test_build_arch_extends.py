"""``lemonpack build`` through the CLI: ``--arch`` matching no override is a usage error
(exit 2, naming the arch and the overrides), and a recipe that ``extends`` another is
packaged with its base chain, found among the given recipes or by discovery."""

from __future__ import annotations

import json
import os
from pathlib import Path

from support.buildkit import blob_json, tags

import pytest
from support.recipes import recipe_doc, write_recipe

pytestmark = pytest.mark.usefixtures("home")  # a private cache and config for every test


def _arch_recipe(tmp_path: Path) -> Path:
    return write_recipe(tmp_path / "arch.json", recipe_doc("arch-demo", display_name="Arch demo", platforms={"linux": {
        "rocm": {"command": "/opt/x", "args": ["--port", "{port}"],
                 "arch": {"gfx1151": {"args": ["--port", "{port}", "--fast"]},
                          "gfx110*": {"args": ["--port", "{port}", "--rdna3"]}}},
        "cpu": {"command": "/opt/x", "args": ["--port", "{port}"]}}}))


def test_arch_matching_no_override_is_a_usage_error_naming_the_overrides(lp, tmp_path):
    out = tmp_path / "out"
    r = lp("build", _arch_recipe(tmp_path), "--out", out, "--arch", "gfx90a")
    assert r.code == 2 and not out.exists(), r
    assert "'gfx90a' matches no arch override" in r.err
    assert "arch-demo:linux/rocm:gfx1151" in r.err and "arch-demo:linux/rocm:gfx110*" in r.err
    # narrowed to blocks without overrides, the message says there are none
    r = lp("build", _arch_recipe(tmp_path), "--out", out, "--accelerator", "cpu", "--arch", "gfx1151")
    assert r.code == 2 and "the chosen blocks declare no arch overrides" in r.err, r
    # a matching arch still builds its override
    r = lp("build", _arch_recipe(tmp_path), "--out", out, "--arch", "gfx1103", "--json")
    assert r.code == 0, r
    assert {t["target"] for t in r.json()["targets"]} == {"linux-rocm-gfx1103", "linux-cpu"}


def _passthrough(rid: str, **fields) -> dict:
    return recipe_doc(rid, display_name=rid, command=f"/opt/{rid}", **fields)


def test_extends_packages_the_base_chain_given_on_the_command_line(lp, tmp_path):
    base = tmp_path / "base.json"
    base.write_text(json.dumps(_passthrough("base-r", recipe_options={"ctx_size": 8192})))
    mid = tmp_path / "mid.json"
    mid.write_text(json.dumps(_passthrough("mid-r", extends="base-r")))
    child = tmp_path / "child.json"
    child.write_text(json.dumps(_passthrough("child-r", extends="mid-r")))
    out = tmp_path / "out"
    r = lp("build", child, mid, base, "--out", out, "--json")
    assert r.code == 0, r
    m = blob_json(out, tags(out)["child-r.linux-cpu"]["digest"])
    layers = [blob_json(out, l["digest"])["recipe"] for l in m["layers"]]
    assert layers == ["child-r", "mid-r", "base-r"]
    assert [l.get("annotations", {}).get("dev.lemonpack.extends-base") for l in m["layers"]] == \
        [None, "mid-r", "base-r"]
    assert m["annotations"]["dev.lemonpack.extends"] == "mid-r"


def test_extends_base_found_by_discovery_as_run_finds_it(lp, tmp_path, monkeypatch):
    backends = tmp_path / "backends"
    backends.mkdir()
    os.chmod(backends, 0o755)
    (backends / "base.json").write_text(json.dumps(_passthrough("disc-base")))
    os.chmod(backends / "base.json", 0o644)
    monkeypatch.setenv("LEMONPACK_BACKENDS_PATH", str(backends))
    child = tmp_path / "child.json"
    child.write_text(json.dumps(_passthrough("disc-child", extends="disc-base")))
    out = tmp_path / "out"
    r = lp("build", child, "--out", out, "--json")
    assert r.code == 0, r
    m = blob_json(out, tags(out)["disc-child.linux-cpu"]["digest"])
    assert [blob_json(out, l["digest"])["recipe"] for l in m["layers"]] == ["disc-child", "disc-base"]
    assert set(r.json()["indexes"]) == {"disc-child"}  # the base is packaged with it, not built


def test_extends_missing_base_is_refused_naming_the_file(lp, tmp_path, monkeypatch):
    monkeypatch.setenv("LEMONPACK_BACKENDS_PATH", str(tmp_path / "nothing"))
    child = tmp_path / "child.json"
    child.write_text(json.dumps(_passthrough("lonely", extends="nowhere")))
    out = tmp_path / "out"
    r = lp("build", child, "--out", out)
    assert r.code == 1 and not out.exists(), r
    assert str(child) in r.err and "'nowhere'" in r.err and "was not found" in r.err
