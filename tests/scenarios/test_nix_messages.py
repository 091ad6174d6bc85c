"""Nix and the CLI say the same thing (issue 26, "Messages" and "What to build" 6): a
community manifest that is a relative symlink out of its directory (shared/cases 70), a
schema-rejected manifest selected by its name (shared/cases 71), and change records that do
not match their lock, which every build step refuses (the Nix package runs
``lemonpack extensions generate``/``build``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.extensions import manifest
from support.nixflake import SYSTEM, copy_flake, nix

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("nix_installed")]


def cli(*args) -> dict:
    out = subprocess.run([sys.executable, "-m", "lemonpack.cli", *map(str, args)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "GUFO_EXTENSION_DIRS": ""})
    return json.loads(out.stdout)


def gufo(tree: Path, override: str) -> str:
    return f'(builtins.getFlake "path:{tree}").packages.{SYSTEM}.gufo.override {override}'


def error(out: subprocess.CompletedProcess) -> str:
    """What a failed build printed: the log lines of the failing build step (Nix's "> LINE",
    without the prefix), after Nix's own error text with its 7-space indent removed."""
    log = "\n".join(re.sub(r"^\s*> ?", "", line) for line in out.stderr.splitlines() if line.lstrip().startswith(">"))
    return out.stderr.replace("\n       ", "\n") + "\n" + log


def refused(tree: Path, override: str, cwd: Path) -> subprocess.CompletedProcess:
    """``nix build`` of ``gufo.override OVERRIDE``: the selection's verdict is a build step,
    which fails with the CLI's message."""
    out = nix("build", "--impure", "--expr", gufo(tree, override), cwd=cwd, timeout=600)
    assert out.returncode != 0 and not (cwd / "result").exists(), out.stderr
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return copy_flake(tmp_path_factory.mktemp("nix-messages") / "repo", with_repo_tree=True)


def test_a_symlinked_manifest_out_of_the_tree_gets_one_reason(tree, tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "symr.json").write_text(json.dumps(manifest("symr")))
    d = tmp_path / "community" / "symr"
    d.mkdir(parents=True)
    (d / "extension.json").symlink_to("../../outside/symr.json")
    (d / "extension.cpp").write_text("// symr\n")
    reason = (f"{d / 'extension.json'}: symlink target '../../outside/symr.json' resolves outside the destination: "
              "a symlink in an extension must stay inside its directory")
    by_name = cli("extensions", "generate", "--json", "--tree", tree, "--extension-dir", tmp_path / "community",
                  "--select", "symr", "--feature", "linux", "--out", tmp_path / "g")["message"]
    by_dir = cli("extensions", "generate", "--json", "--tree", tree, "--select", d, "--feature", "linux",
                 "--out", tmp_path / "g")["message"]
    assert by_name.startswith(f"cannot select symr: extension 'symr' was rejected: {reason}")
    assert by_dir == f"selected extension {d / 'extension.json'} was rejected:\n  {reason} (its sources are " \
                     "compiled, so they must be scanned)"
    out = refused(tree, f"{{ extensions = [ {d} ]; }}", tmp_path)
    assert by_dir in error(out), out.stderr


def test_a_rejected_manifest_selected_by_its_name_says_why(tree, tmp_path):
    doc = dict(manifest("badapi"), api_version="0.1")
    for d in (tmp_path / "community" / "my-ext-v2", tmp_path / "self" / "badapi"):
        d.mkdir(parents=True)
        (d / "extension.json").write_text(json.dumps(doc))
    for exts, m in ((tmp_path / "community", tmp_path / "community" / "my-ext-v2" / "extension.json"),
                    (tmp_path / "self" / "badapi", tmp_path / "self" / "badapi" / "extension.json")):
        message = cli("extensions", "generate", "--json", "--tree", tree, "--extension-dir", exts, "--select", "badapi",
                      "--feature", "linux", "--out", tmp_path / "g")["message"]
        assert message.startswith(f"cannot select badapi: extension 'badapi' was rejected: {m}: api_version: ")
        assert message.endswith("[schema-pattern]") and "no extension named" not in message
    out = refused(tree, f'{{ extensionDirs = [ {tmp_path / "self" / "badapi"} ]; extensions = [ "badapi" ]; }}',
                  tmp_path)
    assert message in error(out), out.stderr


@pytest.mark.parametrize("change", ["removed", "edited"])
def test_the_nix_package_refuses_records_that_do_not_match_their_lock(tmp_path, change):
    tree = copy_flake(tmp_path / "repo", with_repo_tree=True)
    rec = tree / "api" / "changes" / "0003-optional-probe-tensor-types.md"
    if change == "removed":
        rec.unlink()
    else:
        rec.write_text(rec.read_text() + "\nedited later\n")
    out = refused(tree, "{ }", tmp_path)
    assert f"0003-optional-probe-tensor-types.md was {change}" in error(out), out.stderr
