"""The include allowlist's table (tests/support/include_cases.py) through the Nix package: the
selection step (``lemonpack extensions generate`` as a build step) gives the CLI's verdict and
reasons on every case, and the package's build (``lemonpack extensions build``) compiles the
accepted forms and none of the refused ones (issue 26, "What to build" 5: "in the CLI and in
Nix"; shared/cases 66)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.include_cases import verdict_problems, write_cases
from support.nixflake import SYSTEM, copy_flake, nix

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("nix_installed")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("nix-includes")
    tree = copy_flake(base / "repo", with_repo_tree=True)
    root = base / "exts"
    return tree, root, write_cases(root)


def gufo(tree: Path, root: Path) -> str:
    return (f'(builtins.getFlake "path:{tree}").packages.{SYSTEM}.gufo.override '
            f'{{ extensionDirs = [ {root} ]; extensions = "all"; features = [ "linux" ]; }}')


def test_nix_gives_the_cli_verdict_on_every_case(setup):
    tree, root, cases = setup
    run = subprocess.run([sys.executable, "-m", "lemonpack.cli", "extensions", "check", "--json", "--tree", str(tree),
                          "--extension-dir", str(root), "--select", "all", "--feature", "linux"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "GUFO_EXTENSION_DIRS": ""})
    cli = json.loads(run.stdout)
    cli_rejected = {r["manifest"]: r["reasons"] for r in cli["rejected"]}
    assert verdict_problems(cases, root, cli["selected"], cli_rejected) == []
    out = nix("eval", "--impure", "--json", "--expr",
              f"let g = {gufo(tree, root)}; in "
              "{ selected = map (e: e.name) g.selection.extensions; rejected = g.selection.rejected; }", timeout=600)
    assert out.returncode == 0, out.stderr
    doc = json.loads(re.sub(r"/nix/store/[0-9a-z]{32}-gufo-tree", str(tree), out.stdout))
    rejected = {r["manifest"]: r["reasons"] for r in doc["rejected"]}
    assert verdict_problems(cases, root, doc["selected"], rejected) == []
    assert doc["selected"] == cli["selected"] and rejected == cli_rejected


def test_the_nix_package_compiles_the_accepted_forms_only(setup, tmp_path):
    tree, root, cases = setup
    out = nix("build", "--impure", "--expr", gufo(tree, root), cwd=tmp_path, timeout=900)
    assert out.returncode == 0, out.stderr
    registry = subprocess.run([str(tmp_path / "result" / "bin" / "gufo-registry"), "--json"], capture_output=True,
                              text=True, timeout=30, check=True)
    built = {p["extension"] for p in json.loads(registry.stdout)}
    assert {n for n, c in cases.items() if c.refused is None} <= built
    assert not {n for n, c in cases.items() if c.refused} & built


def test_the_verdict_step_has_the_compiler_the_include_check_runs():
    """The include check runs the C++ preprocessor inside the selection's build step. In
    nixpkgs `runCommand` is `runCommandWith { stdenv = stdenvNoCC; }`
    (pkgs/build-support/trivial-builders/default.nix, read at the commit of
    tests/nix/nixpkgs_attributes.json): no compiler on its PATH, so every community extension
    would be refused there. The step is a `stdenv.mkDerivation` (stdenv has the compiler);
    the stand-in cannot show the difference (its tools are the host's), so the expression is
    read."""
    text = (Path(__file__).resolve().parents[2] / "nix" / "gufo.nix").read_text()
    code = "\n".join(line.split("#")[0] for line in text.splitlines())
    assert re.search(r"\bverdict\s*=\s*stdenv\.mkDerivation\b", code)
    assert not re.search(r"\brunCommand\b", code)
