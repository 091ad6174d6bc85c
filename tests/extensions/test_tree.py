"""The extension tree shipped in the package (:mod:`lemonpack.extensions.tree`): ``extensions
list``, ``probe`` and ``diagnose`` work outside a checkout (no ``--tree``, any working
directory), the package-data globs cover every file of the tree, and a wheel built from the
sources carries the tree so an installed lemonpack answers from anywhere."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from lemonpack.cli import main
from lemonpack.extensions.tree import SHIPPED_TREE, find_tree
from support.extensions import REPO
from support.gguf_files import GGMLQuantizationType, write_gguf

LOCK = json.loads((REPO / "extensions.lock").read_text())["extensions"]
#: The tree's parts as the repository holds them (what the shipped tree must reproduce).
TREE_PARTS = ("catalogue/extensions", "api", "extensions.lock", "include/gufo/ext",
              "lemonpack/extensions/schema", "lemonpack/extensions/templates.py")


def _files(root: Path, parts=TREE_PARTS) -> set[str]:
    """Every regular file under ``root``'s ``parts`` (symlinks followed), relative to ``root``."""
    out = set()
    for part in parts:
        p = root / part
        if p.is_file():
            out.add(part)
        for d, _, names in os.walk(p, followlinks=True):
            out.update((Path(d) / n).relative_to(root).as_posix() for n in names
                       if (Path(d) / n).is_file() and "__pycache__" not in d)
    return out


def _run(capsys, *args):
    code = main(list(map(str, args)))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_find_tree_is_the_given_tree_else_the_shipped_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_tree() == SHIPPED_TREE and find_tree(tmp_path / "x") == tmp_path / "x"
    assert _files(SHIPPED_TREE) == _files(REPO)  # the same files: the tree is one copy, linked
    for rel in _files(REPO):
        assert (SHIPPED_TREE / rel).read_bytes() == (REPO / rel).read_bytes(), rel


def test_commands_work_from_any_directory_without_tree(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GUFO_EXTENSION_DIRS", raising=False)
    code, out, err = _run(capsys, "extensions", "list", "--json", "--feature", "linux")
    assert code == 0, err
    doc = json.loads(out)
    assert [e["name"] for e in doc["extensions"] if e["official"] and e["selected"]] == LOCK
    assert all(e["path"].startswith(str(SHIPPED_TREE)) for e in doc["extensions"])
    assert _run(capsys, "extensions", "check")[0] == 0
    code, out, _ = _run(capsys, "diagnose", "--json", "--feature", "linux", "--feature", "hip")
    assert code == 0 and [e["name"] for e in json.loads(out)["extensions"]["selected"]] == LOCK
    experts = {"blk.0.ffn_gate_exps.weight": [2048, 768, 64]}
    model = write_gguf(tmp_path / "flash-next.gguf", "qwen4exp", {"qwen4exp.expert_count": 64}, experts,
                       with_data=False, types=dict.fromkeys(experts, GGMLQuantizationType.Q4_K))
    code, out, err = _run(capsys, "probe", model, "--feature", "linux", "--feature", "hip")
    assert code == 0 and "decision: flash-next-q4 (qwen38_flash_next)" in out, out + err


def test_an_explicit_tree_that_is_no_tree_is_named(tmp_path, capsys):
    code, _, err = _run(capsys, "extensions", "list", "--tree", tmp_path)
    assert code == 1 and f"{tmp_path}/api/minor" in err and "--tree" in err and "Traceback" not in err


def test_package_data_globs_cover_every_file_of_the_tree():
    """setuptools expands each package-data pattern with glob(recursive=True) under the
    package directory and keeps the files: every file of the tree must match one."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    pkg = REPO / "lemonpack" / "extensions"
    matched = {Path(f).relative_to(SHIPPED_TREE).as_posix()
               for pattern in data["lemonpack.extensions"]
               for f in glob.glob(str(pkg / pattern), recursive=True) if os.path.isfile(f)
               and Path(f).is_relative_to(SHIPPED_TREE)}
    assert matched == _files(SHIPPED_TREE)


@pytest.mark.slow
def test_a_built_wheel_carries_the_tree_and_answers_from_anywhere(tmp_path):
    """Build a wheel from a copy of the sources (symlinks kept, as git checks them out), put
    only the unpacked wheel on the path, and run the commands from an unrelated directory."""
    src = tmp_path / "src"
    for part in ("pyproject.toml", "README.md", "lemonpack", "catalogue/extensions", "api", "extensions.lock"):
        (src / part).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / part).is_dir():
            shutil.copytree(REPO / part, src / part, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / part, src / part)
    (src / "include").symlink_to("lemonpack/extensions/cxx/include")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    wheel, = (tmp_path / "dist").glob("lemonpack-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {f"lemonpack/extensions/tree/{rel}" for rel in _files(SHIPPED_TREE)}
    assert want <= names, sorted(want - names)
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GUFO_EXTENSION_DIRS")}
    env["PYTHONPATH"] = str(site)
    where = subprocess.run([sys.executable, "-c", "import lemonpack; print(lemonpack.__file__)"], cwd=elsewhere,
                           env=env, capture_output=True, text=True)
    assert where.stdout.strip() == str(site / "lemonpack" / "__init__.py"), where
    out = subprocess.run([sys.executable, "-m", "lemonpack.cli", "extensions", "list", "--json", "--feature", "linux"],
                         cwd=elsewhere, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [e["name"] for e in doc["extensions"] if e["official"] and e["selected"]] == LOCK
    assert all(e["path"].startswith(str(site)) for e in doc["extensions"])
    check = subprocess.run([sys.executable, "-m", "lemonpack.cli", "extensions", "check"], cwd=elsewhere, env=env,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_catalogues_extension_commands_work_outside_a_checkout(tmp_path, capsys, monkeypatch):
    """The install and run commands ``catalogue show`` prints for each official extension of
    the shipped catalogue, run from a directory that is no checkout."""
    import shlex

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GUFO_EXTENSION_DIRS", raising=False)
    shipped = json.loads((REPO / "lemonpack/catalogue/shipped/catalogue.json").read_text())
    entries = [e for e in shipped["entries"] if e["kind"] == "extension"]
    assert sorted(e["name"] for e in entries) == sorted(LOCK)
    for e in entries:
        for which in ("install", "run"):
            argv = shlex.split(e["commands"][which])
            assert argv[0] == "lemonpack"
            code, _, err = _run(capsys, *argv[1:])
            assert code == 0, (e["commands"][which], err)
        assert (tmp_path / "gufo-generated" / "extensions.json").is_file()
