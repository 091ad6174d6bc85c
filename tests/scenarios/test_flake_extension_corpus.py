"""One set of rules: over the shared extension corpus (tests/extensions/corpus/, see its
README), the Nix package gives `lemonpack extensions check`'s verdict on every entry: the same
selected extensions and the same rejected manifests with the same reasons, naming the
entry's own paths (not the store copies Nix judges).

An entry holding a fifo is the exception the store imposes: Nix cannot copy a fifo, so
evaluation fails, naming it, where the CLI rejects the manifest it belongs to."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.extcorpus import entries, expected, materialize, verdict_problems
from support.nixflake import SYSTEM, copy_flake, nix

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("nix_installed")]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """This repository's flake and extension tree, copied and locked offline (once)."""
    return copy_flake(tmp_path_factory.mktemp("corpus") / "repo", with_repo_tree=True)


def cli_check(tree: Path, exts: Path) -> tuple[int, list[str], dict[str, list[str]]]:
    """``lemonpack extensions check --json`` over ``exts``: exit code, selected names,
    rejected manifest -> reasons."""
    run = subprocess.run([sys.executable, "-m", "lemonpack.cli", "extensions", "check", "--json", "--tree", str(tree),
                          "--extension-dir", str(exts), "--select", "all", "--feature", "linux"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "GUFO_EXTENSION_DIRS": ""})
    doc = json.loads(run.stdout)
    return run.returncode, doc["selected"], {r["manifest"]: r["reasons"] for r in doc["rejected"]}


@pytest.mark.parametrize("slug", entries())
def test_nix_gives_the_cli_verdict(tree, tmp_path, slug):
    root = materialize(slug, tmp_path / "corpus")
    want = expected(slug)
    code, selected, rejected = cli_check(tree, root / "exts")
    assert verdict_problems(want, code, selected, rejected, root) == []
    out = nix("eval", "--impure", "--json", "--expr",
              f'let g = (builtins.getFlake "path:{tree}").packages.{SYSTEM}.gufo.override '
              f'{{ extensionDirs = [ {root / "exts"} ]; extensions = "all"; features = [ "linux" ]; }}; in '
              '{ selected = map (e: e.name) g.selection.extensions; rejected = g.selection.rejected; }')
    fifos = [step["fifo"] for step in want.get("setup", []) if "fifo" in step]
    if fifos:
        assert out.returncode == 1 and code == 1
        assert all(f"{root}/{f}" in out.stderr for f in fifos), out.stderr
        return
    assert out.returncode == 0, out.stderr
    # the official tree Nix reads is the flake's, in the store
    doc = json.loads(re.sub(r"/nix/store/[0-9a-z]{32}-gufo-tree", str(tree), out.stdout))
    nix_rejected = {r["manifest"]: r["reasons"] for r in doc["rejected"]}
    assert doc["selected"] == selected
    assert nix_rejected == rejected
    assert verdict_problems(want, 1 if nix_rejected else 0, doc["selected"], nix_rejected, root) == []
