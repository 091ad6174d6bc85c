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

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "lemonade-examples"


def recipe_doc(rid: str, **extra) -> dict:
    doc = {"recipe": rid, "display_name": f"Recipe {rid}", "api_contract_version": "1",
           "capabilities": ["completion"],
           "platforms": {"linux": {"cpu": {"command": "/opt/engine", "args": ["--port", "{port}"]}}}}
    doc.update(extra)
    return doc


from support.helpers import write_descriptor as write  # noqa: E402


@pytest.fixture
def env(tmp_path, monkeypatch):
    user, system = tmp_path / "user", tmp_path / "system"
    for d in (user, system):
        d.mkdir()
        os.chmod(d, 0o755)
    monkeypatch.setenv("LEMONPACK_BACKENDS_PATH", os.pathsep.join([f"user:{user}", "system", str(system)]))
    monkeypatch.setenv("LEMONPACK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "250")
    return user, system


def test_list_json_has_recipes_and_rejected(env, capsys):
    user, system = env
    shutil.copy(EXAMPLES / "llamacpp_rocm_nightly.json", user / "llamacpp_rocm_nightly.json")
    os.chmod(user / "llamacpp_rocm_nightly.json", 0o644)
    tagged = (EXAMPLES / "dflash_rocm.json").read_text()  # its image digest has 62 hex digits: unpinned
    digest = next(w for w in tagged.split('"') if "@sha256:" in w).split("@sha256:")[1]
    pinned = json.loads(tagged.replace(digest, "ab" * 32))
    write(user, "dflash_rocm.json", pinned)
    write(system, "dflash.json", pinned)
    write(user, "tagged.json", tagged)
    write(user, "builtin.json", recipe_doc("sd-cpp"))
    write(user, "open.json", recipe_doc("open"), mode=0o646)
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


def test_list_table_and_all(env, capsys):
    user, system = env
    write(user, "a.json", recipe_doc("alpha", recipe_options={"x": 1}))
    write(user, "b.json", recipe_doc("beta", extends="alpha"))
    write(user, "c.json", recipe_doc("kokoro"))
    assert main(["backends", "list"]) == 0
    out, err = capsys.readouterr()
    assert "alpha" in out and "beta" in out and "extends alpha" in out and "kokoro" not in out
    assert "1 descriptor rejected" in err and "--all" in err
    assert main(["backends", "list", "--all"]) == 0
    out, err = capsys.readouterr()
    assert "c.json" in out and "builtin-collision" in out and "collides with a built-in" in out
    assert err == ""


def test_empty_search_path(env, capsys, monkeypatch):
    monkeypatch.setenv("LEMONPACK_BACKENDS_PATH", "")
    assert main(["backends", "list"]) == 0
    assert "no external recipes found (LEMONPACK_BACKENDS_PATH is set but empty: no directory was searched)" in \
        capsys.readouterr().out


def test_nothing_found_names_the_searched_directories(env, capsys, monkeypatch, tmp_path):
    user, system = env
    assert main(["backends", "list"]) == 0
    out = capsys.readouterr().out
    assert "no external recipes found in the directories LEMONPACK_BACKENDS_PATH names" in out
    assert f"user: {user}" in out and f"system: {system}" in out
    monkeypatch.delenv("LEMONPACK_BACKENDS_PATH")
    assert main(["backends", "list"]) == 0
    out = capsys.readouterr().out
    assert "default search path" in out and "LEMONPACK_BACKENDS_PATH replaces it" in out
    assert f"user: {tmp_path / 'config' / 'backends'}" in out and "system: /etc/lemonpack/backends" in out


def test_help_documents_the_search_path(env):
    proc = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", "backends", "list",
                           "--help"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"},
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "highest priority first" in text and "/usr/share/lemonpack/backends" in text
    assert "LEMONPACK_BACKENDS_PATH replaces the whole list" in text and "user:DIR, system:DIR or DIR" in text


def test_subprocess_json(env):
    user, _ = env
    write(user, "a.json", recipe_doc("alpha"))
    proc = subprocess.run(["lemonpack", "backends", "list", "--all", "--json"], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [r["recipe"] for r in json.loads(proc.stdout)["recipes"]] == ["alpha"]
