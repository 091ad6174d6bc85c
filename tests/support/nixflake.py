"""Driving the real ``nix`` on flakes: the repo's flake copied into a temp dir, fixture
extension trees, consumer flakes taking it as a ``path:`` input (issue 7, "Nix").

Flakes need a git or ``path:`` source: the tests copy what the flake reads (flake.nix, nix/,
the lemonpack package, and a tree of extensions) into a temp dir instead of depending on the
git state. There is no nixpkgs here: each copy is locked with its ``nixpkgs`` input replaced
by the stand-in ``nix/offline-nixpkgs`` (``nix flake lock --override-input``, offline), so
``path:COPY`` and ``builtins.getFlake "path:COPY"`` then work with no extra flag.
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


OFFLINE_NIXPKGS = REPO / "nix" / "offline-nixpkgs"
#: ``nix build``/``nix flake lock`` arguments replacing the flake's nixpkgs by the stand-in
OVERRIDE = ["--override-input", "nixpkgs", f"path:{OFFLINE_NIXPKGS}"]


def lock_offline(flake: Path) -> None:
    """Write ``flake/flake.lock`` with nixpkgs (of the flake, or of its ``lemonpack`` input
    when it has one) replaced by the stand-in; raises AssertionError with nix's stderr. The
    files the lemonpack package fetches (nix/python/pins.json) are put into the store first
    (support.nixpins), so that its builds fetch nothing."""
    from support.nixpins import add_pins_to_store

    add_pins_to_store()
    text = (flake / "flake.nix").read_text()
    which = "lemonpack/nixpkgs" if "inputs.lemonpack" in text else "nixpkgs"
    out = nix("flake", "lock", f"path:{flake}", "--override-input", which, f"path:{OFFLINE_NIXPKGS}")
    assert out.returncode == 0, out.stderr


def copy_flake(dest: Path, *, with_repo_tree: bool = False) -> Path:
    """Copy flake.nix, nix/, pyproject.toml, README.md and the lemonpack package (and, with
    ``with_repo_tree``, extensions.lock, api/, catalogue/extensions and include/ of the repo)
    into ``dest``, locked offline (:func:`lock_offline`); returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("flake.nix", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "nix", dest / "nix")
    shutil.copytree(REPO / "lemonpack", dest / "lemonpack", ignore=shutil.ignore_patterns("__pycache__"))
    if with_repo_tree:
        shutil.copy2(REPO / "extensions.lock", dest / "extensions.lock")
        shutil.copytree(REPO / "api", dest / "api")
        shutil.copytree(REPO / "catalogue" / "extensions", dest / "catalogue" / "extensions")
        shutil.copytree(REPO / "include", dest / "include", symlinks=True)
    lock_offline(dest)
    return dest


def write_api(root: Path, minor: int = 1, revision: int = 3) -> None:
    """``api/minor``, ``revision`` change records under ``api/changes`` and their lock
    ``api/changes.lock.json`` (every build step checks it)."""
    from lemonpack.extensions.apilock import LOCK_PATH, refresh_api_lock

    (root / "api" / "changes").mkdir(parents=True, exist_ok=True)
    (root / "api" / "minor").write_text(f"{minor}\n")
    for old in (root / "api" / "changes").glob("*.md"):
        old.unlink()
    (root / LOCK_PATH).unlink(missing_ok=True)
    for i in range(1, revision + 1):
        (root / "api" / "changes" / f"{i:04d}-change-{i}.md").write_text(f"# change {i}\n")
    refresh_api_lock(root)


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
    lock_offline(dest)
    return dest
