"""One set of rules: over the extension corpus (tests/extensions/corpus/, plus entries git
cannot hold, made here), the Nix package gives the CLI's verdict on every extension, and a
rejection's Nix error holds each reason `lemonpack extensions check` prints."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.extensions import manifest, write_extension
from support.nixflake import REPO, SYSTEM, copy_flake, nix

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("nix_installed")]

CORPUS = REPO / "tests" / "extensions" / "corpus"
VERDICTS = json.loads((CORPUS / "verdicts.json").read_text())


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """This repository's flake and extension tree, copied and locked offline (once)."""
    return copy_flake(tmp_path_factory.mktemp("corpus") / "repo", with_repo_tree=True)


def made(root: Path) -> dict[str, tuple[Path, dict]]:
    """Entries git cannot hold: (directory, expected verdict)."""
    out = {}
    d = write_extension(root / "fifo_unlisted", manifest("corpus_fifo_u"))
    os.mkfifo(d / "pipe")
    out["fifo_unlisted"] = (d, {"verdict": "accept"})
    doc = dict(manifest("corpus_fifo_l"), files=["extension.cpp", "pipe"])
    d = write_extension(root / "fifo_listed", doc)
    os.mkfifo(d / "pipe")
    out["fifo_listed"] = (d, {"verdict": "reject", "reason": "files[1]"})
    doc = dict(manifest("corpus_big"), files=["extension.cpp", "kernels/table.hip"])
    d = write_extension(root / "big_file", doc)
    (d / "kernels").mkdir()
    (d / "kernels" / "table.hip").write_bytes(b"// table 0123456789abcdef\n" * 120000)  # 3 MB
    out["big_file"] = (d, {"verdict": "accept"})
    return out


def entries(tmp: Path) -> dict[str, tuple[Path, dict]]:
    found = {name: (CORPUS / name, verdict) for name, verdict in VERDICTS.items()}
    assert sorted(p.name for p in CORPUS.iterdir() if p.is_dir()) == sorted(found), "verdicts.json is stale"
    return {**found, **made(tmp)}


def cli_check(tree: Path, d: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lemonpack.cli", "extensions", "check", "--tree", str(tree),
                           "--extension-dir", str(d), "--select", "all"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "1000"})


def test_nix_and_the_cli_give_the_same_verdicts(tree, tmp_path):
    """The corpus's directories are copied first (git keeps no fifo, and the copy's paths are
    the ones both sides name)."""
    got = {}
    for name, (src, expected) in entries(tmp_path / "made").items():
        d = tmp_path / "c" / name
        if src.is_relative_to(CORPUS):
            shutil.copytree(src, d, symlinks=True)
        else:
            d = src
        cli = cli_check(tree, d)
        out = nix("eval", "--impure", "--raw", "--expr",
                  f'((builtins.getFlake "path:{tree}").packages.{SYSTEM}.gufo.override '
                  f'{{ extensions = [ {d} ]; }}).drvPath')
        shown = out.stderr.replace("\n       ", "\n")
        got[name] = ("accept" if cli.returncode == 0 else "reject", "accept" if out.returncode == 0 else "reject")
        assert got[name][0] == expected["verdict"], f"{name}: cli {cli.stdout}{cli.stderr}"
        if expected["verdict"] == "reject":
            reasons = [line for line in cli.stdout.splitlines() if line.strip()]
            assert reasons and any(expected["reason"] in r for r in reasons), (name, cli.stdout)
            for line in reasons:  # each reason the CLI prints, in Nix's error
                # check prefixes "MANIFEST: " to a reason naming another file (a source's include)
                reason = line.removeprefix(f"{d}/extension.json: ") if line.count(f"{d}/") > 1 else line
                assert reason in shown, f"{name}: {reason!r} not in nix's error:\n{out.stderr}"
            assert "gufo-input" not in out.stderr  # the user's directory is named, not the copy
    assert {n: v for n, v in got.items() if v[0] != v[1]} == {}, got
