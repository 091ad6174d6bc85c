"""nix/lemonpack.nix names every runtime dependency of pyproject.toml (by its nixpkgs
attribute: the normalised project name, PEP 503), and the offline stand-in provides each of
those names."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]


def test_package_lists_every_pyproject_dependency():
    deps = {re.sub(r"[-_.]+", "-", Requirement(r).name).lower() for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
            ["dependencies"]}
    package = (REPO / "nix" / "lemonpack.nix").read_text()
    listed = set(re.search(r"dependencies = with python3Packages; \[(.*?)\];", package, re.S).group(1).split())
    assert deps <= listed, f"nix/lemonpack.nix lacks {sorted(deps - listed)}"
    stand_in = (REPO / "nix" / "offline-nixpkgs" / "python.nix").read_text()
    provided = set(re.findall(r'"([a-z0-9-]+)"', re.search(r"lib.genAttrs \[(.*?)\]", stand_in, re.S).group(1)))
    assert listed <= provided, f"nix/offline-nixpkgs/python.nix lacks {sorted(listed - provided)}"
