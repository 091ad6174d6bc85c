"""``lemonpack backends list`` against real descriptor directories."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lemonpack.cli import main
from support.recipes import recipe_doc, write_recipe

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "lemonade-examples"


@pytest.fixture
def dirs(home):
    """``(user, system)``: the search path's two directories, in that order and scope."""
    user, system = home.root / "user", home.root / "system"
    home.search_path(f"user:{user}", "system", system)
    user.mkdir(mode=0o755)
    return user, system


def test_list_json_has_recipes_and_rejected(dirs, capsys):
    user, system = dirs
    shutil.copy(EXAMPLES / "llamacpp_rocm_nightly.json", user / "llamacpp_rocm_nightly.json")
    os.chmod(user / "llamacpp_rocm_nightly.json", 0o644)
    tagged = (EXAMPLES / "dflash_rocm.json").read_text()  # its image digest has 62 hex digits: unpinned
    digest = next(w for w in tagged.split('"') if "@sha256:" in w).split("@sha256:")[1]
    pinned = json.loads(tagged.replace(digest, "ab" * 32))
    write_recipe(user / "dflash_rocm.json", pinned)
    write_recipe(system / "dflash.json", pinned)
    write_recipe(user / "tagged.json", tagged)
    write_recipe(user / "builtin.json", recipe_doc("sd-cpp", capabilities=["completion"]))
    write_recipe(user / "open.json", recipe_doc("open", capabilities=["completion"]), mode=0o646)
    assert main(["backends", "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["recipe"], r["kind"], r["scope"]) for r in doc["recipes"]] == [
        ("dflash-rocm", "passthrough", "user"), ("llamacpp-rocm-nightly", "variant_of:llamacpp", "user")]
    assert doc["recipes"][0]["file"] == str(user / "dflash_rocm.json")
    kinds = {Path(r["file"]).name: r["kind"] for r in doc["rejected"]}
    assert kinds == {"builtin.json": "builtin-collision", "open.json": "untrusted", "dflash.json": "shadowed",
                     "tagged.json": "unpinned"}
    unpinned = next(r for r in doc["rejected"] if r["kind"] == "unpinned")
    assert unpinned["recipe"] == "dflash-rocm" and unpinned["problems"][0]["rule"] == "digest-pinning"
    assert main(["backends", "list", "--all"]) == 0
    out = capsys.readouterr().out
    assert "tagged.json" in out and "unpinned" in out and "not pinned by digest" in out
    assert all(r["reason"] for r in doc["rejected"])
    assert next(r for r in doc["rejected"] if r["kind"] == "builtin-collision")["problems"][0]["rule"] == \
        "builtin-collision"


def test_list_table_and_all(dirs, capsys):
    user, system = dirs
    write_recipe(user / "a.json", recipe_doc("alpha", capabilities=["completion"], recipe_options={"x": 1}))
    write_recipe(user / "b.json", recipe_doc("beta", capabilities=["completion"], extends="alpha"))
    write_recipe(user / "c.json", recipe_doc("kokoro", capabilities=["completion"]))
    assert main(["backends", "list"]) == 0
    out, err = capsys.readouterr()
    assert "alpha" in out and "beta" in out and "extends alpha" in out and "kokoro" not in out
    assert "1 descriptor rejected" in err and "--all" in err
    assert main(["backends", "list", "--all"]) == 0
    out, err = capsys.readouterr()
    assert "c.json" in out and "builtin-collision" in out and "collides with a built-in" in out
    assert err == ""


def test_empty_search_path(dirs, capsys, monkeypatch):
    monkeypatch.setenv("LEMONPACK_BACKENDS_PATH", "")
    assert main(["backends", "list"]) == 0
    assert "no external recipes found (LEMONPACK_BACKENDS_PATH is set but empty: no directory was searched)" in \
        capsys.readouterr().out


def test_nothing_found_names_the_searched_directories(dirs, capsys, monkeypatch, tmp_path):
    user, system = dirs
    assert main(["backends", "list"]) == 0
    out = capsys.readouterr().out
    assert "no external recipes found in the directories LEMONPACK_BACKENDS_PATH names" in out
    assert f"user: {user}" in out and f"system: {system}" in out
    monkeypatch.delenv("LEMONPACK_BACKENDS_PATH")
    assert main(["backends", "list"]) == 0
    out = capsys.readouterr().out
    assert "default search path" in out and "LEMONPACK_BACKENDS_PATH replaces it" in out
    assert f"user: {tmp_path / 'config' / 'backends'}" in out and "system: /etc/lemonpack/backends" in out


def test_help_documents_the_search_path(dirs):
    proc = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", "backends", "list",
                           "--help"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"},
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "highest priority first" in text and "/usr/share/lemonpack/backends" in text
    assert "LEMONPACK_BACKENDS_PATH replaces the whole list" in text and "user:DIR, system:DIR or DIR" in text


def test_subprocess_json(dirs):
    user, _ = dirs
    write_recipe(user / "a.json", recipe_doc("alpha", capabilities=["completion"]))
    proc = subprocess.run(["lemonpack", "backends", "list", "--all", "--json"], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [r["recipe"] for r in json.loads(proc.stdout)["recipes"]] == ["alpha"]
