"""Driving the real ``nix`` on flakes: the repo's flake copied into a temp dir, fixture
extension trees, consumer flakes taking it as a ``path:`` input (issue 7, "Nix").

Flakes need a git or ``path:`` source: the tests copy what the flake reads (flake.nix, nix/,
and a tree of extensions) into a temp dir instead of depending on the git state.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import time
from pathlib import Path

from support.tools import need

REPO = Path(__file__).resolve().parents[2]
FLAKE_FLAGS = ["--extra-experimental-features", "nix-command flakes",
               "--option", "substituters", "", "--option", "connect-timeout", "1"]
SYSTEM = {"x86_64": "x86_64-linux", "aarch64": "aarch64-linux"}[platform.machine()]


def nix(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``nix ARGS`` with flakes enabled and no substituters; returns the finished process
    with ``.seconds`` (wall time) added."""
    start = time.monotonic()
    out = subprocess.run([need("nix"), *FLAKE_FLAGS, *args], capture_output=True, text=True, cwd=cwd,
                         timeout=timeout)
    out.seconds = time.monotonic() - start  # type: ignore[attr-defined]
    return out


def copy_flake(dest: Path, *, with_repo_tree: bool = False) -> Path:
    """Copy flake.nix, nix/ and the extension schema (and, with ``with_repo_tree``, extensions.lock, api/ and
    catalogue/ of the repo) into ``dest``; returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / "flake.nix", dest / "flake.nix")
    shutil.copytree(REPO / "nix", dest / "nix")
    schema = Path("lemonpack") / "extensions" / "schema" / "extension-v1.schema.json"  # lib.nix's feature vocabulary
    (dest / schema).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / schema, dest / schema)
    if with_repo_tree:
        shutil.copy2(REPO / "extensions.lock", dest / "extensions.lock")
        shutil.copytree(REPO / "api", dest / "api")
        shutil.copytree(REPO / "catalogue", dest / "catalogue")
    return dest


def write_api(root: Path, minor: int = 1, revision: int = 3) -> None:
    """``api/minor`` and ``revision`` change records under ``api/changes``."""
    (root / "api" / "changes").mkdir(parents=True, exist_ok=True)
    (root / "api" / "minor").write_text(f"{minor}\n")
    for i in range(1, revision + 1):
        (root / "api" / "changes" / f"{i:04d}-change-{i}.md").write_text(f"# change {i}\n")


def write_extension(directory: Path, name: str, *, api: str = ">= 0.1.0", providers=(), options=(),
                    targets=None, dependencies=(), sources: dict[str, str] | None = None) -> Path:
    """An extension directory: ``extension.json`` (schema-valid shape) plus stub sources.

    ``providers``: dicts with at least ``id``, ``keys``, ``target``; the rest is filled in.
    ``targets``: ``[{"name", "requires"}]``; default one target ``gufo_<name>`` with no needs.
    """
    directory.mkdir(parents=True, exist_ok=True)
    targets = targets if targets is not None else [{"name": f"gufo_{name}", "requires": []}]
    doc = {
        "name": name, "version": "1.0.0", "api_version": api, "entry": f"{name}_register",
        "providers": [{"capability": "text_generation",
                       "entry": f"{name}_{p['id'].replace('-', '_').replace('.', '_')}_register",
                       "probe": {"format": "gguf", "architecture": [name]}, **p} for p in providers],
        "options": list(options), "targets": targets, "dependencies": list(dependencies),
    }
    (directory / "extension.json").write_text(json.dumps(doc, indent=2) + "\n")
    for rel, text in (sources or {"extension.cpp": f"// {name}\nvoid {name}_register() {{}}\n"}).items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_text(text)
    return directory


def write_lock(root: Path, names: list[str]) -> None:
    """``extensions.lock`` at ``root`` (seed 002 section 6 format)."""
    (root / "extensions.lock").write_text(json.dumps({"schema": 1, "extensions": names}, indent=2) + "\n")


def consumer_flake(dest: Path, repo: Path, override: str) -> Path:
    """A consumer flake in ``dest`` taking ``repo`` as the ``path:`` input ``lemonpack`` whose
    ``packages.<system>.default`` is ``lemonpack.packages.<system>.gufo.override OVERRIDE``
    (OVERRIDE: Nix text of an attrset; paths in it are relative to ``dest``)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "flake.nix").write_text(
        "{\n"
        f"  inputs.lemonpack.url = \"path:{repo}\";\n"
        "  outputs = { self, lemonpack }: {\n"
        f"    packages.{SYSTEM}.default = lemonpack.packages.{SYSTEM}.gufo.override {override};\n"
        "  };\n"
        "}\n")
    return dest
