"""The shared corpus of good and bad extensions: ``lemonpack extensions check`` gives each
entry its expected verdict (exit code, selected extensions, rejected manifests and reasons).
The Nix package's test (tests/scenarios/test_flake_extension_corpus.py) runs the same entries (support.extcorpus)."""

from __future__ import annotations

import json

import pytest

from lemonpack.cli import main
from support.extcorpus import entries, expected, materialize, verdict_problems


def test_the_corpus_covers_what_it_promises():
    slugs = entries()
    assert len(slugs) >= 20
    assert sum(expected(s)["exit"] == 0 for s in slugs) >= 3 and sum(expected(s)["exit"] == 1 for s in slugs) >= 15


@pytest.mark.parametrize("slug", entries())
def test_cli_verdict(tree, tmp_path, capsys, monkeypatch, slug):
    monkeypatch.delenv("GUFO_EXTENSION_DIRS", raising=False)
    root = materialize(slug, tmp_path / "corpus")
    code = main(["extensions", "check", "--tree", str(tree), "--extension-dir", str(root / "exts"),
                 "--select", "all", "--feature", "linux", "--json"])
    doc = json.loads(capsys.readouterr().out)
    rejected = {r["manifest"]: r["reasons"] for r in doc["rejected"]}
    assert verdict_problems(expected(slug), code, doc["selected"], rejected, root) == []
