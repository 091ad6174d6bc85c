"""Package code that real nixpkgs takes (issue 26 point 1): every nixpkgs attribute name the
package code takes (tests/support/nixnames.py reads them from flake.nix, nix/*.nix and the
default.nix `lemonpack build` writes) is one recorded from nixpkgs' sources in
tests/fixtures/nixpkgs_attributes.json (the file and the commit each was read at), and nothing the
record says nixpkgs lacks (lightkube, lightkube-models) is taken from it. The stand-in offers
no Python package name outside the record either, so a build with it cannot hide a missing
one."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from support import nixnames

REPO = Path(__file__).resolve().parents[2]
RECORD = json.loads((REPO / "tests" / "fixtures" / "nixpkgs_attributes.json").read_text())


def test_record_names_a_commit_and_a_file_for_every_name():
    assert re.fullmatch(r"[0-9a-f]{40}", RECORD["reference_commit"])
    for name, where in RECORD["attributes"].items():
        assert where["file"].endswith(".nix") or where["file"].endswith(".sh"), name
        assert "commit" not in where or re.fullmatch(r"[0-9a-f]{40}", where["commit"]), name


def test_package_code_takes_only_recorded_nixpkgs_names():
    used = nixnames.used_names()
    unknown = {n: sorted(files) for n, files in used.items() if n not in RECORD["attributes"]}
    assert unknown == {}, f"names nixpkgs may not have (record them from nixpkgs' sources first): {unknown}"
    for rel, text in nixnames.package_sources().items():
        assert nixnames.problems(text) == [], rel


def test_a_planted_name_nixpkgs_lacks_is_caught():
    """The reader finds each form the package code uses, so a planted lightkube (which nixpkgs
    lacks) or a planted `with` would fail the test above."""
    planted = ('{ lib, python3Packages, fetchgit, src }: python3Packages.buildPythonApplication { dependencies = '
               '[ python3Packages.lightkube ]; x = lib.licenses.mit; inherit (lib) nosuchfn; }')
    got = nixnames.names(planted, call_package_args=True)
    assert {"python3Packages.lightkube", "fetchgit", "lib.nosuchfn", "lib.licenses.mit", "src"} <= got
    assert "python3Packages.lightkube" not in RECORD["attributes"]
    assert nixnames.problems("x: with python3Packages; [ lightkube ]") == [
        "`with python3Packages` hides the names it brings in"]
    assert nixnames.names("pkgs.lemonpack pkgs.stdenv.mkDerivation # pkgs.commented\n") == {"stdenv.mkDerivation"}


def test_every_pyproject_dependency_is_a_nixpkgs_package_or_built_by_the_flake():
    """pyproject.toml's dependencies under their nixpkgs attribute names (the normalised
    project name, PEP 503): each is a recorded python3Packages attribute, or one the flake
    builds from a pinned file (nix/python/pins.json) whose version the requirement admits."""
    pins = json.loads((REPO / "nix/python/pins.json").read_text())
    lemonpack_nix = nixnames.strip_comments((REPO / "nix/lemonpack.nix").read_text())
    deps = set(re.findall(r"\b(?:py|own)\.([a-z0-9-]+)", re.search(r"dependencies = \[(.*?)\];", lemonpack_nix,
                                                                     re.S).group(1)))
    own = set(re.findall(r"\bown\.([a-z0-9-]+)", lemonpack_nix))
    for raw in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(raw)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name in pins:
            assert req.specifier.contains(pins[name]["version"]), (raw, pins[name]["version"])
            # lightkube-models is installed with lightkube (one output: see nix/python-packages.nix)
            assert name in own or name == "lightkube-models" and "lightkube" in own, name
        else:
            assert name in deps, f"nix/lemonpack.nix lacks {name}"
            assert f"python3Packages.{name}" in RECORD["attributes"], name
            assert f"python3Packages.{name}" not in RECORD["absent"], name
    for absent in RECORD["absent"]:
        assert absent.split(" ")[0].split(".")[1] in pins


def test_stand_in_offers_only_recorded_python_names():
    stand_in = (REPO / "nix/offline-nixpkgs/python.nix").read_text()
    offered = set(re.findall(r'"([a-z0-9-]+)"', re.search(r"lib\.genAttrs \[(.*?)\]", stand_in, re.S).group(1)))
    assert {n for n in offered if f"python3Packages.{n}" not in RECORD["attributes"]} == set()
    assert "lightkube" not in offered and "lightkube-models" not in offered
